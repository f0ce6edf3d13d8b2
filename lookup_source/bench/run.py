"""``asynclookup bench``: every way a Spark user could do a lookup join, side by side.

For each scenario (a store and a latency), in the same run, against the same server and keys:

1. a synchronous per-row Python UDF (on a sample, extrapolated);
2. an Arrow Python UDF with ``spark.sql.execution.pythonUDF.arrow.concurrency.level`` =
   capacity (Spark's own thread pool);
3. a thread pool of ``capacity`` threads inside ``mapInArrow`` (a "limited concurrent client");
4. for stores that scan: read the whole table and broadcast-join it;
5. asynclookup ``ordered`` and ``unordered`` (and with the cache, for skewed keys);
6. the ceiling: the raw async client alone, outside Spark, in as many processes as tasks;
7. for HTTP, Little's law: tasks x capacity / latency.

It writes ``results.md``, ``results.json`` and ``throughput.png`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from typing import Any

from lookup_source.bench.stores import (
    SCHEMA,
    Store,
    blocking_fetcher,
    http_store,
    postgres_store,
    raw_client,
    redis_store,
)

BATCH_ROWS = 10_000


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

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scenarios",
        default="http-1,http-5,http-20,http-batch-5,redis,postgres",
        help="comma-separated: http-<ms>, http-batch-<ms>, redis, postgres",
    )
    parser.add_argument("--rows", type=int, default=200_000, help="input rows per method")
    parser.add_argument(
        "--sample-rows", type=int, default=2_000, help="rows for the synchronous UDF (extrapolated)"
    )
    parser.add_argument("--users", type=int, default=50_000, help="distinct keys in the store")
    parser.add_argument("--capacity", type=int, default=100)
    parser.add_argument("--tasks", type=int, default=2, help="Spark tasks (and processes)")
    parser.add_argument("--distributions", default="uniform,zipf")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--postgres-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--no-plot", action="store_true")


# -- input -------------------------------------------------------------------------------------


def events(spark: Any, rows: int, users: int, tasks: int, distribution: str) -> Any:
    from pyspark.sql import functions as F

    ids = spark.range(rows, numPartitions=tasks)
    if distribution == "zipf":  # a power law: a few keys take most of the traffic
        key = F.floor(F.pow(F.rand(7), F.lit(4.0)) * users)
    else:
        key = F.pmod(F.xxhash64("id"), F.lit(users))
    return ids.select(F.col("id").alias("event_id"), key.cast("long").alias("user_id"))


def task_keys(rows: int, users: int, tasks: int, distribution: str, spark: Any) -> list[list[int]]:
    """The distinct keys of each 10,000-row batch, per task: the requests asynclookup makes."""
    df = events(spark, rows, users, tasks, distribution)
    out: list[list[int]] = []
    for part in df.rdd.glom().collect():
        keys: list[int] = []
        for start in range(0, len(part), BATCH_ROWS):
            keys.extend(dict.fromkeys(r.user_id for r in part[start : start + BATCH_ROWS]))
        out.append(keys)
    return out


# -- methods -----------------------------------------------------------------------------------


def timed(df: Any) -> float:
    started = time.monotonic()
    df.write.format("noop").mode("overwrite").save()
    return time.monotonic() - started


def method_sync_udf(spark: Any, store: Store, df: Any, sample: Any, args: Any) -> Result:
    from pyspark.sql.functions import udf

    kind, target = store.kind, _blocking_target(store)
    holder: dict[str, Any] = {}

    def name(user_id: int) -> str | None:
        fetch = holder.get("fetch")
        if fetch is None:
            fetch = holder["fetch"] = blocking_fetcher(kind, target)
        return fetch(user_id)

    fn = udf(lambda u: name(u), "string")
    rows = sample.count()
    seconds = timed(sample.withColumn("name", fn("user_id")))
    return Result(
        store.name, "", "sync per-row UDF", rows, seconds, note=f"on a {rows:,}-row sample"
    )


POSTGRES_THREADS = 40
"""Threads (each with its own connection) for the blocking Postgres alternatives: 2 tasks x 40
stays under Postgres' default max_connections of 100."""


def threads_for(store: Store, capacity: int) -> int:
    return min(capacity, POSTGRES_THREADS) if store.kind == "postgres" else capacity


