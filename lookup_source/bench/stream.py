"""``asynclookup bench --scenarios stream``: what a small micro-batch pays for a lookup, and how
many connections a stream opens.

A source of ``--stream-rate`` rows per second over ``--tasks`` partitions, a micro-batch of
rate x trigger rows every ``--stream-trigger-ms`` (Spark's ``rate-micro-batch``), runs
``--stream-batches`` micro-batches after ``--stream-warm-up``, into Spark's ``noop`` sink, for
each method:

- no Python step at all;
- the Spark floor: the same ``mapInArrow`` appending computed columns, no I/O;
- per store (Redis and Postgres, plain and over TLS): ``lookup_join`` with the clients the
  Python workers keep (the default, its progress entry one text field), the same with an
  entry of named fields (``metrics.progress=fields``) and without the micro-batch's metrics in
  its progress (``metrics.progress=false``), and with a client per task
  (``connection.max-idle.ms=0``, what 0.3 did); and, outside Spark, what one task's lookups
  of 250 keys cost in this process on a kept client and on a client of its own (medians in
  the same columns).

Each reports the median and 90th percentile of the micro-batches' ``addBatch`` time (the
stream's own progress), what it adds to the median of the floor run just before the store's
lookups, and the connections the store accepted per micro-batch and per minute while
counted (a TCP proxy in front of the store counts them). The TLS
stores are servers of the bench's own, with a CA it makes: they need a clone (the test
helpers ``tests.servers`` and ``tests.tls``), ``redis-server`` built with TLS and Postgres'
binaries; without them the TLS rows say why they are missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from lookup_source.bench import journal
from lookup_source.bench.stores import SCHEMA, postgres_store, redis_store


@dataclass
class StreamResult:
    """One method's micro-batches."""

    store: str
    method: str
    batches: int
    rows: int
    median_ms: float
    p90_ms: float
    connections_per_minute: float | None = None
    connections_per_batch: float | None = None
    note: str = ""
    added_ms: float | None = None
    durations_ms: list[float] = field(default_factory=list)


class CountingProxy:
    """A TCP proxy that forwards bytes as they are (TLS included) and counts the connections
    it accepts."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.connections = 0
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._server: asyncio.AbstractServer = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._handle, "127.0.0.1", 0), self._loop
        ).result(10)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, up_writer))

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(Exception):  # a side that went away ends the pipe
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            with contextlib.suppress(Exception):
                sink.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def url(self, url: str) -> str:
        """``url`` through the proxy: the same host name (TLS checks it), the proxy's port."""
        parts = urlsplit(url)
        userinfo, _, hostport = parts.netloc.rpartition("@")
        host = hostport.rsplit(":", 1)[0]
        netloc = (userinfo + "@" if userinfo else "") + f"{host}:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc))

    def close(self) -> None:
        """Stop accepting, drop the connections open through the proxy, stop its thread."""

        async def stop() -> None:
            self._server.close()
            for writer in self._writers:  # each pipe then ends, and its connection's task
                writer.transport.abort()
            current = asyncio.current_task()
            pending = [task for task in asyncio.all_tasks() if task is not current]
            if pending:
                await asyncio.wait(pending, timeout=5)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()


def _events(spark: Any, args: Any) -> Any:
    from pyspark.sql import functions as F

    # rate-micro-batch: every trigger, rate x trigger rows (the rate source advances by whole
    # seconds, so it makes one micro-batch a second of the rate's rows, whatever the trigger)
    trigger_ms = args.stream_trigger_ms
    return (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", max(1, round(args.stream_rate * trigger_ms / 1000)))
        .option("numPartitions", args.tasks)
        .option("advanceMillisPerBatch", trigger_ms)
        .load()
        .select(F.col("value").alias("event_id"), (F.col("value") % args.users).alias("user_id"))
    )


def _floor(events: Any) -> Any:
    from lookup_source.bench.floor import floor_columns

    return events.mapInArrow(floor_columns, "event_id long, user_id long, name string, tier string")


