"""The plan scenario's point-in-time join (PySpark 4.1+, the SQL extension): a versioned Postgres
table (``--plan-table-rows`` rows, five versions of each user, each valid for 30 days) and
``--plan-point-in-time-rows`` visits, each joined to the version valid at its time::

    SELECT v.event_id, t.tier FROM visits v LEFT JOIN versions t
      ON v.user_id = t.user_id AND v.ts >= t.valid_from AND v.ts < t.valid_to

by Spark's JDBC reader and its join (with and without ``broadcast``), by the SQL extension's
rewrite (lookups of the visits' users, each version judged against each visit in Arrow) and
by the same JOIN with the rewrite off (the data source's scan and Spark's join). Every answer
is checked against the JDBC join's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lookup_source.bench.plan_table import jdbc_table, kept_table

POINT_IN_TIME = "point-in-time: "
"""The prefix of the methods of this part (the report compares each with its own JDBC join)."""
VERSIONS = 5
"""Versions of each user in the table."""
VERSIONS_TABLE = "asynclookup_bench_versions"
VERSIONS_SCHEMA = "user_id long, tier int, valid_from timestamp, valid_to timestamp"
QUERY = (
    "SELECT v.event_id, t.tier FROM {visits} v LEFT JOIN {table} t "
    "ON v.user_id = t.user_id AND v.ts >= t.valid_from AND v.ts < t.valid_to"
)


def ensure_versions(url: str, rows: int) -> str:
    """The versioned table of ``rows`` rows (made once, kept between runs), analysed."""
    table = f"{VERSIONS_TABLE}_{rows}"
    users = max(1, rows // VERSIONS)
    kept_table(
        url,
        table,
        rows,
        "(user_id bigint NOT NULL, tier int NOT NULL, valid_from timestamptz NOT NULL, "
        "valid_to timestamptz NOT NULL, PRIMARY KEY (user_id, valid_from))",
        "SELECT u, (u + v) % 7, "
        "timestamptz '2026-01-01 00:00+00' + v * interval '30 days', "
        "timestamptz '2026-01-01 00:00+00' + (v + 1) * interval '30 days' "
        f"FROM generate_series(0, {users - 1}) u, generate_series(0, {VERSIONS - 1}) v "
        f"LIMIT {rows}",
    )
    return table


def visits(spark: Any, rows: int, users: int, tasks: int) -> tuple[Any, int]:
    """``rows`` visits of users spread over the table's (a tenth beyond it: misses), each at a
    time within the versions' span or a little past it (no version valid then), cached; and
    the distinct users they visit."""
    from pyspark.sql import functions as F

    spread = users + users // 10
    days = VERSIONS * 30 + 10
    start = 1_767_225_600  # 2026-01-01 00:00 UTC, the first versions' start
    hour = F.pmod(F.xxhash64("id", F.lit(7)), F.lit(days * 24))
    df = spark.range(rows, numPartitions=tasks).select(
        F.col("id").alias("event_id"),
        F.pmod(F.xxhash64("id"), F.lit(spread)).cast("long").alias("user_id"),
        F.timestamp_seconds(F.lit(start) + hour * 3600).alias("ts"),
    )
    df = df.cache()
    df.count()
    return df, df.select("user_id").distinct().count()


def point_in_time(
    spark: Any,
    args: Any,
    options: dict[str, str],
    measure_for: Callable[[int, int], Any],
    has_jdbc: bool,
) -> None:
    """The point-in-time join of ``--plan-point-in-time-rows`` visits, each method measured by
    ``measure_for(visits, distinct users)`` (the plan scenario's
    :class:`~lookup_source.bench.plan.Measure`) and its answer checked against the
    reference's: Spark's JDBC reader and join (without the JDBC driver: the rewrite off)."""
    from lookup_source import register_lookup_table
    from lookup_source.spark.sql_extension import ENABLED

    rows = args.plan_table_rows
    table = ensure_versions(args.postgres_url, rows)
    name, events = "bench_plan_versions", "bench_plan_visits"
    register_lookup_table(
        spark,
        name,
        schema=VERSIONS_SCHEMA,
        options={**options, "postgres.table": table, "key.column": "user_id"},
    )
    df, distinct = visits(spark, args.plan_point_in_time_rows, rows // VERSIONS, args.tasks)
    df.createOrReplaceTempView(events)
    measure = measure_for(args.plan_point_in_time_rows, distinct)
    if has_jdbc:
        dim = jdbc_table(spark, args.postgres_url, table, rows // VERSIONS, args.tasks, "user_id")
        dim.createOrReplaceTempView(f"{name}_jdbc")

    def query(table: str, enabled: bool, hint: str = "") -> Any:
        spark.conf.set(ENABLED, "true" if enabled else "false")
        sql = QUERY.format(visits=events, table=table)
        return spark.sql(sql.replace("SELECT", f"SELECT {hint}", 1) if hint else sql)

    def rewritten(out: Any) -> tuple[str, dict[str, Any]]:
        plan = out._jdf.queryExecution().executedPlan().toString()
        lookups = "ArrowEvalPythonUDTF" in plan
        return ("runs as lookups" if lookups else "Spark's scan and join"), {"lookups": lookups}

    try:
        if has_jdbc:
            measure(
                f"{POINT_IN_TIME}Spark JDBC + join",
                lambda: query(f"{name}_jdbc", False),
                reference=True,
            )
            measure(
                f"{POINT_IN_TIME}Spark JDBC + broadcast(dim)",
                lambda: query(f"{name}_jdbc", False, "/*+ BROADCAST(t) */"),
            )
        else:
            measure(
                f"{POINT_IN_TIME}SQL JOIN, rewrite off",
                lambda: query(name, False),
                reference=True,
                describe=rewritten,
            )
        measure(f"{POINT_IN_TIME}SQL JOIN", lambda: query(name, True), describe=rewritten)
        if has_jdbc:
            measure(
                f"{POINT_IN_TIME}SQL JOIN, rewrite off",
                lambda: query(name, False),
                describe=rewritten,
            )
    finally:
        spark.conf.unset(ENABLED)
        df.unpersist()
