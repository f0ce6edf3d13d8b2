"""asynclookup's own ways: ``lookup_join`` by output mode, with a cache, by strategy, through a
user's own ``fetch=`` / ``fetch_many=`` (:mod:`.user_functions`), the SQL table function; and
the memory scenario's fan-out (one key with many matches)."""

from __future__ import annotations

import itertools
import time
from typing import Any

from lookup_source.bench.context import Context, Method, Result
from lookup_source.bench.stores import PREFIX, SCHEMA, Store
from lookup_source.bench.timing import timed
from lookup_source.bench.user_functions import HttpFetch, RedisFetchMany

_COLD_CACHES = itertools.count()


def asynclookup(
    mode: str = "ordered",
    cache: bool = False,
    by_key: bool = False,
    *,
    extra: dict[str, str] | None = None,
    label: str = "",
) -> Method:
    """``lookup_join``; ``cache`` adds a per-worker LRU, ``by_key`` hash-partitions the input by
    the key first (``partition.by-key``), so that the workers cache disjoint shares of the keys;
    ``extra``: more options (named by ``label`` in the report)."""

    def method(ctx: Context) -> Result:
        from lookup_source import lookup_join, lookup_metrics

        options = {
            **ctx.store.options,
            "capacity": str(ctx.capacity),
            "output.mode": mode,
        }
        if cache:
            # a cache is keyed by its options: a size of its own makes every run start cold
            options["cache.max-rows"] = str(100_000 + next(_COLD_CACHES))
        if by_key:
            options["partition.by-key"] = "true"
        options.update(extra or {})
        out = lookup_join(ctx.df, "user_id", schema=SCHEMA, options=options)
        seconds = timed(out)
        metrics = lookup_metrics(out)
        notes = []
        if cache:
            notes.append(f"cache hit rate {metrics.cache_hit_rate:.1%}")
        if metrics.shared_keys:
            notes.append(f"{metrics.shared_keys:,} keys shared with requests in flight")
        name = f"asynclookup {mode}" + (" + cache" if cache else "")
        return ctx.result(
            name + (", partitioned by key" if by_key else "") + (f" ({label})" if label else ""),
            metrics.rows,
            seconds,
            requests=metrics.requests,
            peak_memory_mb=metrics.peak_rss_mb,
            capacity=ctx.capacity,
            note="; ".join(notes),
        )

    method.__name__ = (
        f"asynclookup_{mode}"
        + ("_cache" if cache else "")
        + ("_by_key" if by_key else "")
        + (f"_{label}".replace(", ", "_").replace(" ", "_") if label else "")
    )
    return method


def asynclookup_fetch_many_redis(columnar: bool) -> Method:
    """``lookup_join`` through a user's own ``fetch_many=`` over the Redis of the scenario."""

    def method(ctx: Context) -> Result:
        from lookup_source import lookup_join, lookup_metrics

        store = ctx.store
        size = store.options.get("batch.size", "500")
        function = RedisFetchMany(store.target, PREFIX, ctx.capacity, columnar)
        options = {"capacity": str(ctx.capacity), "batch.size": size}
        out = lookup_join(ctx.df, "user_id", schema=SCHEMA, fetch_many=function, options=options)
        seconds = timed(out)
        metrics = lookup_metrics(out)
        form = "columns" if columnar else "records"
        return ctx.result(
            f"asynclookup fetch_many= (your own MGET {size}, {form})",
            metrics.rows,
            seconds,
            requests=metrics.requests,
            capacity=ctx.capacity,
        )

    method.__name__ = f"asynclookup_fetch_many_redis_{'columns' if columnar else 'records'}"
    return method


def asynclookup_fetch(ctx: Context) -> Result:
    """``lookup_join`` through ``fetch=`` (per-key GET) or ``fetch_many=`` (batch POST)."""
    from lookup_source import lookup_join, lookup_metrics

    store = ctx.store
    function = HttpFetch(store.target, store.batch, ctx.capacity)
    options = {"capacity": str(ctx.capacity)}
    if store.batch:
        options["batch.size"] = store.options.get("batch.size", "100")
        out = lookup_join(ctx.df, "user_id", schema=SCHEMA, fetch_many=function, options=options)
    else:
        out = lookup_join(ctx.df, "user_id", schema=SCHEMA, fetch=function, options=options)
    seconds = timed(out)
    metrics = lookup_metrics(out)
    label = (
        "asynclookup fetch_many= (your own function)"
        if store.batch
        else ("asynclookup fetch= (your own function)")
    )
    return ctx.result(
        label, metrics.rows, seconds, requests=metrics.requests, capacity=ctx.capacity
    )


def asynclookup_strategy(strategy: str) -> Method:
    """``lookup_join`` with ``strategy=broadcast`` or ``auto`` (the table scanned once and
    broadcast-joined, when chosen), against the same store."""

    def method(ctx: Context) -> Result:
        from lookup_source import lookup_join, lookup_metrics

        options = {**ctx.store.options, "capacity": str(ctx.capacity), "strategy": strategy}
        out = lookup_join(ctx.df, "user_id", schema=SCHEMA, options=options)
        seconds = timed(out)
        metrics = lookup_metrics(out)
        return ctx.result(
            f"asynclookup strategy={strategy}",
            ctx.df.count(),
            seconds,
            requests=metrics.requests,
            note=f"{metrics.strategy}: {metrics.strategy_reason}",
        )

    method.__name__ = f"asynclookup_strategy_{strategy}"
    return method


def sql_table_function(ctx: Context) -> Result:
    from lookup_source import lookup_metrics, register_lookup_table

    options = {**ctx.store.options, "capacity": str(ctx.capacity)}
    register_lookup_table(ctx.spark, "bench_users", schema=SCHEMA, options=options)
    ctx.df.createOrReplaceTempView("bench_events")
    before = lookup_metrics("bench_users").requests
    seconds = timed(
        ctx.spark.sql("SELECT * FROM bench_users_lookup(TABLE(bench_events), 'user_id')")
    )
    requests = lookup_metrics("bench_users").requests - before
    return ctx.result("asynclookup SQL table function", ctx.df.count(), seconds, requests=requests)


def fanout(spark: Any, store: Store, rows: int, matches: int) -> Result:
    """``lookup_join`` of ``rows`` input rows of one key that has ``matches`` rows (one task):
    the output is ``rows x matches`` rows, its peak Python worker memory the figure."""
    from pyspark.sql import functions as F

    from lookup_source import lookup_join, lookup_metrics

    df = spark.range(rows, numPartitions=1).select(
        F.col("id").alias("event_id"), F.lit(7).cast("long").alias("user_id")
    )
    out = lookup_join(df, "user_id", schema=SCHEMA, options=store.options)
    started = time.monotonic()
    count = out.count()
    seconds = time.monotonic() - started
    metrics = lookup_metrics(out)
    return Result(
        f"memory fan-out ({store.name})",
        "one key",
        "asynclookup ordered",
        count,
        seconds,
        requests=metrics.requests,
        peak_memory_mb=metrics.peak_rss_mb,
        note=f"{rows:,} input rows x {matches:,} matches",
    )
