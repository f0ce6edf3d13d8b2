"""The throughput scenarios (``http-<ms>``, ``http-batch-<ms>``, ``redis``, ``postgres``,
``redis-net``, ``postgres-net``): every method of :func:`~.methods.methods_for` on one store and
key distribution, each the best of ``--repeat`` runs with its CPU per row by process; then the
raw client alone and, for per-key HTTP, Little's law's bound."""

from __future__ import annotations

import functools
from contextlib import AbstractContextManager
from typing import Any

from lookup_source.bench import journal as journal_module
from lookup_source.bench import methods as m
from lookup_source.bench import timing
from lookup_source.bench.context import Context, Method, Result
from lookup_source.bench.cpu import CpuMeter
from lookup_source.bench.events import events, task_keys
from lookup_source.bench.stores import Store, http_store, postgres_store, redis_store


def open_store(name: str, args: Any) -> AbstractContextManager[Store]:
    if name.startswith("http-batch-"):
        return http_store(args.users, float(name.rsplit("-", 1)[1]), batch=True)
    if name.startswith("http-"):
        return http_store(args.users, float(name.rsplit("-", 1)[1]), batch=False)
    delay = args.net_delay_ms if name.endswith("-net") else 0.0
    if name.startswith("redis"):
        return redis_store(args.redis_url, args.users, delay_ms=delay)
    if name.startswith("postgres"):
        return postgres_store(args.postgres_url, args.users, delay_ms=delay)
    raise SystemExit(f"unknown scenario {name!r}")


def run_scenario(spark: Any, name: str, distribution: str, args: Any) -> list[Result]:
    results: list[Result] = []
    with open_store(name, args) as store:
        per_key_http = store.kind == "http" and not store.batch
        rows = args.http_rows if per_key_http else args.rows
        df = events(spark, rows, args.users, args.tasks, distribution).cache()
        df.count()
        sample = events(spark, min(args.sample_rows, rows), args.users, args.tasks, distribution)
        ctx = Context(spark, store, df, sample, args, args.capacity, distribution)
        timing.METER = CpuMeter(store.server_port)
        for method in m.methods_for(store, distribution):
            if args.skip_slow and method in m.SLOW_METHODS:
                continue
            runs = 1 if method in m.SLOW_METHODS else max(1, args.repeat)
            results.append(_best_of(runs, functools.partial(_measured, method, ctx, store)))
        keys = task_keys(df)
        ceiling = functools.partial(_measured_ceiling, ctx, keys, rows)
        results.append(_best_of(max(1, args.repeat), ceiling))
        timing.METER = None
        if per_key_http and store.latency_ms > 0:
            bound = args.tasks * args.capacity / (store.latency_ms / 1000)
            results.append(
                ctx.result(
                    "Little's law bound", rows, rows / bound, note="tasks x capacity / latency"
                )
            )
        if store.round_trip_ms:
            for result in results:
                result.note = (result.note + "; " if result.note else "") + (
                    f"round trip {store.round_trip_ms:.2f} ms"
                )
        df.unpersist()
    return results


def _measured(method: Method, ctx: Context, store: Store) -> Result:
    before = store.requests()
    label = f"{store.name} / {ctx.distribution}: {method.__name__}"
    print(f"  {label} ...", flush=True)
    timing.LAST_CPU = None
    try:
        result = method(ctx)
    except Exception as error:  # kept as failed, the run goes on
        reason = journal_module.JOURNAL.failed(label, error)
        return ctx.result(method.__name__, 0, 0.0, note=f"FAILED: {reason}")
    if result.requests < 0 and before >= 0:
        result.requests = store.requests() - before
    if timing.LAST_CPU is not None:
        result.cpu_us_per_row = timing.LAST_CPU.per_row_us(result.rows)
    journal_module.JOURNAL.done(f"{label}: {result.rows_per_s:,.0f} rows/s")
    return result


def _measured_ceiling(ctx: Context, keys: list[list[int]], rows: int) -> Result:
    timing.LAST_CPU = None
    result = m.ceiling(ctx, keys, rows)
    if timing.LAST_CPU is not None:
        result.cpu_us_per_row = timing.LAST_CPU.per_row_us(rows)
    return result


def _best_of(runs: int, run: Any) -> Result:
    """The run with the most rows per second, carrying the least CPU per row of all runs
    (each figure the least disturbed by the rest of a shared machine)."""
    results = [run() for _ in range(runs)]
    best = max(results, key=lambda r: r.rows_per_s)
    measured = [r.cpu_us_per_row for r in results if r.cpu_us_per_row]
    if measured:
        best.cpu_us_per_row = min(measured, key=lambda c: c["total"])
    if runs > 1:
        best.note = (best.note + "; " if best.note else "") + f"best of {runs} runs"
    return best
