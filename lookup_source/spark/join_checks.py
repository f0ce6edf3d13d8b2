"""What a SQL JOIN rewritten into lookups must hold to give Spark's join's rows, checked by the
lookup table function's ``analyze`` when the SQL extension calls it (mode ``sql-join``).

The extension (Java) sees the plan; only Python knows the store. A SQL JOIN's lookups compare
keys as Spark does (``key.equality=spark``): a connector that reports each match's own key
(``LookupClient.reports_keys``, Postgres) has the matches of other keys dropped (a ``citext``
or case-insensitive key answers ``'eu'`` with ``'EU'``'s row); for one that does not, the table
function has the last word: when the store matches keys otherwise than Spark compares them, or
when the lookup cannot be set up at all, ``analyze`` answers with a single column
``__asynclookup_veto`` whose metadata says why, and the extension puts the original join back
(Spark's scan and join): the answer never changes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import pickle
import threading
from collections.abc import Callable
from typing import Any

from pyspark.sql.types import BooleanType, StructField, StructType

from lookup_source.connector_api.secrets import read_on_driver
from lookup_source.engine.clock import monotonic
from lookup_source.engine.scan import keys_match_exactly, table_facts
from lookup_source.redaction import redact_text
from lookup_source.settings import KeySettings
from lookup_source.spark.join_markers import (
    DECISION_METADATA,
    FACT_INPUT_ROWS,
    FACT_REWRITE,
    FACT_TABLE_KEYS,
    VETO,
    VETO_REASON,
)
from lookup_source.spark.plan import LookupPlan

log = logging.getLogger("lookup_source")


CHECKING = (
    "a SQL JOIN is rewritten into lookups only when the store matches keys as Spark compares "
    "them, which the driver asks the store (or set the variable on the driver)"
)

_KEPT_S = 60.0
_CHECKED: dict[str, tuple[float, str | None]] = {}
_LOCK = threading.Lock()


_INEXACT = {
    False: "the store matches the key otherwise than Spark compares it (a key type such as "
    "citext, char(n), uuid or numeric): Spark's join keeps Spark's equality",
    True: "a key cannot reach the store as itself (a key column read as another type than its "
    "own, such as integers read as strings): Spark's join keeps every row it finds",
}
"""Why a SQL JOIN stays Spark's, by whether the connector reports its rows' keys."""


@dataclasses.dataclass(frozen=True)
class RuleFacts:
    """What the SQL extension's rule tells the table function of a JOIN it rewrote (the call's
    last argument, JSON): Spark's estimate of the input's rows, and the table's key columns as
    the rule took them from the relation."""

    input_rows: int | None = None
    table_keys: tuple[str, ...] | None = None
    rewrite: str = ""
    """The rewrite's id (its decision's metadata key carries it)."""

    @classmethod
    def parse(cls, text: str | None) -> RuleFacts:
        """The facts in ``text`` (None or empty: none told); raises on anything malformed."""
        if not text or not text.strip():
            return cls()
        given = json.loads(text)
        if not isinstance(given, dict):
            raise ValueError(f"the rule's facts are not a JSON object: {text[:100]!r}")
        rows = given.get(FACT_INPUT_ROWS)
        if rows is not None and (type(rows) is not int or rows < 0):
            raise ValueError(f"{FACT_INPUT_ROWS} is not a count of rows: {rows!r}")
        keys = given.get(FACT_TABLE_KEYS)
        if keys is not None and (
            not isinstance(keys, list) or not all(isinstance(k, str) for k in keys)
        ):
            raise ValueError(f"{FACT_TABLE_KEYS} is not a list of column names: {keys!r}")
        rewrite = given.get(FACT_REWRITE, "")
        if not isinstance(rewrite, str):
            raise ValueError(f"{FACT_REWRITE} is not an id: {rewrite!r}")
        return cls(rows, None if keys is None else tuple(keys), rewrite)

    def disagreement(self, plan: LookupPlan) -> str | None:
        """Why the rule's key columns are not the data source's (then its rewrite would join
        on other columns than the lookups use), or None."""
        if self.table_keys is None:
            return None
        if [k.lower() for k in self.table_keys] == [k.lower() for k in plan.key_names]:
            return None
        return (
            f"the SQL rule took the table's key to be {', '.join(self.table_keys)}, the data "
            f"source {', '.join(plan.key_names)}: Spark's join"
        )


def decided(schema: StructType, key_column: str, reason: str, rewrite: str) -> StructType:
    """``schema``, its column ``key_column`` (a key of the input, which the rewrite drops)
    saying why the join runs as lookups, for the rule to record as rewrite ``rewrite``'s
    decision (under the metadata key ``asynclookup.decision.<rewrite>``)."""
    key = f"{DECISION_METADATA}.{rewrite}"
    return StructType(
        [
            StructField(f.name, f.dataType, f.nullable, {**f.metadata, key: reason})
            if f.name == key_column
            else f
            for f in schema.fields
        ]
    )


def veto(reason: str) -> StructType:
    """The output schema that refuses a rewrite, saying why."""
    return StructType([StructField(VETO, BooleanType(), True, {VETO_REASON: reason})])


def refusal(plan: LookupPlan) -> str | None:
    """Why a SQL JOIN against ``plan``'s table must stay Spark's, or None. Asked at each
    query's analysis; the store's answer is kept a minute per configuration."""
    config = for_sql_join(plan).connector_config()
    client_class = plan.options.connector_class()
    if not client_class.can_scan(config):
        return None  # Spark's join cannot read the table at all: lookups are the answer
    if plan.options.on_error != "fail":
        return (
            f"the table has on.error={plan.options.on_error}: Spark's scan of it gives nulls "
            "where a value does not fit its column, where a JOIN's lookups fail: Spark's join"
        )

    def ask() -> str | None:
        exact = keys_match_exactly(client_class, config)
        return None if exact else _INEXACT[client_class.reports_keys]

    return _kept_answer("keys", client_class, config, ask, "how it matches keys")


def not_in_refusal(plan: LookupPlan) -> str | None:
    """Why a SQL ``NOT IN (SELECT key FROM table)`` must stay Spark's, or None: its answer
    depends on whether the table holds a null key, or any row, which the table function asks
    the store at each run (:mod:`.not_in`); a store that cannot tell keeps Spark's plan. What
    it says now does not decide the plan (so that a query analyzed again is the same plan, as
    Spark's cache needs), only whether it can say."""
    config = for_sql_join(plan).connector_config()
    client_class = plan.options.connector_class()

    def ask() -> str | None:
        if table_facts(client_class, config).known:
            return None
        return (
            "NOT IN needs to know whether the table holds a null key, or any row, which this "
            "store cannot tell: Spark's plan"
        )

    return _asked(ask, "about its table")


def _kept_answer(
    question: str,
    client_class: type[Any],
    config: Any,
    ask: Callable[[], str | None],
    about: str,
) -> str | None:
    """``ask()``'s answer for this configuration, asked of the store on the driver and kept a
    minute (a reason to keep Spark's plan, or None); a store that cannot be asked keeps it."""
    identity = hashlib.sha256(
        pickle.dumps((question, client_class.__module__, client_class.__name__, config))
    ).hexdigest()
    now = monotonic()
    with _LOCK:
        kept = _CHECKED.get(identity)
    if kept is not None and now - kept[0] < _KEPT_S:
        return kept[1]
    why = _asked(ask, about)
    with _LOCK:
        _CHECKED[identity] = (now, why)
    return why


def _asked(ask: Callable[[], str | None], about: str) -> str | None:
    """``ask()``'s answer, asked of the store on the driver now; a store that cannot be asked
    keeps Spark's join."""
    try:
        with read_on_driver(CHECKING):
            return ask()
    except Exception as error:  # cannot tell: keep Spark's join
        why = f"the store could not be asked {about}: {type(error).__name__}"
        log.info("asynclookup: %s (%s)", why, error)
        return why


def untravelled(schema: StructType) -> str | None:
    """Why a column of ``schema`` (the input a rewritten JOIN hands the table function) cannot
    travel through Arrow to the Python worker on this PySpark (a year-month interval, say), or
    None: such a JOIN stays Spark's, which never moves its rows through Python."""
    import inspect

    from pyspark.sql.pandas.types import to_arrow_type

    # the worker converts with the session's time zone (4.2+ asks for one; 4.1 has none)
    zone: dict[str, Any] = (
        {"timezone": "UTC"} if "timezone" in inspect.signature(to_arrow_type).parameters else {}
    )
    for field in schema.fields:
        try:
            to_arrow_type(field.dataType, **zone)
        except Exception as error:  # PySpark's own refusal, whatever its class
            return (
                f"the input column {field.name} ({field.dataType.simpleString()}) cannot travel "
                f"through Arrow to Python on this PySpark: {type(error).__name__}"
            )
    return None


def for_sql_join(plan: LookupPlan) -> LookupPlan:
    """The plan a SQL JOIN's lookups run with, whatever the table's options say: Spark's
    equality of keys and a key the store cannot hold a miss (:meth:`KeySettings.as_spark_join`),
    every match of a key (``lookup.max-matches`` off), and a failed lookup failing the query
    (``on.error=fail``), as a failed scan fails Spark's join: no row it would not give."""
    options = dataclasses.replace(
        plan.options, keys=KeySettings.as_spark_join(), max_matches=0, on_error="fail"
    )
    return dataclasses.replace(plan, options=options)


def describe_failure(error: BaseException) -> str:
    """A refusal's reason for an ``analyze`` that failed: its type and first line."""
    text = redact_text(str(error)).strip()
    text = text.splitlines()[0][:300] if text else ""
    return f"the table function cannot look this table up: {type(error).__name__}: {text}"
