"""The synchronous ways a Spark user could do the lookup join: a per-row Python UDF, an Arrow
UDF run by Spark's own thread pool, a thread pool inside ``mapInArrow``, and the strongest
hand-written code (a batch's distinct keys in batched requests, values decoded into columns)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from lookup_source.bench.clients import batched_fetcher, blocking_fetcher
from lookup_source.bench.context import Context, Result, values_schema
from lookup_source.bench.stores import VALUE_COLUMNS, Store
from lookup_source.bench.timing import timed


def _blocking_target(store: Store) -> str:
    if store.kind == "http" and store.batch:
        return store.target.replace("/users/batch", "/users/{key}")
    return store.target


def sync_udf(ctx: Context) -> Result:
    from pyspark.sql.functions import udf

    kind, target = ctx.store.kind, _blocking_target(ctx.store)
    holder: dict[str, Any] = {}

    def name(user_id: int) -> str | None:
        fetch = holder.get("fetch")
        if fetch is None:
            fetch = holder["fetch"] = blocking_fetcher(kind, target)
        return fetch(user_id)

    rows = ctx.sample.count()
    seconds = timed(ctx.sample.withColumn("name", udf(lambda u: name(u), "string")("user_id")))
    return ctx.result("sync per-row UDF", rows, seconds, note=f"on a {rows:,}-row sample")


def arrow_udf(ctx: Context) -> Result:
    """Spark's own thread pool: an Arrow UDF run at a concurrency level."""
    from pyspark.sql.functions import udf

    kind, target = ctx.store.kind, _blocking_target(ctx.store)
    holder: dict[str, Any] = {}

    def name(user_id: int) -> str | None:  # called per row, from Spark's thread pool
        fetch = holder.get("fetch")
        if fetch is None:
            fetch = holder["fetch"] = blocking_fetcher(kind, target)
        return fetch(user_id)

    conf = "spark.sql.execution.pythonUDF.arrow.concurrency.level"
    ctx.spark.conf.set(conf, str(ctx.threads))
    label = f"Arrow UDF, concurrency level {ctx.threads}"
    try:
        seconds = timed(
            ctx.df.withColumn("name", udf(lambda u: name(u), "string", useArrow=True)("user_id"))
        )
    except Exception as exc:  # older Spark: no concurrency level
        first = str(exc).strip().splitlines()[-1][:80]
        return ctx.result(label, 0, 0.0, note=first)
    finally:
        ctx.spark.conf.unset(conf)
    return ctx.result(label, ctx.df.count(), seconds, capacity=ctx.threads)


def thread_pool(ctx: Context) -> Result:
    import pyarrow as pa

    kind, target, threads = ctx.store.kind, _blocking_target(ctx.store), ctx.threads

    def enrich(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fetch = blocking_fetcher(kind, target)
        with ThreadPoolExecutor(threads) as pool:
            for batch in batches:
                names = list(pool.map(fetch, batch.column("user_id").to_pylist()))
                yield batch.append_column("name", pa.array(names, pa.string()))

    seconds = timed(ctx.df.mapInArrow(enrich, "event_id long, user_id long, name string"))
    return ctx.result(f"thread pool of {threads} in mapInArrow", ctx.df.count(), seconds)


def batched_loop(ctx: Context) -> Result:
    """The strongest hand-written synchronous code: per Arrow batch, its distinct keys in
    requests of ``batch.size`` keys, values decoded into columns."""
    import pyarrow as pa

    store, size = ctx.store, int(ctx.store.options.get("batch.size", "100"))
    kind, target = store.kind, store.target  # plain values: the closure goes to executors

    def enrich(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fetch = batched_fetcher(kind, target)
        for batch in batches:
            ids = batch.column("user_id").to_pylist()
            distinct = list(dict.fromkeys(k for k in ids if k is not None))
            found: dict[int, tuple[Any, ...]] = {}
            for start in range(0, len(distinct), size):
                found.update(fetch(distinct[start : start + size]))
            values = [found.get(k, (None,) * len(VALUE_COLUMNS)) for k in ids]
            for position, column in enumerate(VALUE_COLUMNS):
                batch = batch.append_column(column, pa.array([v[position] for v in values]))
            yield batch

    request = {"redis": "MGET", "postgres": "= ANY", "http": "POST"}[store.kind]
    decode = " + json.loads" if store.kind != "postgres" else ""
    seconds = timed(ctx.df.mapInArrow(enrich, "event_id long, user_id long, " + values_schema()))
    label = f"sync batched loop in mapInArrow ({request} {size}{decode})"
    return ctx.result(label, ctx.df.count(), seconds)
