"""``asynclookup bench``: every way a Spark user could do the lookup join, side by side.

For each scenario (a store, a latency), in the same run, against the same server and keys:

1. a synchronous per-row Python UDF (on a sample, extrapolated);
2. an Arrow Python UDF run by Spark's own thread pool at a concurrency level;
3. a thread pool inside ``mapInArrow``;
4. the strongest hand-written synchronous code: distinct keys per batch, ``MGET`` / ``= ANY`` /
   batch POST of ``batch.size`` keys, values decoded into columns, inside ``mapInArrow``;
5. for stores that scan: the table read whole and broadcast-joined (and, for Postgres, Spark's
   own JDBC reader);
6. asynclookup: ``lookup_join`` ordered and unordered, and the SQL table function (HTTP: also
   the same lookups through ``fetch=`` / ``fetch_many=``, a user's own function);
7. the Spark floor: the same ``mapInArrow`` appending computed columns, no I/O;
8. the ceiling: the raw async client alone, outside Spark, in as many processes as tasks.

Scenarios: ``http-<ms>`` (per-key GET), ``http-batch-<ms>``, ``redis``, ``postgres``, and
``redis-net`` / ``postgres-net`` (the store behind a latency proxy, ``--net-delay-ms`` each way);
``sweep`` (HTTP per key at ``--sweep-latency-ms``: asynclookup against the threaded Arrow UDF
at the same concurrency, capacity by capacity); ``memory`` (peak Python worker memory of
``lookup_join`` for ``--memory-rows``); ``stream`` (what a small micro-batch pays for a
lookup beside the floor, and the connections a stream opens: :mod:`.stream`); ``plan``
(lookups, a broadcast or a scan against Spark's JDBC reader and a join, by input size:
:mod:`.plan`); ``budget`` (a service with a quota and a skewed input: ``capacity`` alone,
``capacity`` and ``rate.limit.total`` tuned by hand, a cluster budget: :mod:`.budget`). It
writes ``results.md``, ``results.json``, ``throughput.png``,
``capacity.png`` and ``plans.png`` under ``--out``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from lookup_source.bench import journal as journal_module
from lookup_source.bench import methods as m
from lookup_source.bench.budget import BudgetResult, budget_report, run_budget
from lookup_source.bench.budget import as_json as budget_json
from lookup_source.bench.cpu import GROUPS, CpuMeter
from lookup_source.bench.journal import Journal
from lookup_source.bench.methods import Context, Method, Result
from lookup_source.bench.plan import PlanResult, plan_report, plot_plans, run_plan
from lookup_source.bench.plan import as_json as plan_json
from lookup_source.bench.stores import (
    Store,
    fanout_store,
    http_store,
    postgres_store,
    redis_store,
)
from lookup_source.bench.stream import StreamResult, run_stream, stream_report
from lookup_source.bench.tail import TailResult, run_tail, tail_report
from lookup_source.bench.tail import as_json as tail_json
from lookup_source.bench.transports import TransportRun, run_transports
from lookup_source.bench.transports_report import as_json as transports_json
from lookup_source.bench.transports_report import transports_report

BATCH_ROWS = 10_000


def events(spark: Any, rows: int, users: int, tasks: int, distribution: str) -> Any:
    from pyspark.sql import functions as F

    ids = spark.range(rows, numPartitions=tasks)
    if distribution == "zipf":  # a power law: a few keys take most of the traffic
        key = F.floor(F.pow(F.rand(7), F.lit(4.0)) * users)
    elif distribution == "distinct":  # in order: no key is asked while it is in flight
        key = F.col("id") % F.lit(users)
    else:
        key = F.pmod(F.xxhash64("id"), F.lit(users))
    return ids.select(F.col("id").alias("event_id"), key.cast("long").alias("user_id"))


def task_keys(df: Any) -> list[list[int]]:
    """The distinct keys of each 10,000-row batch, per task: the keys asynclookup asks."""
    out: list[list[int]] = []
    for part in df.rdd.glom().collect():
        keys: list[int] = []
        for start in range(0, len(part), BATCH_ROWS):
            keys.extend(dict.fromkeys(r.user_id for r in part[start : start + BATCH_ROWS]))
        out.append(keys)
    return out


# -- scenarios ---------------------------------------------------------------------------------


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


def methods_for(store: Store, distribution: str) -> list[Method]:
    chosen: list[Method] = [m.sync_udf, m.arrow_udf, m.thread_pool]
    if store.kind != "http" or store.batch:
        chosen.append(m.batched_loop)
    if store.can_scan:
        chosen.append(m.scan_broadcast)
    if store.kind == "postgres":
        chosen.append(m.jdbc_broadcast)
    chosen += [m.asynclookup(mode) for mode in ("ordered", "unordered", "key-ordered")]
    if store.kind == "http":
        chosen.append(m.asynclookup_fetch)
    if store.kind == "redis":
        chosen += [m.asynclookup_fetch_many_redis(columnar) for columnar in (False, True)]
    if store.can_scan:
        chosen += [m.asynclookup_strategy("broadcast"), m.asynclookup_strategy("auto")]
    if distribution == "zipf":
        chosen.append(m.asynclookup("ordered", cache=True))
        chosen.append(m.asynclookup("ordered", cache=True, by_key=True))
    chosen += [m.sql_table_function, m.floor]
    return chosen


def run_scenario(spark: Any, name: str, distribution: str, args: Any) -> list[Result]:
    results: list[Result] = []
    with open_store(name, args) as store:
        per_key_http = store.kind == "http" and not store.batch
        rows = args.http_rows if per_key_http else args.rows
        df = events(spark, rows, args.users, args.tasks, distribution).cache()
        df.count()
        sample = events(spark, min(args.sample_rows, rows), args.users, args.tasks, distribution)
        ctx = Context(spark, store, df, sample, args, args.capacity, distribution)
        m.METER = CpuMeter(store.server_port)
        for method in methods_for(store, distribution):
            if args.skip_slow and method in m.SLOW_METHODS:
                continue
            runs = 1 if method in m.SLOW_METHODS else max(1, args.repeat)
            results.append(_best_of(runs, functools.partial(_measured, method, ctx, store)))
        keys = task_keys(df)
        ceiling = functools.partial(_measured_ceiling, ctx, keys, rows)
        results.append(_best_of(max(1, args.repeat), ceiling))
        m.METER = None
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
    m.LAST_CPU = None
    try:
        result = method(ctx)
    except Exception as error:  # kept as failed, the run goes on
        reason = journal_module.JOURNAL.failed(label, error)
        return ctx.result(method.__name__, 0, 0.0, note=f"FAILED: {reason}")
    if result.requests < 0 and before >= 0:
        result.requests = store.requests() - before
    if m.LAST_CPU is not None:
        result.cpu_us_per_row = m.LAST_CPU.per_row_us(result.rows)
    journal_module.JOURNAL.done(f"{label}: {result.rows_per_s:,.0f} rows/s")
    return result


def _measured_ceiling(ctx: Context, keys: list[list[int]], rows: int) -> Result:
    m.LAST_CPU = None
    result = m.ceiling(ctx, keys, rows)
    if m.LAST_CPU is not None:
        result.cpu_us_per_row = m.LAST_CPU.per_row_us(rows)
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


# -- report ------------------------------------------------------------------------------------


def _groups(results: list[Result]) -> dict[tuple[str, str], list[Result]]:
    groups: dict[tuple[str, str], list[Result]] = {}
    for r in results:
        groups.setdefault((r.scenario, r.distribution), []).append(r)
    return groups


def _find(group: list[Result], prefix: str) -> Result | None:
    return next((r for r in group if r.method.startswith(prefix) and r.rows_per_s), None)


def _ratio(a: Result | None, b: Result | None) -> float | None:
    return a.rows_per_s / b.rows_per_s if a and b and b.rows_per_s else None


def targets(results: list[Result]) -> list[tuple[str, str, float | None, bool | None]]:
    """(scenario, target, measured ratio, met) for the targets of the columnar issue."""
    out: list[tuple[str, str, float | None, bool | None]] = []

    def check(
        scenario: str, text: str, ratio: float | None, goal: float, above: bool = True
    ) -> None:
        met = None if ratio is None else (ratio >= goal if above else ratio <= goal)
        out.append((scenario, text, ratio, met))

    for (scenario, _), group in _groups(results).items():
        ours = _find(group, "asynclookup ordered")
        raw = _find(group, "raw async client")
        loop = _find(group, "sync batched loop")
        sql = _find(group, "asynclookup SQL table function")
        if scenario == "redis":
            check(
                scenario, "≥ 1.5x the raw redis-py MGET + json.loads client", _ratio(ours, raw), 1.5
            )
            check(scenario, "≥ 2x the synchronous MGET loop", _ratio(ours, loop), 2.0)
        if scenario.startswith("redis,"):
            check(scenario, "≥ 3x the synchronous MGET loop", _ratio(ours, loop), 3.0)
        if scenario == "postgres":
            check(scenario, "≥ 1.2x the raw asyncpg = ANY client", _ratio(ours, raw), 1.2)
            check(scenario, "≥ 3x the synchronous = ANY loop", _ratio(ours, loop), 3.0)
        if scenario == "http-get-5ms":
            check(scenario, "≥ 0.95x the raw aiohttp client", _ratio(ours, raw), 0.95)
        if scenario == "http-batch-5ms":
            check(scenario, "≥ 0.8x the raw aiohttp client", _ratio(ours, raw), 0.8)
        if sql and ours:
            check(scenario, "SQL table function ≥ 0.8x lookup_join", _ratio(sql, ours), 0.8)
    memory = [r for r in results if r.scenario == "memory (redis)"]
    if len(memory) >= 2 and memory[0].peak_memory_mb:
        ratio = memory[-1].peak_memory_mb / memory[0].peak_memory_mb
        check(
            "memory",
            f"peak worker memory for {memory[-1].rows:,} rows ≤ 1.1x that for {memory[0].rows:,}",
            ratio,
            1.1,
            above=False,
        )
    return out


def report(results: list[Result], args: Any, machine: str) -> str:
    lines = [
        f"Machine: {machine}",
        "",
        f"{args.tasks} tasks, capacity {args.capacity} per task (threaded methods: as many "
        f"threads; Postgres: at most {m.POSTGRES_THREADS}), {args.users:,} keys. Ratios: "
        "asynclookup (ordered) / method.",
        "",
    ]
    header = (
        "| scenario | keys | method | rows/s | asynclookup ÷ method | requests "
        "| peak worker MB | note |"
    )
    sweep = [r for r in results if r.scenario.startswith("sweep")]
    memory = [r for r in results if r.scenario == "memory (redis)"]
    fanned = [r for r in results if r.scenario.startswith("memory fan-out")]
    rest = [r for r in results if r not in sweep and r not in memory and r not in fanned]
    for (scenario, distribution), group in _groups(rest).items():
        ours = _find(group, "asynclookup ordered")
        lines += [
            f"### {scenario}, {distribution} keys",
            "",
            header,
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in group:
            ratio = _ratio(ours, r)
            requests = f"{r.requests:,}" if r.requests >= 0 else ""
            memory_mb = f"{r.peak_memory_mb:,.0f}" if r.peak_memory_mb else ""
            note = r.note.replace("|", "/").replace("\n", " ")
            lines.append(
                f"| {scenario} | {distribution} | {r.method} | {r.rows_per_s:,.0f} | "
                f"{f'{ratio:.2f}x' if ratio else ''} | {requests} | {memory_mb} | {note} |"
            )
        ceiling, spark_floor = _find(group, "raw async client"), _find(group, "Spark floor")
        lines.append("")
        lines += _cpu_table(group, ours, ceiling, spark_floor)
        if ours and ceiling:
            lines.append(f"asynclookup runs at {_ratio(ours, ceiling):.2f}x the raw client alone.")
        if ours and spark_floor:
            lines.append(
                f"asynclookup runs at {_ratio(ours, spark_floor):.0%} of the Spark floor "
                "(the same mapInArrow with no I/O)."
            )
        lines.append("")
    if sweep:
        lines += [
            f"### capacity sweep: HTTP per key, {args.sweep_latency_ms:g} ms",
            "",
            "| capacity per task | Little's law bound | asynclookup | Arrow UDF, same concurrency "
            "| asynclookup ÷ Arrow UDF |",
            "|---|---|---|---|---|",
        ]
        for capacity in sorted({r.capacity for r in sweep}):
            at = [r for r in sweep if r.capacity == capacity]
            ours, threads = _find(at, "asynclookup"), _find(at, "Arrow UDF")
            bound = _find(at, "Little")
            ratio = _ratio(ours, threads)
            cells = [r.rows_per_s if r else 0.0 for r in (bound, ours, threads)]
            lines.append(
                f"| {capacity:,} | {cells[0]:,.0f} | {cells[1]:,.0f} | {cells[2]:,.0f} "
                f"| {f'{ratio:.2f}x' if ratio else ''} |"
            )
        lines.append("")
    if memory:
        lines += [
            "### memory: lookup_join over Redis, a fresh Python worker per task",
            "",
            "| input rows | seconds | rows/s | peak Python worker memory (MB) |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {r.rows:,} | {r.seconds:.1f} | {r.rows_per_s:,.0f} | {r.peak_memory_mb:,.0f} |"
            for r in memory
        ]
        lines.append("")
    if fanned:
        lines += [
            "### memory: one key with many matches (Postgres), one task",
            "",
            "| input | output rows | seconds | peak Python worker memory (MB) |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {r.note} | {r.rows:,} | {r.seconds:.1f} | {r.peak_memory_mb:,.0f} |" for r in fanned
        ]
        lines.append("")
    checks = targets(results)
    if checks:
        lines += ["### targets", "", "| scenario | target | measured | |", "|---|---|---|---|"]
        for scenario, text, ratio, met in checks:
            verdict = "" if met is None else ("met" if met else "**missed**")
            lines.append(
                f"| {scenario} | {text} | {f'{ratio:.2f}x' if ratio is not None else 'n/a'} | "
                f"{verdict} |"
            )
        lines.append("")
    return "\n".join(lines)


_GROUP_NAMES = {
    "spark_jvm": "Spark JVM",
    "python_workers": "Python workers",
    "store": "store server",
    "bench": "bench process",
    "raw_client": "raw client",
}


def _cpu_table(
    group: list[Result], ours: Result | None, ceiling: Result | None, spark_floor: Result | None
) -> list[str]:
    """CPU per row by process group, and asynclookup against the sum of its parts."""
    measured = [r for r in group if r.cpu_us_per_row]
    if not measured:
        return []
    header = " | ".join(_GROUP_NAMES[g] for g in GROUPS)
    lines = [
        "CPU per row, core-µs (the least of the runs), by process:",
        "",
        f"| method | total | {header} |",
        "|---|---|" + "---|" * len(GROUPS),
    ]
    for r in measured:
        cells = " | ".join(f"{r.cpu_us_per_row.get(g, 0.0):.2f}" for g in GROUPS)
        lines.append(f"| {r.method} | **{r.cpu_us_per_row['total']:.2f}** | {cells} |")
    lines.append("")
    if ours and ceiling and spark_floor and ours.cpu_us_per_row and ceiling.cpu_us_per_row:
        parts = ceiling.cpu_us_per_row["total"] + spark_floor.cpu_us_per_row.get("total", 0.0)
        lines.append(
            f"asynclookup costs {ours.cpu_us_per_row['total'] / parts:.2f}x its parts "
            f"(raw client with its server, {ceiling.cpu_us_per_row['total']:.2f}, + Spark floor, "
            f"{spark_floor.cpu_us_per_row.get('total', 0.0):.2f} core-µs per row)."
        )
        lines.append("")
    return lines


def plot(results: list[Result], out: str) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    written = []
    http = [r for r in results if r.scenario.startswith("http-get-") and r.rows_per_s]
    if http:
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
        axis.set_title("HTTP lookup join throughput by latency")
        axis.legend(fontsize=7)
        figure.tight_layout()
        figure.savefig(os.path.join(out, "throughput.png"), dpi=110)
        written.append("throughput.png")
    sweep = [r for r in results if r.scenario.startswith("sweep") and r.rows_per_s]
    if sweep:
        figure, axis = plt.subplots(figsize=(8, 5))
        for method in dict.fromkeys(r.method for r in sweep):
            points = sorted((r.capacity, r.rows_per_s) for r in sweep if r.method == method)
            label = "Arrow UDF, threads = capacity" if method.startswith("Arrow") else method
            axis.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("requests in flight per task (capacity; threads for the Arrow UDF)")
        axis.set_ylabel("rows per second")
        axis.set_title(
            f"Throughput by concurrency, HTTP per key at {sweep[0].scenario.split('-')[-1]}"
        )
        axis.legend(fontsize=8)
        figure.tight_layout()
        figure.savefig(os.path.join(out, "capacity.png"), dpi=110)
        written.append("capacity.png")
    return written


@contextmanager
def spark_session(args: Any, *, reuse_workers: bool) -> Iterator[Any]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(f"local[{args.tasks}]")
        .appName("asynclookup-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", str(BATCH_ROWS))
        .config("spark.sql.autoBroadcastJoinThreshold", "-1")
        .config("spark.driver.memory", "2g")
        # memory: a fresh Python worker per task, so that its peak is that task's alone
        .config("spark.python.worker.reuse", "true" if reuse_workers else "false")
    )
    if os.path.exists(m.JDBC_JAR):
        builder = builder.config("spark.jars", m.JDBC_JAR)
    builder = _with_sql_joins(builder)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    from lookup_source import AsyncLookupDataSource

    spark.dataSource.register(AsyncLookupDataSource)
    try:
        yield spark
    finally:
        spark.stop()


def _with_sql_joins(builder: Any) -> Any:
    """The builder with the SQL extension (the plan scenario's SQL JOIN rows), where this
    PySpark has it and its jar is there or can be built; else as it was."""
    from lookup_source.errors import ConfigurationError
    from lookup_source.spark.versions import SQL_JOINS

    if not SQL_JOINS.available():
        return builder
    from lookup_source import enable_sql_joins

    try:
        return enable_sql_joins(builder)
    except ConfigurationError as error:  # no jar and no JDK: the SQL rows say so
        print(f"bench: no SQL JOIN rows: {error}", file=sys.stderr)
        return builder


def _warm_up(spark: Any, args: Any) -> None:
    """A first job pays for the JVM's and the Python workers' start: not a method's cost."""
    df = events(spark, 200_000, args.users, args.tasks, "uniform")
    m.timed(df.mapInArrow(lambda batches: batches, df.schema))


@dataclass
class Collected:
    """Everything a run has measured so far, by scenario."""

    machine: str = ""
    results: list[Result] = field(default_factory=list)
    streams: list[StreamResult] = field(default_factory=list)
    tails: list[TailResult] = field(default_factory=list)
    transports: list[TransportRun] = field(default_factory=list)
    plans: list[PlanResult] = field(default_factory=list)
    budgets: list[BudgetResult] = field(default_factory=list)


def run_bench(args: argparse.Namespace) -> int:
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    special = ("sweep", "memory", "stream", "tail", "plan", "budget", "http-transports")
    throughput = [s for s in scenarios if s not in special]
    got = Collected()
    os.makedirs(args.out, exist_ok=True)
    journal = Journal(lambda: _write(got, args, journal))
    journal_module.JOURNAL = journal

    def attempt(label: str, run: Any) -> None:
        try:
            run()
        except Exception as error:  # one scenario's failure never ends the run
            journal.failed(f"scenario {label}", error)

    try:
        spark_scenarios = {"sweep", "stream", "tail", "plan", "budget", "http-transports"}
        if throughput or spark_scenarios & set(scenarios):
            with spark_session(args, reuse_workers=True) as spark:
                got.machine = _machine(spark)
                _warm_up(spark, args)
                for name in throughput:
                    for distribution in [d.strip() for d in args.distributions.split(",")]:
                        attempt(
                            f"{name} ({distribution})",
                            functools.partial(_scenario, got, spark, name, distribution, args),
                        )
                if "sweep" in scenarios:
                    attempt("sweep", lambda: got.results.extend(run_sweep(spark, args)))
                if "stream" in scenarios:
                    attempt("stream", lambda: got.streams.extend(run_stream(spark, args)))
                if "tail" in scenarios:
                    attempt("tail", lambda: got.tails.extend(_tails(spark, args)))
                if "http-transports" in scenarios:
                    attempt(
                        "http-transports",
                        lambda: got.transports.extend(run_transports(spark, args)),
                    )
                if "plan" in scenarios:
                    attempt("plan", lambda: run_plan(spark, args, got.plans))
                if "budget" in scenarios:
                    attempt("budget", lambda: got.budgets.extend(run_budget(spark, args)))
        if "memory" in scenarios:
            with spark_session(args, reuse_workers=False) as spark:
                got.machine = got.machine or _machine(spark)
                attempt("memory", lambda: got.results.extend(run_memory(spark, args)))
    finally:
        journal_module.JOURNAL = Journal()
    text = _write(got, args, journal)
    if not args.no_plot:
        plot(got.results, args.out)
        if got.plans:
            plot_plans(got.plans, args.out)
    print(text)
    return 1 if journal.failures else 0


def _scenario(got: Collected, spark: Any, name: str, distribution: str, args: Any) -> None:
    got.results.extend(run_scenario(spark, name, distribution, args))


def _tails(spark: Any, args: Any) -> list[TailResult]:
    rows = min(args.http_rows, 20_000)
    df = events(spark, rows, args.users, args.tasks, "uniform").cache()
    df.count()
    try:
        return run_tail(df, args)
    finally:
        df.unpersist()


def _write(got: Collected, args: Any, journal: Journal) -> str:
    """The results files, from what is measured so far; the Markdown text."""
    text = report(got.results, args, got.machine)
    if got.streams:
        text += "\n".join(["", *stream_report(got.streams, args)])
    if got.tails:
        text += "\n".join(["", *tail_report(got.tails, args)])
    if got.transports:
        text += "\n".join(["", *transports_report(got.transports, args)])
    if got.plans:
        text += "\n".join(["", *plan_report(got.plans, args)])
    if got.budgets:
        text += "\n".join(["", *budget_report(got.budgets, args)])
    text += "\n".join(journal.report())
    with open(os.path.join(args.out, "results.md"), "w") as handle:
        handle.write(text)
    with open(os.path.join(args.out, "results.json"), "w") as handle:
        json.dump(
            {
                "machine": got.machine,
                "arguments": vars(args),
                "results": [{**asdict(r), "rows_per_s": r.rows_per_s} for r in got.results],
                "stream": [asdict(r) for r in got.streams],
                "tail": tail_json(got.tails),
                "http_transports": transports_json(got.transports),
                "plan": plan_json(got.plans),
                "budget": budget_json(got.budgets),
                "failed": [{"what": w, "reason": r} for w, r in journal.failures],
                "targets": [
                    {"scenario": s, "target": t, "ratio": r, "met": ok}
                    for s, t, r, ok in targets(got.results)
                ],
            },
            handle,
            indent=2,
        )
    return text


def _machine(spark: Any) -> str:
    return (
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"pyspark {spark.version}"
    )
