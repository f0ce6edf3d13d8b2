"""A job whose lookups report to OpenTelemetry, in a Spark of its own (its executors' OTEL_*
environment is set before they start).

    python tests/spark/otel_job.py <redis url> <key prefix>

Prints one JSON line: the job's own metrics (lookup_metrics), for tests/spark/test_monitoring.py
to compare with what its OTLP receiver decoded.
"""

from __future__ import annotations

import json
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lookup_source import lookup_join, lookup_metrics


def main() -> None:
    redis_url, prefix = sys.argv[1:3]
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("asynclookup-otel")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    events = spark.range(3_000, numPartitions=3).select(
        F.col("id").alias("event_id"), (F.col("id") % 600).alias("user_id")
    )
    enriched = lookup_join(
        events,
        "user_id",
        schema="user_id long, name string",
        options={
            "connector": "redis",
            "url": redis_url,
            "redis.key.pattern": f"{prefix}{{key}}",
            "batch.size": "50",
            "metrics.opentelemetry": "true",
        },
        name="users",
    )
    named = enriched.filter(F.col("name").isNotNull()).count()
    m = lookup_metrics(enriched)
    print(
        json.dumps(
            {
                "named": named,
                "rows": m.rows,
                "keys": m.keys,
                "missing_keys": m.missing_keys,
                "requests": m.requests,
                "tasks": m.tasks,
            }
        )
    )
    spark.stop()


if __name__ == "__main__":
    main()
