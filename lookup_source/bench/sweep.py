"""The sweep scenario (``--scenarios sweep``): asynclookup against Spark's threaded Arrow UDF at
the same concurrency, capacity by capacity (``--sweep-capacities``), per-key HTTP at
``--sweep-latency-ms``, beside Little's law's bound."""

from __future__ import annotations

from typing import Any

from lookup_source.bench import methods as m
from lookup_source.bench.context import Context, Result
from lookup_source.bench.events import events
from lookup_source.bench.stores import http_store


def run_sweep(spark: Any, args: Any) -> list[Result]:
    """asynclookup against Spark's threaded Arrow UDF at the same concurrency, capacity by
    capacity, at a latency where the request rate, not the CPU, should be the bound."""
    results: list[Result] = []
    latency = args.sweep_latency_ms
    with http_store(args.users, latency, batch=False) as store:
        store.name = f"sweep-http-get-{latency:g}ms"
        for capacity in (int(c) for c in args.sweep_capacities.split(",")):
            bound = args.tasks * capacity / (latency / 1000)
            rows = int(max(2_000, min(args.http_rows, bound * 4)))  # ~4 s at the bound
            df = events(spark, rows, args.users, args.tasks, "uniform").cache()
            df.count()
            ctx = Context(spark, store, df, df, args, capacity, "uniform")
            for method in (m.asynclookup("ordered"), m.arrow_udf):
                print(f"  sweep: capacity {capacity}, {method.__name__} ...", flush=True)
                result = method(ctx)
                result.capacity = capacity
                results.append(result)
            results.append(
                Result(
                    store.name,
                    "uniform",
                    "Little's law bound",
                    rows,
                    rows / bound,
                    capacity=capacity,
                )
            )
            df.unpersist()
    return results
