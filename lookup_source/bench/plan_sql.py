"""The plan scenario's SQL rows, where the session has the SQL extension (PySpark 4.1+): the
table registered for SQL, and the same join as a SQL ``JOIN`` (rewritten into lookups, and with
the rewrite off), the table function, and a ``JOIN`` against the table with ``strategy=auto``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lookup_source.bench.plan_table import SCHEMA


@dataclass(frozen=True)
class SqlTables:
    """The table registered for SQL twice (``lookup`` and ``auto``), and the input's view."""

    lookup: str = "bench_plan_users"
    auto: str = "bench_plan_users_auto"
    events: str = "bench_plan_events"


def sql_tables(spark: Any, options: dict[str, str]) -> SqlTables | None:
    """The scenario's table registered for SQL, when this session has the SQL extension
    (PySpark 4.1+, the session started by the bench with it)."""
    from lookup_source import register_lookup_table
    from lookup_source.spark.sql_extension import extension_active

    if not extension_active(spark):
        return None
    tables = SqlTables()
    register_lookup_table(spark, tables.lookup, schema=SCHEMA, options=options)
    register_lookup_table(
        spark, tables.auto, schema=SCHEMA, options={**options, "strategy": "auto"}
    )
    return tables


def sql_joins(spark: Any, measure: Callable[..., None], df: Any, tables: SqlTables) -> None:
    """The same join in SQL: a JOIN rewritten into lookups by the SQL extension, the same JOIN
    with the rewrite off (the data source's scan and Spark's join), the table function, and a
    JOIN against the table registered with ``strategy=auto``. ``measure``: the plan
    scenario's :class:`~.plan.Measure` for the input."""
    from lookup_source.spark.sql_extension import ENABLED

    df.createOrReplaceTempView(tables.events)
    join = (
        "SELECT e.event_id, e.uid, u.name, u.tier FROM {events} e "
        "LEFT JOIN {table} u ON e.uid = u.uid"
    )

    def query(table: str, enabled: bool = True) -> Any:
        spark.conf.set(ENABLED, "true" if enabled else "false")
        return spark.sql(join.format(events=tables.events, table=table))

    def rewritten(out: Any) -> tuple[str, dict[str, Any]]:
        plan = out._jdf.queryExecution().executedPlan().toString()
        lookups = "ArrowEvalPythonUDTF" in plan
        return ("runs as lookups" if lookups else "Spark's scan and join"), {"lookups": lookups}

    function = f"SELECT * FROM {tables.lookup}_lookup(TABLE({tables.events}), 'uid')"
    spark.sql(function).write.format("noop").mode("overwrite").save()  # warm: not a method's
    try:
        measure("SQL JOIN", lambda: query(tables.lookup), describe=rewritten)
        measure("SQL JOIN, rewrite off", lambda: query(tables.lookup, False), describe=rewritten)
        measure("SQL table function", lambda: spark.sql(function))
        measure("SQL JOIN, strategy=auto", lambda: query(tables.auto), describe=rewritten)
    finally:
        spark.conf.unset(ENABLED)
