"""Jobs sharing a cluster budget, on a Spark of their own (``local-cluster``: executors in
separate JVMs and Python workers), against a service with a quota.

    python tests/spark/budget_job.py <master> <budget redis url> <service url> <phase>...

Each phase resets the service (``POST /reset``: its quota, its latency), runs its jobs — two
at once from two threads where it says so, naming one budget — checks every row, and reads
the service's counts (``GET /stats``). Prints one JSON line: each phase's counts, wall time
and the lookups' budget metrics, for tests/spark/test_cluster_budget.py.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.request
import uuid
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lookup_source import lookup_join, lookup_metrics

SCHEMA = "user_id long, name string"
RUN = uuid.uuid4().hex[:8]


def skewed(spark: SparkSession, big: int, small: int, offset: int = 0) -> DataFrame:
    """Four partitions: one of ``big`` keys, three of ``small`` (one 10x the others)."""
    total = big + 3 * small
    rows = spark.range(offset, offset + total).select(F.col("id").alias("user_id"))
    part = F.when(F.col("user_id") < offset + big, 0).otherwise(
        1 + (F.col("user_id") - offset - big) % 3
    )
    return (
        rows.withColumn("p", part)
        .repartitionByRange(4, "p")
        .drop("p")
        .withColumn("tokens", 1 + F.col("user_id") % 3)
    )


def joined(df: DataFrame, service: str, options: dict[str, str]) -> tuple[list[Any], Any]:
    out = lookup_join(
        df,
        "user_id",
        schema=SCHEMA,
        options={"connector": "http", "url": f"{service}/users/{{key}}", "capacity": "20"}
        | options,
    )
    rows = out.collect()
    keys = sorted(r.user_id for r in df.collect())
    assert sorted((r.user_id, r.name) for r in rows) == [(k, f"user {k}") for k in keys]
    return rows, lookup_metrics(out)


def post(url: str) -> None:
    urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=10).read()


def stats(service: str) -> dict[str, float]:
    return json.loads(urllib.request.urlopen(f"{service}/stats", timeout=10).read())


def together(*jobs: Any) -> list[Any]:
    """Run the jobs at once, each from a thread of its own; their results in order."""
    results: list[Any] = [None] * len(jobs)
    errors: list[BaseException] = []

    def run(index: int, job: Any) -> None:
        try:
            results[index] = job()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i, j)) for i, j in enumerate(jobs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


def budget_of(metrics: Any) -> dict[str, Any]:
    return {
        "budget": metrics.budget,
        "waits": metrics.budget_waits,
        "grants": metrics.budget_grants,
        "fallbacks": metrics.budget_fallbacks,
        "requests": metrics.requests,
        "failed_keys": metrics.failed_keys,
    }


def phase(
    spark: SparkSession,
    service: str,
    name: str,
    quota: str,
    jobs: list[tuple[DataFrame, dict[str, str]]],
) -> dict[str, Any]:
    post(f"{service}/reset?phase={name}&{quota}")
    started = time.monotonic()
    results = together(*(lambda d=df, o=opts: joined(d, service, o) for df, opts in jobs))
    took = time.monotonic() - started
    return {
        "seconds": took,
        "service": stats(service),
        "lookups": [budget_of(metrics) for _, metrics in results],
    }


def main() -> None:
    master, budget_url, service, *phases = sys.argv[1:]
    spark = (
        SparkSession.builder.master(master)
        .appName("asynclookup-budget")
        .config("spark.executor.memory", "768m")
        .config("spark.ui.enabled", "false")
        .config("spark.scheduler.mode", "FAIR")
        .getOrCreate()
    )
    # a Python worker on every core first: a phase measures the budget, not workers starting
    spark.range(16, numPartitions=8).mapInArrow(lambda batches: batches, "id long").collect()
    # the coordinator has 1 s to answer (0.5 s by default; the most a 3 s lease allows): on a
    # busy machine a late answer is a fallback to the static share, which the phases that
    # count exactly must not see; the restart phase sets its own, short, to fall back while
    # Redis is down
    budget = {"budget.url": budget_url, "budget.lease.ms": "3000", "budget.timeout.ms": "1000"}
    report: dict[str, Any] = {}
    for name in phases:
        if name == "in_flight":  # two jobs, one budget of 6 in flight, a service of 30 ms
            shared = budget | {"budget.name": f"flight-{RUN}", "budget.max-in-flight": "6"}
            report[name] = phase(
                spark,
                service,
                name,
                "max_in_flight=6&latency_s=0.03",
                [(skewed(spark, 300, 30), shared), (skewed(spark, 60, 20, 10_000), shared)],
            )
        elif name == "rate":  # two jobs, 300 requests a second between them
            shared = budget | {"budget.name": f"rate-{RUN}", "budget.rate": "300"}
            report[name] = phase(
                spark,
                service,
                name,
                "rate=315&latency_s=0.005",
                [(skewed(spark, 450, 45), shared), (skewed(spark, 150, 50, 10_000), shared)],
            )
        elif name in ("skew_budget", "skew_static"):  # one skewed job: budget or split
            limit = (
                {"budget.name": f"skew-{RUN}", "budget.rate": "300"} | budget
                if name == "skew_budget"
                else {"rate.limit.total": "300"}
            )
            report[name] = phase(
                spark, service, name, "rate=315&latency_s=0.005", [(skewed(spark, 300, 30), limit)]
            )
        elif name == "cost":  # 24,000 units a minute (400 a second); a key costs 1 to 3
            shared = budget | {
                "budget.name": f"cost-{RUN}",
                "budget.cost-per-minute": "24000",
                "budget.cost.column": "tokens",
            }
            report[name] = phase(
                spark,
                service,
                name,
                "latency_s=0.005",
                [(skewed(spark, 300, 30), shared), (skewed(spark, 90, 30, 10_000), shared)],
            )
        elif name == "restart":  # the test restarts the coordinator's Redis mid-phase
            shared = budget | {
                "budget.name": f"restart-{RUN}",
                "budget.max-in-flight": "6",
                "budget.timeout.ms": "200",
            }
            report[name] = phase(
                spark,
                service,
                name,
                "latency_s=0.02",
                [(skewed(spark, 300, 50), shared), (skewed(spark, 150, 30, 10_000), shared)],
            )
    print(json.dumps(report))
    spark.stop()


if __name__ == "__main__":
    main()