def _run(
    spark: Any,
    frame: Any,
    args: Any,
    store: str,
    method: str,
    proxy: CountingProxy | None = None,
    *,
    batches: int | None = None,
    batch_s: float = 0.0,
) -> StreamResult:
    """Run ``frame`` as a stream; measure ``batches`` micro-batches (``--stream-batches``)
    after the warm-up, waiting as long as micro-batches of about ``batch_s`` seconds take."""
    print(f"  stream / {store}: {method} ...", flush=True)
    checkpoint = tempfile.mkdtemp(prefix="asynclookup-bench-stream-")
    query = (
        frame.writeStream.format("noop")
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime=f"{args.stream_trigger_ms} milliseconds")
        .start()
    )
    counted = args.stream_batches if batches is None else batches
    warm, total = args.stream_warm_up, args.stream_warm_up + counted
    started_count = counted_at = None
    try:
        each = max((args.stream_trigger_ms / 1000) * 10, batch_s * 3)
        deadline = time.monotonic() + 60 + total * each
        while time.monotonic() < deadline:
            if query.exception() is not None:
                raise RuntimeError(f"the stream failed: {query.exception()}")
            done = [p for p in query.recentProgress if p["numInputRows"] > 0]
            if len(done) >= warm and started_count is None:
                started_count, counted_at = (proxy.connections if proxy else 0), time.monotonic()
            if len(done) >= total:
                break
            time.sleep(0.02)
        else:
            raise RuntimeError(f"{method}: fewer than {total} micro-batches")
        ended = time.monotonic()
        connections = proxy.connections - (started_count or 0) if proxy else None
        progress = [p for p in query.recentProgress if p["numInputRows"] > 0][warm:total]
    finally:
        query.stop()
        shutil.rmtree(checkpoint, ignore_errors=True)  # the stream's own: nothing left behind
    durations = [float(p["durationMs"].get("addBatch", 0)) for p in progress]
    minutes = (ended - (counted_at or ended)) / 60
    return StreamResult(
        store,
        method,
        len(durations),
        sum(int(p["numInputRows"]) for p in progress),
        statistics.median(durations),
        statistics.quantiles(durations, n=10)[-1] if len(durations) > 1 else durations[0],
        connections / minutes if connections is not None and minutes > 0 else None,
        connections / len(durations) if connections is not None and durations else None,
        durations_ms=durations,
    )


@contextlib.contextmanager
def _tls_servers(args: Any) -> Iterator[dict[str, str]]:
    """TLS URLs of a Redis and a Postgres of the bench's own (``name -> url``), or, when they
    cannot be started here, ``{"unavailable": why}``."""
    try:  # the test helpers of a clone (not type-checked with the package)
        servers = importlib.import_module("tests.servers")
        make_pki = importlib.import_module("tests.tls").make_pki
        redis_tls_server = servers.redis_tls_server
        postgres_tls_server = servers.postgres_tls_server
    except ImportError as missing:
        yield {"unavailable": f"TLS servers need a clone (tests.servers): {missing}"}
        return
    with contextlib.ExitStack() as stack:
        try:
            pki = make_pki(Path(stack.enter_context(tempfile.TemporaryDirectory())))
            redis = stack.enter_context(redis_tls_server(pki))
            postgres = stack.enter_context(postgres_tls_server(pki))
        except BaseException as failure:  # (pytest.skip raises a BaseException)
            yield {"unavailable": f"TLS servers could not start: {failure}"}
            return
        yield {
            "redis": f"{redis.url}?ssl_ca_certs={pki.ca}",
            "postgres": f"postgresql://postgres@localhost:{postgres.port}/postgres"
            f"?sslmode=verify-full&sslrootcert={pki.ca}",
        }


def _task_cost(store: str, options: dict[str, str], args: Any, *, keep: bool) -> StreamResult:
    """One task's lookups (250 keys, as in a small micro-batch) run in this process (5 times
    ``--stream-batches`` tasks, 200 by default, after 10): what the task itself costs, on a
    kept client or on a client of its own."""
    import pyarrow as pa

    from lookup_source.engine.kept.worker import forget_worker
    from lookup_source.engine.runner import run_lookups
    from lookup_source.spark.plan import LookupPlan

    plan = LookupPlan.build(options, SCHEMA)
    spec = plan.engine_spec(("user_id",), how="left")
    config = plan.connector_config()
    durations = []
    for task in range(10 + max(10, 5 * args.stream_batches)):
        keys = [(task * 251 + k) % args.users for k in range(250)]
        batch = pa.RecordBatch.from_arrays([pa.array(keys, pa.int64())], names=["user_id"])
        started = time.perf_counter()
        for _ in run_lookups([batch], spec, config, keep_client=keep):
            pass
        durations.append((time.perf_counter() - started) * 1000)
    forget_worker()
    durations = durations[10:]  # the first tasks open the kept client
    return StreamResult(
        store,
        f"one task in process, 250 keys, {'a kept client' if keep else 'a client of its own'}",
        len(durations),
        250 * len(durations),
        statistics.median(durations),
        statistics.quantiles(durations, n=10)[-1],
        durations_ms=durations,
    )


