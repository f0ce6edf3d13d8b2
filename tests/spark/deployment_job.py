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
import tempfile
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lookup_source import (
    enable_sql_joins,
    lookup_join,
    lookup_metrics,
    progress_metrics,
    register_lookup_table,
)
from lookup_source.spark.internals import plan_text
from lookup_source.spark.versions import DATA_SOURCE, SQL_JOINS, TABLE_FUNCTION

SCHEMA = "user_id long, name string"


async def fetch_name(user_id: int) -> dict[str, str] | None:
    """A lookup function of the job's own (pickled by value, from __main__)."""
    return {"name": f"fn {user_id}"} if user_id < 1_000 else None


def input_rows(progress: Any) -> int:
    """A progress' numInputRows (a dict on PySpark 3.5; over Connect, an attribute only)."""
    value = getattr(progress, "numInputRows", None)
    return int(progress["numInputRows"] if value is None else value)


def stream_progress(spark: SparkSession, options: dict[str, str], work: str) -> list[Any]:
    """Three micro-batches of a file stream through a lookup named "users": each one's entry
    in its progress, as progress_metrics reads it, beside the micro-batch's input rows."""
    source = os.path.join(work, "events")
    os.makedirs(source, exist_ok=True)
    for batch in range(3):  # 100 rows each; user ids 1,000 and up are missing
        with open(os.path.join(source, f"{batch}.json"), "w") as f:
            for event in range(batch * 100, batch * 100 + 100):
                f.write(json.dumps({"event_id": event, "user_id": event * 7 % 1_100}) + "\n")
    stream = (
        spark.readStream.schema("event_id long, user_id long")
        .option("maxFilesPerTrigger", 1)
        .json(source)
    )
    enriched = lookup_join(stream, "user_id", schema=SCHEMA, options=options, name="users")
    query = (
        enriched.writeStream.format("memory")
        .queryName("users_stream")
        .option("checkpointLocation", os.path.join(work, "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    rows = spark.sql("SELECT count(*) AS n, count(name) AS named FROM users_stream").collect()[0]
    reported = [
        {"input": input_rows(progress), "users": progress_metrics(progress).get("users")}
        for progress in query.recentProgress
    ]
    return [r for r in reported if r["input"]] + [
        {"rows": rows["n"], "named": rows["named"], "columns": enriched.columns}
    ]


def main() -> None:
    where, redis_url, prefix = sys.argv[1:4]
    builder = SparkSession.builder.appName("asynclookup-deployment")
    if where.startswith(("sc://", "connect:")):
        builder = builder.remote(where.removeprefix("connect:"))
    else:
        builder = builder.master(where).config("spark.executor.memory", "768m")
    if SQL_JOINS.available():  # a local Connect server starts with the builder's settings
        builder = enable_sql_joins(builder)
    spark = builder.config("spark.ui.enabled", "false").getOrCreate()
    if DATA_SOURCE.available():
        from lookup_source import AsyncLookupDataSource

        spark.dataSource.register(AsyncLookupDataSource)
    options = {"connector": "redis", "url": redis_url, "redis.key.pattern": f"{prefix}{{key}}"}
    events = spark.range(5_000, numPartitions=3).select(
        F.col("id").alias("event_id"), (F.col("id") % 1_100).alias("user_id")
    )
    joined = lookup_join(events, "user_id", schema=SCHEMA, options=options)
    join_rows = sorted((r.event_id, r.user_id, r.name) for r in joined.collect())
    budget = {  # a cluster budget, kept by the Redis (over Connect: budget.tasks given)
        "budget.url": redis_url,
        "budget.name": f"{prefix}deployment",
        "budget.max-in-flight": "4",
        "budget.tasks": "3",
    }
    by_function = lookup_join(events, "user_id", schema=SCHEMA, fetch=fetch_name, options=budget)
    function_rows = sorted((r.event_id, r.name) for r in by_function.collect())
    function_metrics = lookup_metrics(by_function)
    function_budget = [function_metrics.budget, function_metrics.budget_grants]
    read_rows = None
    if DATA_SOURCE.available():
        read = (
            spark.read.format("asynclookup")
            .schema(SCHEMA)
            .options(**options)
            .option("keys", "[1, 2, 3, 5000]")
            .load()
        )
        read_rows = sorted((r.user_id, r.name) for r in read.collect())
    metrics = lookup_metrics(joined)
    joined.count()  # a second action: its lookups add up, as an accumulator's do
    twice = lookup_metrics(joined)
    table_rows = table_metrics = sql_join_rows = sql_join_plan = None
    if TABLE_FUNCTION.available():
        register_lookup_table(spark, "users", schema=SCHEMA, options=options)
        events.createOrReplaceTempView("events")
        table_rows = sorted(
            (r.event_id, r.user_id, r.name)
            for r in spark.sql("SELECT * FROM users_lookup(TABLE(events), 'user_id')").collect()
        )
        try:
            table_metrics = lookup_metrics("users").rows
        except ValueError as error:  # Spark Connect: the table function reports no metrics
            table_metrics = str(error)
        if SQL_JOINS.available():  # a plain JOIN against the table: its lookups
            join = spark.sql(
                "SELECT e.event_id, e.user_id, u.name FROM events e "
                "LEFT JOIN users u ON e.user_id = u.user_id"
            )
            sql_join_rows = sorted((r.event_id, r.user_id, r.name) for r in join.collect())
            sql_join_plan = "ArrowEvalPythonUDTF" in plan_text(join, "simple")
            if isinstance(table_metrics, int):  # the JOIN's lookups count as the table's
                sql_join_plan = sql_join_plan and lookup_metrics("users").rows == 10_000
    with tempfile.TemporaryDirectory() as work:
        progress = stream_progress(spark, options, work)
    print(
        json.dumps(
            {
                "progress": progress,
                "join": join_rows,
                "function": function_rows,
                "function_budget": function_budget,
                "read": read_rows,
                "table": table_rows,
                "sql_join": sql_join_rows,
                "sql_join_is_lookup": sql_join_plan,
                "columns": joined.columns,
                "metrics": {
                    "rows": metrics.rows,
                    "requests": metrics.requests,
                    "missing_keys": metrics.missing_keys,
                    "failed_keys": metrics.failed_keys,
                    "retries": metrics.retries,
                    "tasks": metrics.tasks,
                    "rows_after_two_actions": twice.rows,
                },
                "table_metrics": table_metrics,
                "pid": os.getpid(),
            }
        )
    )
    spark.stop()


if __name__ == "__main__":
    main()
