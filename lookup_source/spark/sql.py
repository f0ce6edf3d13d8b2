"""SQL access: a registered lookup table and a lookup-join table function.

::

    from lookup_source import register_lookup_table

    register_lookup_table(spark, "users", schema="user_id long, name string, tier int",
                          options={"connector": "redis", "url": "redis://localhost:6379/0",
                                   "redis.key.pattern": "user:{key}"})

    spark.sql("SELECT * FROM users WHERE user_id IN (1, 2, 3)")
    spark.sql("SELECT * FROM users_lookup(TABLE(events), 'user_id')")          # left join
    spark.sql("SELECT * FROM users_lookup(TABLE(events), 'user_id', 'inner')")

A SQL ``JOIN`` against ``users`` is planned by Spark as a full scan of the table (join keys are
never pushed into a Python data source), so it works only for stores that can scan and reads
the whole table; the table function looks up just the keys of the events, on each task.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pyspark.sql.types import StructType

from lookup_source.connector_api.secrets import read_on_driver
from lookup_source.errors import SchemaError
from lookup_source.functions import LookupFunction
from lookup_source.settings import (
    FILTER_PUSHDOWN,
    KEY_COLUMN,
    PARTITION_BY_KEY,
    SQL_JOIN_FUNCTION,
    STRATEGY_LOOKUP_MAX_INPUT_ROWS,
    LookupOptions,
    option_strings,
    parse_options,
)
from lookup_source.spark.arguments import cluster_cores, lookup_options_of
from lookup_source.spark.metrics import new_accumulator, remember_join_function
from lookup_source.spark.plan import INFERRING, LookupPlan
from lookup_source.spark.source_registry import register_data_source
from lookup_source.spark.strategy import sql_join_limit
from lookup_source.spark.versions import TABLE_FUNCTION

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("lookup_source")

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def register_lookup_table(
    spark: SparkSession,
    name: str,
    *,
    options: Mapping[str, Any] | LookupOptions | None = None,
    schema: StructType | str | None = None,
    pushdown: bool = False,
    fetch: Any = None,
    fetch_many: Any = None,
) -> None:
    """Register ``name`` (a temporary view over the ``asynclookup`` data source) and the table
    function ``<name>_lookup(TABLE(t), 'key_column[,key_column]' [, 'left' | 'inner'])``.

    Without ``schema``, the store describes the table (Postgres) and its primary key is the key.

    With your own async function as ``fetch=`` or ``fetch_many=`` (see ``lookup_join``), only
    the table function is registered (a view reads through the data source, whose options are
    strings); ``schema`` is required and ``options`` optional.

    ``pushdown=True`` lets ``WHERE key IN (...)`` fetch just those keys (with
    ``spark.sql.python.filterPushdown.enabled=true``). It is off by default because Spark 4.1+
    caches the pushed-down key list per view and reuses it for a later query on the view whose
    filters it cannot push (``SELECT *``, ``OR``...), which would then see only those keys. Off,
    such queries scan the table (Postgres, Redis) and Spark filters the rows: always right.
    """
    TABLE_FUNCTION.require()
    if not isinstance(name, str) or not _NAME.match(name):
        raise SchemaError(f"lookup table name {name!r} must be a plain SQL identifier")
    from lookup_source.spark.table_function import lookup_table_function

    function = LookupFunction.of(fetch, fetch_many)
    if function is not None:
        _register_function(spark, name, function, options, schema)
        return
    if options is None:
        lookup_options_of(None, None)  # raises: a connector or a function is required
        return
    # the view reads through the data source, which takes strings: the options as given (or
    # as they were parsed), parsed here once for the table function
    raw = options.to_strings() if isinstance(options, LookupOptions) else option_strings(options)
    if not any(key.strip().lower() == FILTER_PUSHDOWN for key in raw):
        raw[FILTER_PUSHDOWN] = "true" if pushdown else "false"
    lookup_options = parse_options(raw)
    if schema is None:
        schema, lookup_options = _described(lookup_options, raw)
    if lookup_options.split_by:  # the table function's tasks: at most every core
        lookup_options = lookup_options.split_over(cluster_cores(spark, lookup_options.split_by))
    plan = LookupPlan.build(lookup_options, schema)
    # partition.by-key shapes the table function's input; the view is a scan
    view_options = {k: v for k, v in raw.items() if k.strip().lower() != PARTITION_BY_KEY}
    plan = _sql_join_limit(plan, name)
    limit = plan.options.plan.lookup_max_input_rows
    if limit is not None:  # also for a table function made from the view's options (the view
        view_options[STRATEGY_LOOKUP_MAX_INPUT_ROWS] = str(limit)  # in another session)
    metrics = new_accumulator(spark, name)  # lookup_metrics(name) reads it
    table_function = lookup_table_function(plan, metrics, spark, name=name)
    _register(spark, name, plan, view_options, table_function)


def _described(
    lookup_options: LookupOptions, raw: dict[str, str]
) -> tuple[StructType | str, LookupOptions]:
    """The table's schema as the store describes it, and the options keyed by its primary
    key unless ``key.column`` names the key (``raw``, the view's options, follows)."""
    with read_on_driver(INFERRING):
        schema, keys = lookup_options.connector_class().infer_schema(lookup_options.for_connector())
    if lookup_options.key_columns is None:
        lookup_options = lookup_options.with_key_columns(keys)
        raw[KEY_COLUMN] = lookup_options.given[KEY_COLUMN]
    return schema, lookup_options


def _register(
    spark: SparkSession,
    name: str,
    plan: LookupPlan,
    view_options: dict[str, str],
    table_function: Any,
) -> None:
    """The view ``name`` over the data source, and the table function under its public name
    (``<name>_lookup``) and under one that only this view names (``sql.join.function``): the
    SQL extension rewrites a JOIN against the view into a call of that one, which no later
    registration under the same name can change."""
    join_function = f"{name}_lookup_{uuid.uuid4().hex[:8]}"
    register_data_source(spark)
    options = {**view_options, SQL_JOIN_FUNCTION: join_function}
    reader = spark.read.format("asynclookup").options(**options).schema(plan.schema)
    reader.load().createOrReplaceTempView(name)
    spark.udtf.register(f"{name}_lookup", table_function)
    spark.udtf.register(join_function, table_function)
    remember_join_function(spark, name, join_function)


def _sql_join_limit(plan: LookupPlan, name: str) -> LookupPlan:
    """``strategy=auto``: ``plan`` with the input size up to which a SQL JOIN against the view
    runs as lookups (``strategy.lookup.max-input-rows``), worked out once (the store is asked
    for its table's size); its table function judges each JOIN by it
    (:func:`~lookup_source.spark.strategy.sql_join_decision`)."""
    if plan.options.plan.strategy != "auto":
        return plan
    limit, why = sql_join_limit(plan)
    if limit is None:
        log.info("asynclookup: a SQL JOIN against %s runs as lookups at any size: %s", name, why)
        return plan
    log.info(
        "asynclookup: a SQL JOIN against %s runs as lookups for inputs up to %s rows (%s), "
        "as a scan and Spark's join above",
        name,
        f"{limit:,}",
        why,
    )
    options = plan.options
    planned = dataclasses.replace(options.plan, lookup_max_input_rows=limit)
    return dataclasses.replace(plan, options=dataclasses.replace(options, plan=planned))


def _register_function(
    spark: SparkSession,
    name: str,
    function: LookupFunction,
    options: Mapping[str, Any] | LookupOptions | None,
    schema: StructType | str | None,
) -> None:
    """The table function of a lookup through your own ``fetch=``/``fetch_many=``, and a view
    that a SQL JOIN can name (the SQL extension rewrites the JOIN into the table function; the
    view itself cannot be read: a function cannot list its table, and the data source takes
    options as strings only)."""
    from lookup_source.spark.table_function import lookup_table_function

    if schema is None:
        raise SchemaError(
            f"with {function.argument}=, give the schema: the key column(s), then the "
            "value columns your function returns, e.g. 'user_id long, name string'"
        )
    lookup_options = lookup_options_of(options, function)
    view_options = lookup_options.to_strings()
    if lookup_options.split_by:
        lookup_options = lookup_options.split_over(cluster_cores(spark, lookup_options.split_by))
    plan = LookupPlan.build(lookup_options, schema)
    metrics = new_accumulator(spark, name)
    table_function = lookup_table_function(plan, metrics, spark, function, name=name)
    view_options = {k: v for k, v in view_options.items() if k.strip().lower() != PARTITION_BY_KEY}
    _register(spark, name, plan, view_options, table_function)
