"""The budget scenario (``--scenarios budget``): a service with a quota — ``--budget-in-flight``
requests at once and ``--budget-rate`` a second, refusing (429) what goes beyond — and a skewed
input of four partitions (one 10x the others), looked up in the ways a user can keep under the
quota:

- ``capacity`` per task alone (the default 100), and adaptive (``capacity.adaptive``, which
  backs off on a 429): over the quota, the 429s retried up to 10 attempts, then null values;
- ``capacity`` and ``rate.limit.total`` tuned by hand (the quota split evenly over the four
  tasks): no 429s, but the big partition's task works alone at a quarter of the quota;
- a cluster budget (``budget.max-in-flight``, ``budget.rate``, kept by ``budget.url``).

Each run reports the job's time, the requests the service answered and refused, the most in
flight and in any second, and the share of the quota used while the job ran."""

from __future__ import annotations

import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from lookup_source.bench.quota import QuotaService
from lookup_source.bench.stores import SCHEMA

LATENCY_S = 0.01


@dataclass
class BudgetResult:
    method: str
    rows: int
    seconds: float
    answered: int
    refused: int
    peak_in_flight: int
    most_in_1s: float
    quota_used: float
    """Answered requests over what the rate allowed from the job's first request to its last."""
    note: str = ""


def skewed_keys(spark: Any, keys: int) -> Any:
    """``keys`` keys over four partitions, the first 10x each of the others."""
    from pyspark.sql import functions as F

    small = max(1, keys // 13)
    big = keys - 3 * small
    rows = spark.range(keys).select(F.col("id").alias("user_id"))
    part = F.when(F.col("user_id") < big, 0).otherwise(1 + (F.col("user_id") - big) % 3)
    return rows.withColumn("p", part).repartitionByRange(4, "p").drop("p").cache()


def run_budget(spark: Any, args: Any) -> list[BudgetResult]:
    from lookup_source import lookup_join, lookup_metrics

    in_flight, rate = args.budget_in_flight, args.budget_rate
    df = skewed_keys(spark, args.budget_keys)
    df.count()
    name = f"bench-{uuid.uuid4().hex[:8]}"
    results: list[BudgetResult] = []
    with QuotaService(max_in_flight=in_flight, rate=rate, latency_s=LATENCY_S) as service:
        url = f"{service.base_url}/users/{{key}}"
        retried = {"retry.max-attempts": "10", "on.error": "null"}  # 429s: retried, then nulls
        runs = [
            ("capacity 100 per task", {"capacity": "100", **retried}),
            ("capacity.adaptive, ceiling 100", {"capacity.adaptive": "true", **retried}),
            (
                f"capacity {max(1, in_flight // 4)} + rate.limit.total {rate:g}, by hand",
                {"capacity": str(max(1, in_flight // 4)), "rate.limit.total": str(rate)},
            ),
            (
                "budget.*",
                {
                    "capacity": "100",
                    "budget.url": args.redis_url,
                    "budget.name": name,
                    "budget.max-in-flight": str(in_flight),
                    "budget.rate": str(rate),
                },
            ),
        ]
        for label, options in runs:
            print(f"  budget: {label} ...", flush=True)
            service.reset(max_in_flight=in_flight, rate=rate, latency_s=LATENCY_S)
            out = lookup_join(
                df,
                "user_id",
                schema=SCHEMA,
                options={"connector": "http", "url": url, "retry.max-delay.ms": "200"} | options,
            )
            started = time.perf_counter()
            rows = out.collect()
            seconds = time.perf_counter() - started
            metrics = lookup_metrics(out)
            stats = service.stats()
            span = max(stats["busy_s"], 1.0 / rate)
            results.append(
                BudgetResult(
                    label,
                    len(rows),
                    seconds,
                    int(stats["requests"]),
                    int(stats["refused"]),
                    int(stats["peak_in_flight"]),
                    stats["most_in_1s"],
                    stats["requests"] / (rate * span),
                    note=f"{metrics.failed_keys:,} failed keys" if metrics.failed_keys else "",
                )
            )
    df.unpersist()
    return results


def budget_report(results: list[BudgetResult], args: Any) -> list[str]:
    lines = [
        f"### budget: a service allowing {args.budget_in_flight} in flight and "
        f"{args.budget_rate:g} requests a second (429 beyond), {LATENCY_S * 1000:g} ms each; "
        f"{args.budget_keys:,} keys over 4 partitions, one 10x the others",
        "",
        "| run | job s | answered | refused (429) | peak in flight | most in 1 s | quota used | |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.method} | {r.seconds:.2f} | {r.answered:,} | {r.refused:,} | "
            f"{r.peak_in_flight} | {r.most_in_1s:,.0f} | {r.quota_used:.0%} | {r.note} |"
        )
    return [*lines, ""]


def as_json(results: list[BudgetResult]) -> list[dict[str, Any]]:
    return [asdict(r) for r in results]
