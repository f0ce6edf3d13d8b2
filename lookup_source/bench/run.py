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

This module runs the chosen scenarios in one Spark session (:mod:`.session`; the memory
scenario in one of its own), each scenario's failure kept and the run going on; a scenario is
in a module of its own (:mod:`.throughput`, :mod:`.sweep`, :mod:`.memory`, ...), the methods
in :mod:`.methods`, the reports and the results files in :mod:`.report`, :mod:`.plots` and
:mod:`.results_files`.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
from typing import Any

from lookup_source.bench import journal as journal_module
from lookup_source.bench.budget import run_budget
from lookup_source.bench.events import events
from lookup_source.bench.journal import Journal
from lookup_source.bench.memory import run_memory
from lookup_source.bench.plan import plot_plans, run_plan
from lookup_source.bench.plots import plot
from lookup_source.bench.results_files import Collected, write_results
from lookup_source.bench.session import spark_session
from lookup_source.bench.stream import run_stream
from lookup_source.bench.sweep import run_sweep
from lookup_source.bench.tail import TailResult, run_tail
from lookup_source.bench.throughput import run_scenario
from lookup_source.bench.timing import timed
from lookup_source.bench.transports import run_transports


def _warm_up(spark: Any, args: Any) -> None:
    """A first job pays for the JVM's and the Python workers' start: not a method's cost."""
    df = events(spark, 200_000, args.users, args.tasks, "uniform")
    timed(df.mapInArrow(lambda batches: batches, df.schema))


def run_bench(args: argparse.Namespace) -> int:
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    special = ("sweep", "memory", "stream", "tail", "plan", "budget", "http-transports")
    throughput = [s for s in scenarios if s not in special]
    got = Collected()
    os.makedirs(args.out, exist_ok=True)
    journal = Journal(lambda: write_results(got, args, journal))
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
    text = write_results(got, args, journal)
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


def _machine(spark: Any) -> str:
    return (
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"pyspark {spark.version}"
    )
