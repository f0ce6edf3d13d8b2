"""The ``asynclookup`` command (also ``python -m lookup_source``)."""

from __future__ import annotations

import argparse
import sys

from lookup_source import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="asynclookup", description="Asynchronous I/O lookup joins for Apache Spark."
    )
    parser.add_argument("--version", action="version", version=f"asynclookup {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    from lookup_source.demo.run import add_arguments

    demo = commands.add_parser(
        "demo",
        help="enrich events through an embedded HTTP service and compare with a per-row UDF",
        description="Enrich a DataFrame of events through an HTTP user service (embedded, or "
        "yours) with lookup_join, and compare with a synchronous per-row UDF on the same service.",
    )
    add_arguments(demo)
    from lookup_source.bench.run import add_arguments as add_bench_arguments

    bench = commands.add_parser(
        "bench",
        help="benchmark asynclookup against the other ways of doing a lookup join",
        description="Run every way of doing a lookup join against the same server and keys, "
        "and write a Markdown table, a JSON file and a plot.",
    )
    add_bench_arguments(bench)
    serve = commands.add_parser(
        "serve",
        help="run the demo user-profile HTTP service (for docker compose and examples)",
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument("--users", type=int, default=10_000)
    serve.add_argument("--latency-ms", type=float, default=5.0)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "demo":
        from lookup_source.demo.run import run_demo

        return run_demo(args)
    if args.command == "serve":
        import time

        from lookup_source.demo.service import UserService

        service = UserService(users=args.users, latency_ms=args.latency_ms, port=args.port)
        service.host = args.host
        with service:
            print(
                f"serving {args.users:,} users at {service.url} "
                f"(batch: {service.batch_url}), {args.latency_ms:g} ms latency",
                flush=True,
            )
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                return 0
    if args.command == "bench":
        from lookup_source.bench.run import run_bench

        return run_bench(args)
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
