"""Run lookup_join, the data source and the SQL table function in a Spark of its own.

    python tests/spark/deployment_job.py <master | sc://...> <redis url> <key prefix>

Prints one JSON line with the results, for tests/spark/test_deployment.py. Nothing here may
depend on driver-side state: on local-cluster the executors are separate JVMs and Python
workers, and over Spark Connect the client holds no SparkContext at all.
"""

from __future__ import annotations

import json
import os
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lookup_source import AsyncLookupDataSource, lookup_join

SCHEMA = "user_id long, name string"


def main() -> None:
    where, redis_url, prefix = sys.argv[1:4]
    builder = SparkSession.builder.appName("asynclookup-deployment")
    if where.startswith(("sc://", "connect:")):
        builder = builder.remote(where.removeprefix("connect:"))
    else:
        builder = builder.master(where).config("spark.executor.memory", "768m")
    spark = builder.config("spark.ui.enabled", "false").getOrCreate()
    spark.dataSource.register(AsyncLookupDataSource)
    options = {"connector": "redis", "url": redis_url, "redis.key.pattern": f"{prefix}{{key}}"}
    events = spark.range(5_000, numPartitions=3).select(
        F.col("id").alias("event_id"), (F.col("id") % 1_100).alias("user_id")
    )
    joined = lookup_join(events, "user_id", schema=SCHEMA, options=options)
    join_rows = sorted((r.event_id, r.user_id, r.name) for r in joined.collect())
    read = (
        spark.read.format("asynclookup")
        .schema(SCHEMA)
        .options(**options)
        .option("keys", "[1, 2, 3, 5000]")
        .load()
    )
    read_rows = sorted((r.user_id, r.name) for r in read.collect())
    table_rows: list[tuple[object, ...]] = []
    from lookup_source import lookup_metrics

    try:
        metrics: object = lookup_metrics(joined).rows
    except ValueError as error:  # Spark Connect: no accumulators
        metrics = str(error)
    if not where.startswith(("sc://", "connect:")):
        from lookup_source import register_lookup_table

        register_lookup_table(spark, "users", schema=SCHEMA, options=options)
        events.createOrReplaceTempView("events")
        table_rows = sorted(
            (r.event_id, r.user_id, r.name)
            for r in spark.sql("SELECT * FROM users_lookup(TABLE(events), 'user_id')").collect()
        )
    print(
        json.dumps(
            {
                "join": join_rows,
                "read": read_rows,
                "table": table_rows,
                "metrics": metrics,
                "pid": os.getpid(),
            }
        )
    )
    spark.stop()


if __name__ == "__main__":
    main()
