"""The table function the SQL extension makes for an asynclookup relation that was not
registered with :func:`~lookup_source.register_lookup_table` (``CREATE TEMPORARY VIEW ... USING
asynclookup``, a ``spark.read.format("asynclookup")`` DataFrame), when a JOIN against it is
rewritten into lookups.

The extension (``asynclookup.sql.TableFunctions``) registers a Python table function whose
pickled command is the call ``join_function(options, schema, tasks)``: the relation's options
(as the data source received them) and schema, as JSON, and the session's default parallelism.
Each Python worker that unpickles it, for the function's ``analyze`` or for a task, gets the
lookup table function of those options. The options never appear in a plan's text.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql.types import StructType

from lookup_source.settings import parse_options
from lookup_source.spark.datasource import marked_keys
from lookup_source.spark.plan import LookupPlan
from lookup_source.spark.table_function import lookup_handler


def join_function(options: str, schema: str, tasks: str = "1") -> type:
    """The lookup table function's class for a relation's ``options`` and ``schema`` (JSON);
    ``tasks``: how many of its tasks may run at once (the session's default parallelism), what
    ``rate.limit.total`` and a budget without coordinator are split over."""
    given: dict[str, Any] = json.loads(options)
    lookup_options = parse_options({str(k): str(v) for k, v in given.items()})
    if lookup_options.split_by:
        lookup_options = lookup_options.split_over(max(1, int(tasks)))
    struct = StructType.fromJson(json.loads(schema))
    if lookup_options.key_columns is None and marked_keys(struct):
        lookup_options = lookup_options.with_key_columns(marked_keys(struct))
    plan = LookupPlan.build(lookup_options, struct)
    return lookup_handler(plan, name=f"{lookup_options.connector}_sql_join")