def run_stream(spark: Any, args: Any) -> list[StreamResult]:
    """Every method of the stream scenario (see the module)."""
    from lookup_source import lookup_join

    floor_name = "Spark floor: mapInArrow, no I/O"
    results = [_run(spark, _events(spark, args), args, "-", "no Python step")]
    with _tls_servers(args) as tls:
        targets = [
            ("redis", args.redis_url, redis_store),
            ("postgres", args.postgres_url, postgres_store),
        ]
        targets += [
            (f"{name} TLS", tls[name], opener)
            for name, opener in (("redis", redis_store), ("postgres", postgres_store))
            if name in tls
        ]
        for name, url, opener in targets:
            # the floor just before each store's lookups: what they add is read against it
            # (the JVM and the workers warm up over the run)
            floor = _run(spark, _floor(_events(spark, args)), args, name, floor_name)
            results.append(floor)
            with opener(url, args.users) as store:
                host, port = urlsplit(url).hostname or "127.0.0.1", urlsplit(url).port
                proxy = CountingProxy(host, port or (6379 if "redis" in name else 5432))
                try:
                    options = {
                        **store.options,
                        "url": proxy.url(url),
                        "capacity": str(args.capacity),
                    }
                    for method, extra in (
                        ("asynclookup, clients kept by the workers", {}),
                        (
                            "asynclookup, progress entry of named fields (metrics.progress=fields)",
                            {"metrics.progress": "fields"},
                        ),
                        (
                            "asynclookup, no progress metrics (metrics.progress=false)",
                            {"metrics.progress": "false"},
                        ),
                        (
                            "asynclookup, a client per task (connection.max-idle.ms=0)",
                            {"connection.max-idle.ms": "0"},
                        ),
                    ):
                        frame = lookup_join(
                            _events(spark, args),
                            "user_id",
                            schema=SCHEMA,
                            options={**options, **extra},
                        )
                        try:
                            result = _run(spark, frame, args, name, method, proxy)
                        except Exception as error:  # kept as failed, the run goes on
                            reason = journal.JOURNAL.failed(f"stream / {name}: {method}", error)
                            results.append(
                                StreamResult(name, method, 0, 0, 0, 0, note=f"FAILED: {reason}")
                            )
                            continue
                        result.added_ms = result.median_ms - floor.median_ms
                        results.append(result)
                        journal.JOURNAL.done(
                            f"stream / {name}: {method}: addBatch median "
                            f"{result.median_ms:.0f} ms ({result.added_ms:+.0f} over the floor)"
                        )
                finally:
                    proxy.close()
                direct = {**store.options, "capacity": str(args.capacity)}
                for keep in (True, False):
                    results.append(_task_cost(name, direct, args, keep=keep))
        if "unavailable" in tls:
            results.append(StreamResult("TLS", "(not run)", 0, 0, 0, 0, note=tls["unavailable"]))
    return results


def stream_report(results: list[StreamResult], args: Any) -> list[str]:
    """The scenario's section of results.md."""
    lines = [
        f"### stream: {args.stream_rate:,} rows/s over {args.tasks} partitions, a micro-batch "
        f"every {args.stream_trigger_ms} ms, {args.stream_batches} counted after "
        f"{args.stream_warm_up}",
        "",
        "| store | method | addBatch median (ms) | p90 (ms) | + over the floor (ms) | "
        "connections opened per micro-batch | per minute | note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        added = f"{r.added_ms:+.0f}" if r.added_ms is not None else ""
        per_minute = (
            f"{r.connections_per_minute:,.1f}" if r.connections_per_minute is not None else ""
        )
        per_batch = f"{r.connections_per_batch:.2f}" if r.connections_per_batch is not None else ""
        lines.append(
            f"| {r.store} | {r.method} | {_ms(r.median_ms)} | {_ms(r.p90_ms)} | {added} | "
            f"{per_batch} | {per_minute} | {r.note} |"
        )
    return [*lines, ""]


def _ms(value: float) -> str:
    return f"{value:.2f}" if value < 10 else f"{value:.0f}"
