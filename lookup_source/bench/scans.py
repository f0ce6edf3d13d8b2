"""The table read whole and broadcast-joined: asynclookup's data source scan, and Spark's own
JDBC reader (with the driver it needs, :data:`JDBC_JAR`)."""

from __future__ import annotations

import os

from lookup_source.bench.context import Context, Result
from lookup_source.bench.stores import SCHEMA, TABLE
from lookup_source.bench.timing import timed

JDBC_JAR = "/usr/share/java/postgresql.jar"
"""Debian's libpostgresql-jdbc-java: the JDBC driver Spark's own reader needs."""


def scan_broadcast(ctx: Context) -> Result:
    from pyspark.sql import functions as F

    table = (
        ctx.spark.read.format("asynclookup")
        .schema(SCHEMA)
        .options(**ctx.store.options)
        .option("partitions", str(ctx.args.tasks))
        .load()
    )
    seconds = timed(ctx.df.join(F.broadcast(table), "user_id", "left"))
    return ctx.result("asynclookup scan + broadcast join", ctx.df.count(), seconds)


def jdbc_broadcast(ctx: Context) -> Result:
    """Spark's own JDBC reader (Debian's PostgreSQL JDBC driver) and a broadcast join."""
    from urllib.parse import urlsplit

    from pyspark.sql import functions as F

    label = "Spark JDBC read + broadcast join"
    if not os.path.exists(JDBC_JAR):
        return ctx.result(label, 0, 0.0, note=f"no JDBC driver at {JDBC_JAR}")
    parts = urlsplit(ctx.store.target)
    url = f"jdbc:postgresql://{parts.hostname}:{parts.port or 5432}{parts.path or '/postgres'}"
    table = (
        ctx.spark.read.format("jdbc")
        .option("url", url)
        .option("dbtable", TABLE)
        .option("user", parts.username or "postgres")
        .option("driver", "org.postgresql.Driver")
        .option("partitionColumn", "user_id")
        .option("lowerBound", "0")
        .option("upperBound", str(ctx.args.users))
        .option("numPartitions", str(ctx.args.tasks))
        .load()
    )
    seconds = timed(ctx.df.join(F.broadcast(table), "user_id", "left"))
    return ctx.result(label, ctx.df.count(), seconds)
