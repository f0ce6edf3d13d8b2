"""Every way a Spark user could do the lookup join, each timed on the same input and store.

Each method takes a :class:`Context` and returns a :class:`Result` (rows, seconds, requests).
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from lookup_source.bench.clients import RawClient, batched_fetcher, blocking_fetcher
from lookup_source.bench.cpu import CpuMeter, CpuSeconds
from lookup_source.bench.stores import PREFIX, SCHEMA, TABLE, VALUE_COLUMNS, Store

POSTGRES_THREADS = 40
"""Threads (each with its own connection) for the blocking Postgres alternatives: 2 tasks x 40
stays under Postgres' default max_connections of 100."""

JDBC_JAR = "/usr/share/java/postgresql.jar"
"""Debian's libpostgresql-jdbc-java: the JDBC driver Spark's own reader needs."""


METER: CpuMeter | None = None
"""Set by the runner: :func:`timed` measures the CPU of what it times with it."""

LAST_CPU: CpuSeconds | None = None
"""The CPU seconds, by process group, of the last :func:`timed` action."""


@dataclass
class Result:
    scenario: str
    distribution: str
    method: str
    rows: int
    seconds: float
    requests: int = -1
    peak_memory_mb: float = 0.0
    note: str = ""
    capacity: int = 0
    cpu_us_per_row: dict[str, float] = field(default_factory=dict)
    """Core-microseconds per row by process group (bench.cpu.GROUPS) and total."""

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Context:
    spark: Any
    store: Store
    df: Any  # the input: event_id, user_id
    sample: Any  # a small input, for the synchronous per-row UDF
    args: Any
    capacity: int
    distribution: str = ""

    def result(self, method: str, rows: int, seconds: float, **extra: Any) -> Result:
        return Result(self.store.name, self.distribution, method, rows, seconds, **extra)

    @property
    def threads(self) -> int:
        kind = self.store.kind
        return min(self.capacity, POSTGRES_THREADS) if kind == "postgres" else self.capacity


Method = Callable[[Context], Result]


def timed(df: Any) -> float:
    """Seconds to compute every row of ``df`` (written nowhere); its CPU by process group goes
    to :data:`LAST_CPU` when a :data:`METER` is set."""
    global LAST_CPU
    if METER is not None:
        METER.start()
    started = time.monotonic()
    df.write.format("noop").mode("overwrite").save()
    seconds = time.monotonic() - started
    if METER is not None:
        LAST_CPU = METER.stop()
    return seconds


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
    seconds = timed(ctx.df.mapInArrow(enrich, "event_id long, user_id long, " + _values()))
    label = f"sync batched loop in mapInArrow ({request} {size}{decode})"
    return ctx.result(label, ctx.df.count(), seconds)


def _values() -> str:
    return ", ".join(f"{c} string" for c in VALUE_COLUMNS)


