"""The plan scenario's data: its Postgres table (made once, kept between runs, analysed), its
inputs (distinct keys that grow with the input, a tenth of them missing the table), and the
table as Spark's JDBC reader reads it."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlsplit

PLAN_TABLE = "asynclookup_bench_plan"
SCHEMA = "uid long, name string, tier int"


def ensure_table(url: str, rows: int) -> str:
    """The scenario's table of ``rows`` rows (made once, kept between runs), analysed."""
    table = f"{PLAN_TABLE}_{rows}"
    kept_table(
        url,
        table,
        rows,
        "(uid bigint PRIMARY KEY, name text, tier int)",
        f"SELECT g, 'user-' || g, g % 7 FROM generate_series(0, {rows - 1}) g",
    )
    return table


def kept_table(url: str, table: str, rows: int, columns: str, select: str) -> None:
    """``table`` (``columns``: its definition) filled with the ``rows`` rows ``select`` gives and
    analysed — made once: kept between runs while it holds ``rows`` rows."""
    import asyncpg

    async def setup() -> None:
        connection = await asyncpg.connect(url)
        try:
            present = await connection.fetchval("SELECT to_regclass($1) IS NOT NULL", table)
            if present and await connection.fetchval(f"SELECT count(*) FROM {table}") == rows:
                return
            await connection.execute(
                f"DROP TABLE IF EXISTS {table}; CREATE TABLE {table} {columns}"
            )
            await connection.execute(f"INSERT INTO {table} {select}")
            await connection.execute(f"ANALYZE {table}")
        finally:
            await connection.close()

    asyncio.run(setup())


def plan_input(spark: Any, rows: int, table_rows: int, tasks: int) -> tuple[Any, int]:
    """``rows`` input rows over a quarter as many distinct keys (at most the table's rows and
    a tenth more, the tenth missing), cached; and the distinct keys."""
    from pyspark.sql import functions as F

    distinct = max(1, min(rows // 4, table_rows))
    spread = distinct + distinct // 10  # the tenth beyond the table's keys: misses
    key = F.pmod(F.xxhash64("id"), F.lit(spread)) * F.lit(max(1, table_rows // distinct))
    df = spark.range(rows, numPartitions=tasks).select(
        F.col("id").alias("event_id"), key.cast("long").alias("uid")
    )
    df = df.cache()
    df.count()
    return df, distinct


def jdbc_table(spark: Any, url: str, table: str, rows: int, tasks: int, key: str = "uid") -> Any:
    """``table`` read by Spark's JDBC reader in ``tasks`` ranges of the integer ``key`` (its
    values from 0 to ``rows``)."""
    parts = urlsplit(url)
    jdbc = f"jdbc:postgresql://{parts.hostname}:{parts.port or 5432}{parts.path or '/postgres'}"
    return (
        spark.read.format("jdbc")
        .option("url", jdbc)
        .option("dbtable", table)
        .option("user", parts.username or "postgres")
        .option("driver", "org.postgresql.Driver")
        .option("partitionColumn", key)
        .option("lowerBound", "0")
        .option("upperBound", str(rows))
        .option("numPartitions", str(tasks))
        .load()
    )