def method_arrow_udf(spark: Any, store: Store, df: Any, sample: Any, args: Any) -> Result:
    from pyspark.sql.functions import udf

    kind, target = store.kind, _blocking_target(store)
    holder: dict[str, Any] = {}

    def name(user_id: int) -> str | None:  # called per row, from Spark's thread pool
        fetch = holder.get("fetch")
        if fetch is None:
            fetch = holder["fetch"] = blocking_fetcher(kind, target)
        return fetch(user_id)

    conf = "spark.sql.execution.pythonUDF.arrow.concurrency.level"
    level = threads_for(store, args.capacity)
    spark.conf.set(conf, str(level))
    try:
        fn = udf(lambda u: name(u), "string", useArrow=True)
        seconds = timed(df.withColumn("name", fn("user_id")))
    except Exception as exc:  # older Spark: no concurrency level
        first = str(exc).strip().splitlines()[-1][:80]
        return Result(store.name, "", "Arrow UDF, concurrency level", 0, 0.0, note=first)
    finally:
        spark.conf.unset(conf)
    return Result(
        store.name, "", f"Arrow UDF, concurrency level {args.capacity}", df.count(), seconds
    )


def method_thread_pool(spark: Any, store: Store, df: Any, sample: Any, args: Any) -> Result:
    import pyarrow as pa

    kind, target, capacity = store.kind, _blocking_target(store), threads_for(store, args.capacity)

    def enrich(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fetch = blocking_fetcher(kind, target)
        with ThreadPoolExecutor(capacity) as pool:
            for batch in batches:
                names = list(pool.map(fetch, batch.column("user_id").to_pylist()))
                yield batch.append_column("name", pa.array(names, pa.string()))

    seconds = timed(df.mapInArrow(enrich, "event_id long, user_id long, name string"))
    return Result(store.name, "", f"thread pool of {capacity} in mapInArrow", df.count(), seconds)


def method_broadcast(spark: Any, store: Store, df: Any, sample: Any, args: Any) -> Result:
    from pyspark.sql import functions as F

    table = (
        spark.read.format("asynclookup")
        .schema(SCHEMA)
        .options(**store.options)
        .option("partitions", str(args.tasks))
        .load()
    )
    seconds = timed(df.join(F.broadcast(table), "user_id", "left"))
    return Result(store.name, "", "scan + broadcast join", df.count(), seconds)


def asynclookup_method(mode: str, cache: bool) -> Callable[..., Result]:
    def method(spark: Any, store: Store, df: Any, sample: Any, args: Any) -> Result:
        from lookup_source import lookup_join, lookup_metrics

        options = {**store.options, "capacity": str(args.capacity), "output.mode": mode}
        if cache:
            options["cache.max-rows"] = "100000"
        out = lookup_join(df, "user_id", schema=SCHEMA, options=options)
        seconds = timed(out)
        metrics = lookup_metrics(out)
        label = f"asynclookup {mode}" + (" + cache" if cache else "")
        return Result(
            store.name,
            "",
            label,
            metrics.rows,
            seconds,
            requests=metrics.requests,
            peak_memory_mb=metrics.peak_rss_mb,
        )

    method.__name__ = f"asynclookup_{mode}" + ("_cache" if cache else "")
    return method


def _raw_process(store: Store, keys: list[int], capacity: int, queue: Any) -> None:
    import asyncio

    started = time.monotonic()
    asyncio.run(raw_client(store, keys, capacity))
    queue.put(time.monotonic() - started)


def method_ceiling(
    store: Store, keys_per_task: list[list[int]], rows: int, capacity: int
) -> Result:
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    started = time.monotonic()
    processes = [
        context.Process(target=_raw_process, args=(store, keys, capacity, queue))
        for keys in keys_per_task
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join()
    seconds = time.monotonic() - started
    requests = sum(len(k) for k in keys_per_task)
    return Result(
        store.name,
        "",
        f"raw async client alone, {len(processes)} processes",
        rows,
        seconds,
        note=f"{requests:,} keys, as asynclookup sends them",
    )


def _blocking_target(store: Store) -> str:
    if store.kind == "http" and store.batch:
        return store.target.replace("/users/batch", "/users/{key}")
    return store.target


# -- scenarios ---------------------------------------------------------------------------------


def open_store(name: str, args: Any) -> AbstractContextManager[Store]:
    if name.startswith("http-batch-"):
        return http_store(args.users, float(name.rsplit("-", 1)[1]), batch=True)
    if name.startswith("http-"):
        return http_store(args.users, float(name.rsplit("-", 1)[1]), batch=False)
    if name == "redis":
        return redis_store(args.redis_url, args.users)
    if name == "postgres":
        return postgres_store(args.postgres_url, args.users)
    raise SystemExit(f"unknown scenario {name!r}")


def run_scenario(spark: Any, name: str, distribution: str, args: Any) -> list[Result]:
    results: list[Result] = []
    with open_store(name, args) as store:
        df = events(spark, args.rows, args.users, args.tasks, distribution)
        sample = events(
            spark, min(args.sample_rows, args.rows), args.users, args.tasks, distribution
        )
        methods: list[Callable[..., Result]] = [
            method_sync_udf,
            method_arrow_udf,
            method_thread_pool,
        ]
        if store.can_scan:
            methods.append(method_broadcast)
        methods += [asynclookup_method("ordered", False), asynclookup_method("unordered", False)]
        if distribution == "zipf":
            methods.append(asynclookup_method("ordered", True))
        for method in methods:
            before = store.requests()
            print(f"  {name} / {distribution}: {method.__name__} ...", flush=True)
            result = method(spark, store, df, sample, args)
            if result.requests < 0 and before >= 0:
                result.requests = store.requests() - before
            result.distribution = distribution
            results.append(result)
        keys = task_keys(args.rows, args.users, args.tasks, distribution, spark)
        ceiling = method_ceiling(store, keys, args.rows, args.capacity)
        ceiling.distribution = distribution
        results.append(ceiling)
        if store.kind == "http" and not store.batch and store.latency_ms > 0:
            bound = args.tasks * args.capacity / (store.latency_ms / 1000)
            results.append(
                Result(
                    store.name,
                    distribution,
                    "Little's law bound",
                    args.rows,
                    args.rows / bound,
                    note="tasks x capacity / latency",
                )
            )
    return results


def report(results: list[Result], args: Any, machine: str) -> str:
    lines = [
        f"Machine: {machine}",
        "",
        f"{args.rows:,} rows per method, {args.users:,} keys, capacity {args.capacity}, "
        f"{args.tasks} tasks. Ratios: asynclookup (ordered) / method.",
        "",
    ]
    header = (
        "| scenario | keys | method | rows/s | asynclookup ÷ method | requests "
        "| peak worker MB | note |"
    )
    for (scenario, distribution), group in _groups(results).items():
        ours = next((r for r in group if r.method == "asynclookup ordered"), None)
        ceiling = next((r for r in group if r.method.startswith("raw async client")), None)
        lines += [
            f"### {scenario}, {distribution} keys",
            "",
            header,
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in group:
            ratio = (ours.rows_per_s / r.rows_per_s) if ours and r.rows_per_s else 0.0
            requests = f"{r.requests:,}" if r.requests >= 0 else ""
            memory = f"{r.peak_memory_mb:,.0f}" if r.peak_memory_mb else ""
            note = r.note.replace("|", "/").replace("\n", " ")
            lines.append(
                f"| {scenario} | {distribution} | {r.method} | {r.rows_per_s:,.0f} | "
                f"{ratio:.2f}x | {requests} | {memory} | {note} |"
            )
        if ours and ceiling and ceiling.rows_per_s:
            lines += [
                "",
                f"asynclookup reaches {ours.rows_per_s / ceiling.rows_per_s:.0%} of "
                "the raw client ceiling.",
            ]
        lines.append("")
    return "\n".join(lines)


def _groups(results: list[Result]) -> dict[tuple[str, str], list[Result]]:
    groups: dict[tuple[str, str], list[Result]] = {}
    for r in results:
        groups.setdefault((r.scenario, r.distribution), []).append(r)
    return groups


def plot(results: list[Result], path: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    http = [
        r for r in results if r.scenario.startswith("http-get-") and r.distribution == "uniform"
    ]
    if not http:
        return False
    figure, axis = plt.subplots(figsize=(8, 5))
    for method in dict.fromkeys(r.method for r in http):
        points = sorted(
            (float(r.scenario.rsplit("-", 1)[1].removesuffix("ms")), r.rows_per_s)
            for r in http
            if r.method == method
        )
        axis.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=method)
    axis.set_xlabel("service latency (ms)")
    axis.set_ylabel("rows per second")
    axis.set_yscale("log")
    axis.set_title("HTTP lookup join throughput by method")
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    return True


def run_bench(args: argparse.Namespace) -> int:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(f"local[{args.tasks}]")
        .appName("asynclookup-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", str(BATCH_ROWS))
        .config("spark.sql.autoBroadcastJoinThreshold", "-1")
        # a fresh Python worker per task: its peak memory is that task's alone
        .config("spark.python.worker.reuse", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    from lookup_source import AsyncLookupDataSource

    spark.dataSource.register(AsyncLookupDataSource)
    machine = (
        f"{platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, pyspark {spark.version}"
    )
    results: list[Result] = []
    try:
        for name in args.scenarios.split(","):
            for distribution in args.distributions.split(","):
                results += run_scenario(spark, name.strip(), distribution.strip(), args)
    finally:
        spark.stop()
    os.makedirs(args.out, exist_ok=True)
    text = report(results, args, machine)
    with open(os.path.join(args.out, "results.md"), "w") as handle:
        handle.write(text)
    with open(os.path.join(args.out, "results.json"), "w") as handle:
        json.dump(
            {
                "machine": machine,
                "arguments": vars(args),
                "results": [{**asdict(r), "rows_per_s": r.rows_per_s} for r in results],
            },
            handle,
            indent=2,
        )
    if not args.no_plot:
        plot(results, os.path.join(args.out, "throughput.png"))
    print(text)
    return 0
