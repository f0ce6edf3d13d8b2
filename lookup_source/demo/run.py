"""``asynclookup demo``: enrich a DataFrame of events through an HTTP service, and compare with
the synchronous per-row UDF a data engineer would otherwise write.

With no flags it needs nothing but Python and Java: it starts an embedded user-profile service
on a free loopback port (5 ms simulated latency), a local Spark session, and cleans both up.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

DEMO_SCHEMA = "user_id long, name string, tier string, country string, score double"
REDIS_PREFIX = "asynclookup:demo:user:"


@dataclass
class Measurement:
    label: str
    rows: int
    seconds: float
    note: str = ""

    @property
    def rate(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else float("inf")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--rows", type=int, default=200_000, help="events to enrich (default: %(default)s)"
    )
    parser.add_argument(
        "--users", type=int, default=10_000, help="distinct users (default: %(default)s)"
    )
    parser.add_argument(
        "--latency-ms",
        type=float,
        default=5.0,
        help="simulated service latency (default: %(default)s)",
    )
    parser.add_argument(
        "--capacity",
        type=int,
        default=100,
        help="requests in flight per task (default: %(default)s)",
    )
    parser.add_argument(
        "--partitions", type=int, default=2, help="Spark tasks (default: %(default)s)"
    )
    parser.add_argument(
        "--sample-rows",
        type=int,
        default=1_000,
        help="rows for the synchronous UDF (default: %(default)s)",
    )
    parser.add_argument(
        "--style",
        choices=("per-key", "batch"),
        default="per-key",
        help="HTTP request style: one GET per key, or POST batches of 100 keys "
        "(default: %(default)s)",
    )
    parser.add_argument("--master", default="local[2]", help="Spark master (default: %(default)s)")
    parser.add_argument(
        "--http-url",
        help="your own service instead of the embedded one: a URL template such as "
        "http://host:8080/users/{key} answering JSON objects with the schema's fields",
    )
    parser.add_argument(
        "--redis-url",
        help="use your own Redis instead of HTTP: the demo writes its users under "
        f"{REDIS_PREFIX}* and deletes them at the end",
    )
    parser.add_argument(
        "--schema", default=DEMO_SCHEMA, help="lookup schema (default: %(default)s)"
    )
    parser.add_argument(
        "--show", type=int, default=5, help="enriched rows to print (default: %(default)s)"
    )


def say(message: str) -> None:
    print(message, flush=True)


@contextmanager
def progress(spark: Any, counter: Callable[[], int] | None, total: int) -> Iterator[None]:
    """Print a progress line every second while the job runs, and a last one when it ends:
    tasks done and running (over every stage the job ran), and requests answered."""
    stop = threading.Event()
    started = time.monotonic()
    tracker = spark.sparkContext.statusTracker()
    stages: set[int] = set()

    def report() -> None:
        stages.update(tracker.getActiveStageIds())
        done = running = tasks = 0
        for stage_id in stages:
            info = tracker.getStageInfo(stage_id)
            if info is not None:
                done += info.numCompletedTasks
                running += info.numActiveTasks
                tasks += info.numTasks
        served = f" · {counter():,} requests answered" if counter else ""
        say(
            f"  [{time.monotonic() - started:5.1f}s] tasks {done}/{tasks} done, "
            f"{running} running{served}"
        )

    def keep_reporting() -> None:
        while not stop.wait(1.0):
            report()

    thread = threading.Thread(target=keep_reporting, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(2)
    report()


def _session(master: str) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(master)
        .appName("asynclookup-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "10000")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _events(spark: Any, rows: int, users: int, partitions: int) -> Any:
    from pyspark.sql import functions as F

    # users drawn pseudo-randomly, so that a batch repeats some of them; about 2% of events
    # name a user the service does not know (their columns stay null)
    span = int(users * 1.02) + 1
    return spark.range(rows, numPartitions=partitions).select(
        F.col("id").alias("event_id"),
        F.pmod(F.xxhash64("id"), F.lit(span)).alias("user_id"),
        (F.col("id") % 97 + 0.5).alias("amount"),
    )


def _sync_udf(kind: str, target: str, schema: str) -> Any:
    """The per-row UDF a user writes today: one blocking call per row."""
    from pyspark.sql.functions import udf
    from pyspark.sql.types import StringType

    if kind == "http":

        def fetch(user_id: int | None) -> str | None:
            import urllib.error
            import urllib.request

            if user_id is None:
                return None
            try:
                with urllib.request.urlopen(target.replace("{key}", str(user_id)), timeout=10) as r:
                    return str(json.loads(r.read()).get("name"))
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    return None
                raise

    else:

        def fetch(user_id: int | None) -> str | None:
            import redis

            if user_id is None:
                return None
            client = getattr(fetch, "client", None)
            if client is None:
                client = redis.Redis.from_url(target)
                fetch.client = client  # type: ignore[attr-defined]
            raw = client.get(f"{REDIS_PREFIX}{user_id}")
            return None if raw is None else str(json.loads(raw).get("name"))

    return udf(lambda user_id: fetch(user_id), StringType())


def _time_action(df: Any) -> float:
    started = time.monotonic()
    df.write.format("noop").mode("overwrite").save()
    return time.monotonic() - started


def _table(measurements: list[Measurement], baseline: Measurement) -> str:
    header = f"{'method':<46} {'rows':>10} {'seconds':>9} {'rows/s':>10} {'speed-up':>9}"
    lines = [header, "-" * len(header)]
    for m in measurements:
        speedup = m.rate / baseline.rate if baseline.rate else float("nan")
        lines.append(
            f"{m.label:<46} {m.rows:>10,} {m.seconds:>9.1f} {m.rate:>10,.0f} {speedup:>8.1f}x"
        )
        if m.note:
            lines.append(f"  {m.note}")
    return "\n".join(lines)


def _load_redis_users(url: str, users: int) -> Callable[[], None]:
    import redis

    from lookup_source.service import user_record

    client = redis.Redis.from_url(url)
    pipe = client.pipeline(transaction=False)
    for user_id in range(users):
        pipe.set(f"{REDIS_PREFIX}{user_id}", json.dumps(user_record(user_id)))
    pipe.execute()

    def cleanup() -> None:
        for start in range(0, users, 10_000):
            client.delete(*[f"{REDIS_PREFIX}{u}" for u in range(start, min(users, start + 10_000))])
        client.close()

    return cleanup


def run_demo(args: argparse.Namespace) -> int:
    from lookup_source import lookup_join

    started = time.monotonic()
    with ExitStack() as stack:
        counter: Callable[[], int] | None = None
        if args.redis_url:
            from lookup_source.redaction import redact_url

            say(f"Loading {args.users:,} demo users into Redis at {redact_url(args.redis_url)}")
            stack.callback(_load_redis_users(args.redis_url, args.users))
            options: dict[str, str] = {
                "connector": "redis",
                "url": args.redis_url,
                "redis.key.pattern": f"{REDIS_PREFIX}{{key}}",
            }
            kind, target, where = "redis", args.redis_url, "your Redis"
        else:
            if args.http_url:
                url = where = args.http_url
                options = {"connector": "http", "url": url}
            else:
                from lookup_source.service import UserService

                service = stack.enter_context(
                    UserService(users=args.users, latency_ms=args.latency_ms)
                )
                url = service.url
                counter = service.request_count
                where = (
                    f"the embedded user service at {service.base_url} "
                    f"({args.latency_ms:g} ms latency, {args.style} requests)"
                )
                if args.style == "batch":
                    options = {"connector": "http", "http.batch.url": service.batch_url}
                else:
                    options = {"connector": "http", "url": url}
            kind, target = "http", url
        options["capacity"] = str(args.capacity)

        say(f"Starting Spark ({args.master}) ...")
        spark = _session(args.master)
        stack.callback(spark.stop)
        events = _events(spark, args.rows, args.users, args.partitions)
        enriched = lookup_join(events, "user_id", schema=args.schema, options=options)

        say(
            f"Enriching {args.rows:,} events through {where} with asynclookup "
            f"(capacity {args.capacity} per task, {args.partitions} tasks) ..."
        )
        enriched = enriched.persist()
        with progress(spark, counter, args.rows):
            started_join = time.monotonic()
            enriched.count()
            async_seconds = time.monotonic() - started_join
        requests = counter() if counter else None
        stack.callback(enriched.unpersist)

        say("\nA few enriched rows:")
        enriched.orderBy("event_id").show(args.show, truncate=False)

        sample = min(args.sample_rows, args.rows)
        say(f"Timing a synchronous per-row Python UDF on a {sample:,}-row sample ...")
        sync_udf = _sync_udf(kind, target, args.schema)
        sampled = _events(spark, sample, args.users, args.partitions)
        sync_seconds = _time_action(sampled.withColumn("name", sync_udf("user_id")))

        sync = Measurement(
            f"synchronous per-row UDF ({sample:,}-row sample)",
            sample,
            sync_seconds,
            note=f"extrapolated to {args.rows:,} rows: "
            f"{sync_seconds * args.rows / max(sample, 1):,.0f} s",
        )
        fast = Measurement(
            f"asynclookup lookup_join (capacity {args.capacity})",
            args.rows,
            async_seconds,
            note=f"{requests:,} requests for {args.rows:,} rows (duplicate keys "
            "in a batch are fetched once)"
            if requests
            else "",
        )
        say("\nSame service, same run, rows per second:\n")
        say(_table([sync, fast], sync))
        say(f"\nDone in {time.monotonic() - started:.0f} s.")
    return 0