def floor_columns(batches: Iterator[Any]) -> Iterator[Any]:
    """What the Spark floor's ``mapInArrow`` does: append computed value columns, no I/O."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for batch in batches:
        text = batch.column("user_id").cast(pa.string())
        name = pc.binary_join_element_wise("user-", text, "")
        yield batch.append_column("name", name).append_column("tier", text)


def floor(ctx: Context) -> Result:
    """The Spark floor: the same mapInArrow appending computed columns, no I/O."""
    frame = ctx.df.mapInArrow(floor_columns, "event_id long, user_id long, " + _values())
    seconds = timed(frame)
    return ctx.result("Spark floor: mapInArrow, no I/O", ctx.df.count(), seconds)


def scan_broadcast(ctx: Context) -> Result:
    from pyspark.sql import functions as F

    table = (
        ctx.spark.read.format("asynclookup")
        .schema(SCHEMA)
        .options(**ctx.store.options)
        .option("partitions", str(ctx.args.tasks))
        .load()
    )
    seconds = timed(ctx.df.join(F.broadcast(table), "user_id", "left"))
    return ctx.result("asynclookup scan + broadcast join", ctx.df.count(), seconds)


def jdbc_broadcast(ctx: Context) -> Result:
    """Spark's own JDBC reader (Debian's PostgreSQL JDBC driver) and a broadcast join."""
    from urllib.parse import urlsplit

    from pyspark.sql import functions as F

    label = "Spark JDBC read + broadcast join"
    if not os.path.exists(JDBC_JAR):
        return ctx.result(label, 0, 0.0, note=f"no JDBC driver at {JDBC_JAR}")
    parts = urlsplit(ctx.store.target)
    url = f"jdbc:postgresql://{parts.hostname}:{parts.port or 5432}{parts.path or '/postgres'}"
    table = (
        ctx.spark.read.format("jdbc")
        .option("url", url)
        .option("dbtable", TABLE)
        .option("user", parts.username or "postgres")
        .option("driver", "org.postgresql.Driver")
        .option("partitionColumn", "user_id")
        .option("lowerBound", "0")
        .option("upperBound", str(ctx.args.users))
        .option("numPartitions", str(ctx.args.tasks))
        .load()
    )
    seconds = timed(ctx.df.join(F.broadcast(table), "user_id", "left"))
    return ctx.result(label, ctx.df.count(), seconds)


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


class HttpFetch:
    """The HTTP connector's lookups written as a user's own function (one aiohttp session per
    task, answers decoded by msgspec as the connector does): what the ``fetch=`` adapter
    costs, next to the connector."""

    honours_cancellation = True  # aiohttp's calls end at once when cancelled

    def __init__(self, target: str, batch: bool, capacity: int) -> None:
        self.target = target
        self.batch = batch
        self.capacity = capacity

    async def open(self) -> None:
        import aiohttp

        limit = max(1, self.capacity)
        connector = aiohttp.TCPConnector(limit=limit, limit_per_host=limit)
        self.session = aiohttp.ClientSession(connector=connector)

    async def __call__(self, key: Any) -> Any:
        import msgspec

        if self.batch:
            async with self.session.post(self.target, json={"keys": key}) as answer:
                found = msgspec.json.decode(await answer.read())
            return {int(k): v for k, v in found.items()}
        async with self.session.get(self.target.replace("{key}", str(key))) as answer:
            if answer.status == 404:
                return None
            return msgspec.json.decode(await answer.read())

    async def close(self) -> None:
        await self.session.close()


class RedisFetchMany:
    """A user's own ``fetch_many=`` over Redis: redis-py's asyncio client, one ``MGET`` per
    call, answered as records (``json.loads``) or in columns (pyarrow's JSON reader)."""

    honours_cancellation = True

    def __init__(self, url: str, prefix: str, capacity: int, columnar: bool) -> None:
        self.url, self.prefix, self.capacity, self.columnar = url, prefix, capacity, columnar

    async def open(self) -> None:
        from redis.asyncio import Redis

        self.redis = Redis.from_url(self.url, max_connections=max(1, self.capacity))

    async def __call__(self, keys: list[int]) -> Any:
        values: list[Any] = await self.redis.mget([f"{self.prefix}{k}" for k in keys])
        if not self.columnar:
            return {k: json.loads(v) for k, v in zip(keys, values) if v is not None}
        import io

        import pyarrow as pa
        import pyarrow.json as pa_json

        found = [i for i, v in enumerate(values) if v is not None]
        if not found:
            return None
        documents = b"\n".join(values[i] for i in found)
        table = pa_json.read_json(io.BytesIO(documents))
        asked = pa.array([keys[i] for i in found], pa.int64())
        if "user_id" in table.schema.names:  # the bench's records carry their key: replaced
            return table.set_column(table.schema.get_field_index("user_id"), "user_id", asked)
        return table.append_column("user_id", asked)

    async def close(self) -> None:
        await self.redis.aclose()


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


SLOW_METHODS: tuple[Method, ...] = (sync_udf, arrow_udf, thread_pool)
"""Methods that take minutes at full size, and are run once whatever ``--repeat`` says."""


def _raw_process(
    store: Store,
    keys: list[int],
    capacity: int,
    ready: Any,
    go: Any,
    measured: Any,
    http_client: str = "aiohttp",
    loop: str = "asyncio",
) -> None:
    """One raw client process: opens its client, says it is ready, waits for the go, looks its
    keys up, hands back the wall and CPU seconds of the lookups alone, and closes its client
    once the measure is taken (a Postgres backend's exit is the server's work, not a lookup's:
    closing 10 connections in the measured stretch added about 0.5 core-µs per row)."""
    import asyncio

    async def main() -> None:
        client = RawClient(store, capacity, http_client)
        await client.open()
        try:
            ready.put(None)
            go.wait()
            started, cpu = time.monotonic(), time.process_time()
            await client.lookup(keys)
            ready.put((time.monotonic() - started, time.process_time() - cpu))
            measured.wait(600)
        finally:
            await client.close()

    try:
        if loop == "uvloop":
            import uvloop

            uvloop.run(main())
        else:
            asyncio.run(main())
    except BaseException as error:  # said to the parent, which would otherwise wait for it
        ready.put(f"the raw client failed: {error!r}")
        raise


def _raw_answer(ready: Any) -> Any:
    answer = ready.get(timeout=600)
    if isinstance(answer, str):
        raise RuntimeError(answer)
    return answer


def ceiling(
    ctx: Context,
    keys_per_task: list[list[int]],
    rows: int,
    *,
    http_client: str = "aiohttp",
    loop: str = "asyncio",
) -> Result:
    """The raw async client alone, outside Spark, in as many processes as tasks, asking the
    keys asynclookup asks (each batch's distinct keys). Each process opens its client and
    connections before it is measured (asynclookup's live as long as the worker); its CPU is
    what it spends on the lookups (its own count: the meter would see its start too).
    ``http_client`` and ``loop``: which client (per-key HTTP: aiohttp or pyreqwest) on which
    event loop."""
    global LAST_CPU
    context = multiprocessing.get_context("fork")
    ready, go, measured = context.Queue(), context.Event(), context.Event()
    processes = [
        context.Process(
            target=_raw_process,
            args=(ctx.store, keys, ctx.capacity, ready, go, measured, http_client, loop),
        )
        for keys in keys_per_task
    ]
    for process in processes:
        process.start()
    try:
        for _ in processes:
            _raw_answer(ready)
        if METER is not None:
            METER.start()
        started = time.monotonic()
        go.set()
        done = [_raw_answer(ready) for _ in processes]
        seconds = time.monotonic() - started
        if METER is not None:
            LAST_CPU = METER.stop()
            LAST_CPU.seconds["raw_client"] = sum(cpu for _, cpu in done)
    finally:  # no process left waiting, whatever happened here
        go.set()
        measured.set()
        for process in processes:
            process.join()
    requests = sum(len(k) for k in keys_per_task)
    decode = " + json.loads" if ctx.store.kind == "redis" else ""
    which = f" ({http_client}, {loop})" if ctx.store.kind == "http" and not ctx.store.batch else ""
    return ctx.result(
        f"raw async client alone{which}{decode}, {len(processes)} processes",
        rows,
        seconds,
        note=f"{requests:,} keys, as asynclookup sends them; connections opened before",
    )


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
