"""The ``asynclookup`` command (also ``python -m lookup_source``).

``--version`` and ``--help`` (of the command and of every subcommand) answer on any install:
building the parser imports no extra. A subcommand whose extra is missing says, in one line,
which extra to install.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys

from lookup_source import __version__
from lookup_source.registry import first_party_module, install_hint


def build_parser() -> argparse.ArgumentParser:
    from lookup_source.bench.arguments import add_arguments as add_bench_arguments
    from lookup_source.demo.run import add_arguments as add_demo_arguments

    parser = argparse.ArgumentParser(
        prog="asynclookup", description="Asynchronous I/O lookup joins for Apache Spark."
    )
    parser.add_argument("--version", action="version", version=f"asynclookup {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="enrich events through an embedded HTTP service and compare with a per-row UDF",
        description="Enrich a DataFrame of events through an HTTP user service (embedded, or "
        "yours) with lookup_join, and compare with a synchronous per-row UDF on the same service.",
    )
    add_demo_arguments(demo)
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
        description="Serve the demo's user profiles over HTTP: GET /users/{id} and POST "
        "/users/batch.",
    )
    serve.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on; 0.0.0.0 for every interface (default: %(default)s)",
    )
    serve.add_argument(
        "--port", type=int, default=8080, help="port to listen on (default: %(default)s)"
    )
    serve.add_argument(
        "--users", type=int, default=10_000, help="user ids 0..N-1 (default: %(default)s)"
    )
    serve.add_argument(
        "--latency-ms",
        type=float,
        default=5.0,
        help="delay before each answer (default: %(default)s)",
    )
    extension = commands.add_parser(
        "sql-extension",
        help="print what spark-submit, pyspark or a Spark Connect server needs for SQL JOINs "
        "as lookups (building the extension's jar if needed)",
        description="Print the command-line arguments that load asynclookup's SQL extension "
        "(a SQL JOIN against a lookup table runs as async lookups): --jars <jar> --conf "
        "spark.sql.extensions=<class>. The jar is built from its Java source with javac "
        "against the installed pyspark when it is not built yet.",
    )
    shown = extension.add_mutually_exclusive_group()
    shown.add_argument("--jar", action="store_true", help="print the jar's path only")
    shown.add_argument(
        "--conf",
        action="store_true",
        help="print spark-defaults.conf lines (spark.jars, spark.sql.extensions) instead",
    )
    extension.add_argument(
        "--build",
        action="store_true",
        help="build the jar now (into the package when it can be written, else the user "
        "cache), even if one is built",
    )
    return parser


def required_modules(args: argparse.Namespace) -> tuple[str, list[str]]:
    """The extra a subcommand needs, and the modules of it that this run imports."""
    if args.command == "serve":
        return "http", ["aiohttp"]
    http, redis, postgres = (first_party_module(n) for n in ("http", "redis", "postgres"))
    if args.command == "demo":
        if getattr(args, "redis_url", None):  # the demo's service reads its users from Redis
            return "http,redis", ["aiohttp", http, "redis", redis]
        return "http", ["aiohttp", http]
    if args.command == "bench":
        scenarios = str(args.scenarios)
        modules = ["aiohttp", http]
        if "redis" in scenarios:
            modules += ["redis", redis]
        if "postgres" in scenarios:
            modules += ["asyncpg", postgres]
        if not args.no_plot:
            modules.append("matplotlib")
        return "bench", modules
    return "", []


def _missing(modules: list[str]) -> list[str]:
    missing = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except ImportError:
            found = False
        if not found:
            missing.append(name)
    return missing


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    extra, modules = required_modules(args)
    missing = _missing(modules)
    if missing:
        print(
            f"asynclookup {args.command} needs {', '.join(missing)}: {install_hint(extra)}",
            file=sys.stderr,
        )
        return 2
    if args.command == "demo":
        from lookup_source.demo.run import run_demo

        return run_demo(args)
    if args.command == "serve":
        return _serve(args)
    if args.command == "sql-extension":
        return _sql_extension(args)
    from lookup_source.bench.run import run_bench

    return run_bench(args)


def _sql_extension(args: argparse.Namespace) -> int:
    from lookup_source.errors import ConfigurationError
    from lookup_source.spark.sql_extension import jar as extension

    try:
        jar = extension.build_jar(extension.build_target()) if args.build else extension.jar_path()
    except ConfigurationError as error:
        print(str(error), file=sys.stderr)
        return 1
    if args.jar:
        print(jar)
    elif args.conf:
        print(f"spark.jars {jar}")
        print(f"spark.sql.extensions {extension.EXTENSION_CLASS}")
    else:
        print(f"--jars {jar} --conf spark.sql.extensions={extension.EXTENSION_CLASS}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    import time

    from lookup_source.service import UserService

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


if __name__ == "__main__":
    sys.exit(main())
