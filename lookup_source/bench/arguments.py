"""The arguments of ``asynclookup bench``: importable without any extra, so that
``asynclookup bench --help`` answers on any install."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scenarios",
        default="http-1,http-5,http-20,http-batch-5,redis,redis-net,postgres,postgres-net",
        help="comma-separated: http-<ms>, http-batch-<ms>, redis, redis-net, postgres, "
        "postgres-net, sweep, memory, stream, tail, plan, budget, http-transports "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--rows", type=int, default=1_000_000, help="input rows per method (default: %(default)s)"
    )
    parser.add_argument(
        "--http-rows",
        type=int,
        default=200_000,
        help="input rows per method for HTTP per-key scenarios (default: %(default)s)",
    )
    parser.add_argument(
        "--sample-rows",
        type=int,
        default=2_000,
        help="rows for the synchronous per-row UDF, extrapolated (default: %(default)s)",
    )
    parser.add_argument(
        "--users",
        type=int,
        default=100_000,
        help="distinct keys in the store (default: %(default)s)",
    )
    parser.add_argument(
        "--capacity",
        type=int,
        default=100,
        help="requests in flight per task, and threads of the threaded methods "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--tasks", type=int, default=2, help="Spark tasks and processes (default: %(default)s)"
    )
    parser.add_argument(
        "--distributions",
        default="uniform",
        help="key distributions, comma-separated: uniform, zipf, distinct (keys in order: none "
        "is asked while it is in flight) (default: %(default)s)",
    )
    parser.add_argument(
        "--net-delay-ms",
        type=float,
        default=0.5,
        help="latency added each way by the proxy of the -net scenarios (default: %(default)s)",
    )
    parser.add_argument(
        "--sweep-latency-ms",
        type=float,
        default=100.0,
        help="service latency of the capacity sweep (default: %(default)s)",
    )
    parser.add_argument(
        "--sweep-capacities",
        default="10,50,100,250,500,1000,2000",
        help="capacities (requests in flight per task) of the sweep (default: %(default)s)",
    )
    parser.add_argument(
        "--memory-rows",
        default="1000000,10000000",
        help="input sizes of the memory scenario (default: %(default)s)",
    )
    parser.add_argument(
        "--fanout-matches",
        type=int,
        default=2_000,
        help="memory scenario: rows of the one key of the fan-out (0: no fan-out) "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--fanout-rows",
        default="1000,10000",
        help="memory scenario: input rows of the fan-out, comma-separated (default: %(default)s)",
    )
    parser.add_argument(
        "--stream-rate",
        type=int,
        default=1_000,
        help="stream scenario: rows per second of the rate source (default: %(default)s)",
    )
    parser.add_argument(
        "--stream-trigger-ms",
        type=int,
        default=500,
        help="stream scenario: a micro-batch every so many ms (default: %(default)s)",
    )
    parser.add_argument(
        "--stream-batches",
        type=int,
        default=40,
        help="stream scenario: micro-batches measured per method (default: %(default)s)",
    )
    parser.add_argument(
        "--stream-warm-up",
        type=int,
        default=10,
        help="stream scenario: micro-batches run before measuring (default: %(default)s)",
    )
    parser.add_argument(
        "--redis-url",
        default="redis://127.0.0.1:6379/0",
        help="the Redis of the redis scenarios; the bench writes its users under "
        "asynclookup:bench:user:* and deletes them (default: %(default)s)",
    )
    parser.add_argument(
        "--postgres-url",
        default="postgresql://postgres@127.0.0.1:5432/postgres",
        help="the Postgres of the postgres scenarios; the bench creates the table "
        "asynclookup_bench_users there and drops it (default: %(default)s)",
    )
    parser.add_argument(
        "--out", default="benchmarks/results", help="output directory (default: %(default)s)"
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="runs of each fast method, the best kept (the per-row and threaded methods run "
        "once) (default: %(default)s)",
    )
    parser.add_argument(
        "--skip-slow",
        action="store_true",
        help="leave out the per-row and threaded methods (minutes at full size), for runs "
        "about the fast ones and CPU per row",
    )
    parser.add_argument(
        "--plan-table-rows",
        type=int,
        default=2_000_000,
        help="plan scenario: rows of its Postgres table (default: %(default)s)",
    )
    parser.add_argument(
        "--plan-inputs",
        default="20000,200000,2000000",
        help="plan scenario: input sizes, comma-separated (default: %(default)s)",
    )
    parser.add_argument(
        "--plan-point-in-time-rows",
        type=int,
        default=20_000,
        help="plan scenario: visits of its point-in-time join against a versioned table of "
        "--plan-table-rows rows (PySpark 4.1+; 0: none) (default: %(default)s)",
    )
    parser.add_argument(
        "--budget-keys",
        type=int,
        default=4_000,
        help="budget scenario: keys of its skewed input (default: %(default)s)",
    )
    parser.add_argument(
        "--budget-in-flight",
        type=int,
        default=8,
        help="budget scenario: requests the service allows at once (default: %(default)s)",
    )
    parser.add_argument(
        "--budget-rate",
        type=float,
        default=400.0,
        help="budget scenario: requests the service allows a second (default: %(default)s)",
    )
    parser.add_argument(
        "--transports-keys",
        type=int,
        default=60_000,
        help="http-transports scenario: distinct keys, each asked once (default: %(default)s)",
    )
    parser.add_argument(
        "--transports-latency-ms",
        type=float,
        default=5.0,
        help="http-transports scenario: the service's time per GET (default: %(default)s)",
    )
    parser.add_argument(
        "--transports-service",
        choices=("python", "native", "auto"),
        default="python",
        help="http-transports scenario: the service answering the GETs: python (aiohttp, in "
        "the bench process), native (nginx: its own directives answer each GET where its echo "
        "module is installed, else its JavaScript module, njs; Debian: apt-get install "
        "nginx-light libnginx-mod-http-js libnginx-mod-http-echo), auto (native where "
        "installed, else python) (default: %(default)s)",
    )
    parser.add_argument(
        "--peers-python",
        default=None,
        help="http-transports scenario: a Python with Daft and/or Ray Data and aiohttp, "
        "which runs the peers (make peers makes one; without it the peers are skipped)",
    )
    parser.add_argument(
        "--peers-timeout-s",
        type=float,
        default=600.0,
        help="http-transports scenario: how long a peer may run (default: %(default)s)",
    )
    parser.add_argument("--no-plot", action="store_true", help="write no PNG plots")


# -- input -------------------------------------------------------------------------------------
