"""The memory scenario (``--scenarios memory``): the peak memory of a fresh Python worker per
task, ``lookup_join`` over Redis by input size (``--memory-rows``); then a fan-out, every input
row's key with ``--fanout-matches`` rows in Postgres."""

from __future__ import annotations

from typing import Any

from lookup_source.bench import methods as m
from lookup_source.bench.context import Context, Result
from lookup_source.bench.events import events
from lookup_source.bench.stores import fanout_store, redis_store


def run_memory(spark: Any, args: Any) -> list[Result]:
    """Peak memory of a fresh Python worker per task, lookup_join over Redis, by input size;
    then a fan-out: every input row's key has ``--fanout-matches`` rows in Postgres."""
    results: list[Result] = []
    with redis_store(args.redis_url, args.users) as store:
        store.name = "memory (redis)"
        for rows in (int(r) for r in args.memory_rows.split(",")):
            df = events(spark, rows, args.users, args.tasks, "uniform")
            ctx = Context(spark, store, df, df, args, args.capacity, "uniform")
            print(f"  memory: {rows:,} rows ...", flush=True)
            result = m.asynclookup("ordered")(ctx)
            result.note = f"{rows:,} input rows"
            results.append(result)
    if args.fanout_matches:
        with fanout_store(args.postgres_url, args.fanout_matches) as store:
            for rows in (int(r) for r in args.fanout_rows.split(",")):
                print(f"  memory: fan-out, {rows:,} rows x {args.fanout_matches:,} ...", flush=True)
                results.append(m.fanout(spark, store, rows, args.fanout_matches))
    return results
