"""A stream opens its connections once: clients live as long as the Python workers (on every
supported PySpark: the Spark suites run it on each).

Spark reuses a Python worker for task after task; each worker keeps one opened client per lookup
configuration (lookup_source.engine.kept.clients). These tests run real streams against real
servers and count the connections each store sees: after warm-up they do not grow with the
micro-batches; a store restarted under kept connections loses and doubles nothing; lookups that
differ only in the user never share a connection; and once Spark stops, nothing of the lookup
stays connected.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from pyspark.sql import functions as F

from lookup_source import lookup_join
from lookup_source.spark.progress import progress_metrics
from tests.faults import FaultProxy
from tests.helpers import clean_environment, waited_for
from tests.servers import (
    PostgresServer,
    RedisServer,
    own_postgres_server,
    own_redis_server,
    seed_users,
)
from tests.sizes import sized

SCHEMA = "user_id long, name string"
USERS = 200
WARM_UP = 6  # micro-batches before counting (each worker of the pool serves a first task)
COUNTED = sized(ci=8, full=20)  # micro-batches counted after warm-up
LOOKUPS = sized(ci=30, full=50)  # lookups of one session, each set differently: more than the
# 16 clients a worker keeps (lifetime.MAX_KEPT_CLIENTS per thread)


def via(url: str, proxy: FaultProxy) -> str:
    """``url`` with its host and port replaced by the proxy's."""
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)
    address = f"{proxy.host}:{proxy.port}"
    netloc[-1] = address
    return urlunsplit(parts._replace(netloc="@".join(netloc)))


def host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", int(parts.port or 0)


class Stream:
    """A stream of 40 rows a micro-batch over two partitions (``rate-micro-batch``: a batch at
    every 100 ms trigger, where ``rate`` makes one a second) enriched by a lookup into a memory
    sink, checked row by row (``naming``: the name a store holds for a user)."""

    def __init__(
        self,
        spark: Any,
        options: dict[str, str],
        name: str,
        tmp: Path,
        naming: Callable[[int], str] = lambda user: f"user {user}",
    ) -> None:
        self.spark, self.name, self.naming = spark, name, naming
        events = (
            spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", 40)
            .option("numPartitions", 2)
            .load()
            .select(F.col("value").alias("event_id"), (F.col("value") % 250).alias("user_id"))
        )
        enriched = lookup_join(
            events, "user_id", schema=SCHEMA, options=options, name=self.lookup_name
        )
        self.query = (
            enriched.writeStream.format("memory")
            .queryName(name)
            .option("checkpointLocation", str(tmp / f"checkpoint-{name}"))
            .trigger(processingTime="100 milliseconds")
            .start()
        )

    @property
    def lookup_name(self) -> str:
        return re.sub(r"\W", "_", self.name)

    def reported(self, field: str, after: int) -> float:
        """``field`` of the lookup's progress entries, summed over the micro-batches that read
        rows after the first ``after`` of them."""
        progress = [p for p in self.query.recentProgress if p["numInputRows"] > 0][after:]
        return sum(progress_metrics(p).get(self.lookup_name, {}).get(field, 0) for p in progress)

    def wait_for_batches(self, count: int, timeout_s: float = 180.0) -> None:
        """Until ``count`` micro-batches that read rows are done."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.query.exception() is not None:
                raise AssertionError(f"the stream failed: {self.query.exception()}")
            progress = [p for p in self.query.recentProgress if p["numInputRows"] > 0]
            if len(progress) >= count:
                return
            time.sleep(0.05)
        raise AssertionError(f"fewer than {count} micro-batches in {timeout_s} s")

    def stop_and_check(self) -> int:
        """Stop; check every row (a user below USERS has its name, the others none)."""
        self.query.stop()
        rows = self.spark.sql(f"SELECT * FROM {self.name}").collect()
        assert rows, "the stream wrote nothing"
        assert len({r.event_id for r in rows}) == len(rows)  # none doubled
        for row in rows:
            expected = self.naming(row.user_id) if row.user_id < USERS else None
            assert row.name == expected, row
        return len(rows)


@pytest.fixture
def redis_users(redis_srv: RedisServer, redis_db: Any, prefix: str) -> dict[str, str]:
    redis_db.mset({f"{prefix}{i}": json.dumps({"name": f"user {i}"}) for i in range(USERS)})
    return {"connector": "redis", "redis.key.pattern": f"{prefix}{{key}}"}


@pytest.fixture
def postgres_users(pg: Any, table_name: str) -> Iterator[dict[str, str]]:
    pg(f"CREATE TABLE {table_name} (user_id bigint PRIMARY KEY, name text)")
    pg.many(f"INSERT INTO {table_name} VALUES ($1, $2)", [(i, f"user {i}") for i in range(USERS)])
    yield {"connector": "postgres", "postgres.table": table_name}
    pg(f"DROP TABLE IF EXISTS {table_name}")


def python_workers() -> set[int]:
    """The Python workers of this machine's Spark (each forked by a ``pyspark.daemon``, whose
    command line it keeps), by process id."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"pyspark.daemon" in command or b"pyspark/daemon.py" in command:
            found.add(int(entry.name))
    return found


@dataclasses.dataclass
class Counted:
    """What a stream opened: connections in warm-up and after it, and what may rightly open one
    after it: Python workers Spark started meanwhile (a busy machine's pool grows), and the
    shared tier's failures (a timed-out connection is never reused)."""

    warm: int
    counted: int
    new_workers: int
    shared_errors: float


def counted_stream(
    spark: Any,
    options: dict[str, str],
    connections: Callable[[], int],
    name: str,
    tmp: Path,
    batches: int = COUNTED,
    naming: Callable[[int], str] = lambda user: f"user {user}",
) -> Counted:
    """Run a stream; count the connections it opened during warm-up and after it."""
    start = connections()
    stream = Stream(spark, options, name, tmp, naming)
    try:
        stream.wait_for_batches(WARM_UP)
        warm = connections()
        workers = python_workers()
        stream.wait_for_batches(WARM_UP + batches)
        after = connections()
        new_workers = len(python_workers() - workers)
        errors = stream.reported("shared_errors", WARM_UP)
    finally:
        stream.stop_and_check()
    return Counted(warm - start, after - warm, new_workers, errors)


@pytest.mark.parametrize("store", ["redis", "postgres", "http"])
def test_a_stream_opens_its_connections_once(
    spark: Any, request: pytest.FixtureRequest, store: str, prefix: str, tmp_path: Path
) -> None:
    name = f"lifetime_{store}_{prefix.rstrip(':')}"
    if store == "http":
        from lookup_source.service import UserService

        with UserService(users=USERS, latency_ms=1) as service:
            options = {"connector": "http", "url": service.url, "capacity": "20"}
            seen = counted_stream(
                spark,
                options,
                lambda: service.connections,
                name,
                tmp_path,
                naming=lambda user: f"user-{user}",  # the demo service's names
            )
    else:
        server = request.getfixturevalue("redis_srv" if store == "redis" else "postgres_srv")
        options = request.getfixturevalue(f"{store}_users")
        proxy = FaultProxy(*host_port(server.url))
        try:
            options = {**options, "url": via(server.url, proxy)}
            seen = counted_stream(spark, options, lambda: proxy.connections, name, tmp_path)
        finally:
            proxy.close()
    print(
        f"\n{store}: {seen.warm} connections in warm-up, {seen.counted} in {COUNTED} "
        f"micro-batches ({seen.new_workers} Python workers started meanwhile)"
    )
    # none after warm-up, unless Spark started Python workers meanwhile (a busy machine's
    # pool grows): each connects as the first ones did, never once per task
    assert seen.warm > 0 and seen.counted <= seen.new_workers * seen.warm


def test_the_shared_cache_tier_connects_once_per_worker_too(
    spark: Any, redis_srv: RedisServer, redis_users: dict[str, str], prefix: str, tmp_path: Path
) -> None:
    """The shared tier's store is kept by the worker like the lookup's client: a stream asking
    it every micro-batch opens no connection to it after warm-up."""
    name = f"lifetime_shared_{prefix.rstrip(':')}"
    proxy = FaultProxy(*host_port(redis_srv.url))
    try:
        options = {
            **redis_users,
            "url": redis_srv.url,
            "cache.shared.url": via(redis_srv.url, proxy),
            "cache.shared.namespace": name,  # this test's entries only
        }
        seen = counted_stream(spark, options, lambda: proxy.connections, name, tmp_path)
    finally:
        proxy.close()
    print(
        f"\nshared tier: {seen.warm} connections in warm-up, {seen.counted} in {COUNTED} "
        f"micro-batches ({seen.new_workers} Python workers started, {seen.shared_errors:.0f} "
        "shared tier failures meanwhile)"
    )
    # none after warm-up but a new worker's and one after each failure of the tier (a
    # timed-out connection is closed, never reused): never one a task
    assert seen.warm > 0 and seen.counted <= seen.new_workers + seen.shared_errors


def test_with_max_idle_zero_each_task_connects_as_before(
    spark: Any, redis_srv: RedisServer, redis_users: dict[str, str], tmp_path: Path
) -> None:
    proxy = FaultProxy(redis_srv.host, redis_srv.port)
    try:
        options = {
            **redis_users,
            "url": via(redis_srv.url, proxy),
            "connection.max-idle.ms": "0",
        }
        seen = counted_stream(
            spark, options, lambda: proxy.connections, "lifetime_per_task", tmp_path, batches=8
        )
    finally:
        proxy.close()
    assert seen.counted >= 2 * 8  # two tasks per micro-batch, a connection each


@contextlib.contextmanager
def own_store(store: str) -> Iterator[tuple[Any, dict[str, str]]]:
    """A server of the test's own (so it can be restarted), seeded with the users."""
    if store == "redis":
        with own_redis_server() as server:
            seed_users(server, USERS)
            yield server, {"connector": "redis", "url": server.url, "redis.key.pattern": "u:{key}"}
        return
    with own_postgres_server() as pg_server:
        seed_users(pg_server, USERS)
        yield pg_server, {"connector": "postgres", "url": pg_server.url, "postgres.table": "users"}


def restart(store: str, server: Any) -> None:
    if store == "redis":
        server.kill()  # no goodbye to the kept connections
        time.sleep(0.3)
        server.start()
    else:
        server.stop()
        server.start()


@pytest.mark.parametrize("store", ["redis", "postgres"])
def test_a_store_restarted_mid_stream_loses_and_doubles_nothing(
    spark: Any, store: str, tmp_path: Path, prefix: str
) -> None:
    name = f"restarted_{store}_{prefix.rstrip(':')}"
    with own_store(store) as (server, options):
        stream = Stream(spark, {**options, "retry.max-attempts": "10"}, name, tmp_path)
        try:
            stream.wait_for_batches(WARM_UP)
            for round_ in range(1, 3):  # the kept connections die with the server, twice
                restart(store, server)
                stream.wait_for_batches(WARM_UP + 5 * round_)
        finally:
            rows = stream.stop_and_check()  # every row right, none doubled
    assert rows > 0


def test_lookups_that_differ_only_in_the_user_never_share_a_connection(
    spark: Any, postgres_srv: PostgresServer, postgres_users: dict[str, str], pg: Any, prefix: str
) -> None:
    reader = f"reader_{prefix.rstrip(':')}"
    pg(f"CREATE ROLE {reader} LOGIN")
    try:
        parts = urlsplit(postgres_srv.url)
        as_reader = urlunsplit(parts._replace(netloc=f"{reader}@{parts.hostname}:{parts.port}"))
        df = spark.range(400, numPartitions=2).select((F.col("id") % 250).alias("user_id"))

        def names(url: str) -> int:
            options = {**postgres_users, "url": url}
            out = lookup_join(df, "user_id", schema=SCHEMA, options=options)
            return out.where("name IS NOT NULL").count()

        assert names(postgres_srv.url) == 350  # the owner's client is now kept
        with pytest.raises(Exception, match="permission denied"):
            names(as_reader)
        assert names(postgres_srv.url) == 350  # and still serves the owner
        users = {r["usename"] for r in pg.fetch("SELECT usename FROM pg_stat_activity")}
        assert "postgres" in users
    finally:
        pg(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{reader}'")
        pg(f"DROP ROLE {reader}")


STOP_JOB = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession, functions as F
    from lookup_source import lookup_join

    redis_url, postgres_url, pattern, table = sys.argv[1:5]
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .getOrCreate())
    df = spark.range(2000, numPartitions=2).select((F.col("id") % 250).alias("user_id"))
    for options in (
        {"connector": "redis", "url": redis_url, "redis.key.pattern": pattern},
        {"connector": "postgres", "url": postgres_url, "postgres.table": table},
    ):
        out = lookup_join(df, "user_id", schema="user_id long, name string", options=options)
        assert out.where("name IS NOT NULL").count() == 1600
    print("ran", flush=True)
    sys.stdin.readline()
    spark.stop()
    print("stopped", flush=True)
    sys.stdin.readline()
    """
)


def test_once_spark_stops_no_connection_of_the_lookup_is_left(
    redis_srv: RedisServer,
    redis_db: Any,
    redis_users: dict[str, str],
    postgres_srv: PostgresServer,
    postgres_users: dict[str, str],
    pg: Any,
    prefix: str,
    tmp_path: Path,
) -> None:
    tag = f"stop_{prefix.rstrip(':')}"
    sep = "&" if "?" in redis_srv.url else "?"
    redis_url = f"{redis_srv.url}{sep}client_name={tag}"
    sep = "&" if "?" in postgres_srv.url else "?"
    postgres_url = f"{postgres_srv.url}{sep}application_name={tag}"

    def connected() -> tuple[int, int]:
        on_redis = sum(1 for c in redis_db.client_list() if c.get("name") == tag)
        on_postgres = pg.fetch(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", tag
        )[0][0]
        return on_redis, int(on_postgres)

    script = tmp_path / "job.py"
    script.write_text(STOP_JOB)
    root = Path(__file__).resolve().parents[2]
    env = {**clean_environment(), "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(root)}
    job = subprocess.Popen(
        [
            sys.executable,
            str(script),
            redis_url,
            postgres_url,
            redis_users["redis.key.pattern"],
            postgres_users["postgres.table"],
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert job.stdout is not None and job.stdin is not None
        assert job.stdout.readline().strip() == "ran"
        redis_open, postgres_open = connected()
        assert redis_open > 0 and postgres_open > 0  # kept by the workers between jobs
        job.stdin.write("\n")
        job.stdin.flush()
        assert job.stdout.readline().strip() == "stopped"
        waited_for(lambda: connected() == (0, 0), 20, every_s=0.2)
        assert connected() == (0, 0)  # the driver still runs; the workers' connections are gone
        job.stdin.write("\n")
        job.stdin.flush()
        job.wait(60)
    finally:
        if job.poll() is None:
            job.kill()


NO_REUSE_JOB = textwrap.dedent(
    """
    import sys
    import redis
    from pyspark.sql import SparkSession, functions as F
    from lookup_source import lookup_join

    redis_url, pattern = sys.argv[1:3]
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.python.worker.reuse", "false").getOrCreate())
    df = spark.range(2000, numPartitions=2).select((F.col("id") % 250).alias("user_id"))
    options = {"connector": "redis", "url": redis_url, "redis.key.pattern": pattern}
    out = lookup_join(df, "user_id", schema="user_id long, name string", options=options)
    server = redis.Redis.from_url(redis_url)
    before = server.info("stats")["total_connections_received"]
    for _ in range(3):
        assert out.where("name IS NOT NULL").count() == 1600
    print(server.info("stats")["total_connections_received"] - before, flush=True)
    spark.stop()
    """
)


def test_without_worker_reuse_each_task_connects_and_lets_go(
    redis_srv: RedisServer, redis_users: dict[str, str], tmp_path: Path
) -> None:
    """spark.python.worker.reuse=false: a worker per task, and a client per task, as before."""
    script = tmp_path / "job.py"
    script.write_text(NO_REUSE_JOB)
    root = Path(__file__).resolve().parents[2]
    env = {**clean_environment(), "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, str(script), redis_srv.url, redis_users["redis.key.pattern"]],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.strip().splitlines()[-1]) == 3 * 2  # three jobs of two tasks


def _worker_state(_: Any) -> Iterator[Any]:
    """Run in a Python worker: what its :class:`Worker` keeps now."""
    import os

    import pyarrow as pa

    from lookup_source.engine.kept.worker import current_worker

    worker = current_worker()
    kept = sum(len(clients) for clients in list(worker._clients))
    yield pa.RecordBatch.from_pydict(
        {
            "pid": [os.getpid()],
            "kept": [kept],
            "cache_bytes": [worker.caches.nbytes],
            "max_bytes": [worker.caches.max_bytes],
            "lookups": [len(worker.caches) + worker.caches.dropped],
        }
    )


@pytest.mark.once  # the engine's, the same on any PySpark: run once
def test_many_lookups_in_one_session_keep_each_worker_within_its_budget(
    spark: Any, redis_srv: RedisServer, redis_db: Any, redis_users: dict[str, str], prefix: str
) -> None:
    tag = f"many_{prefix.rstrip(':')}"
    sep = "&" if "?" in redis_srv.url else "?"
    url = f"{redis_srv.url}{sep}client_name={tag}"
    df = spark.range(400, numPartitions=2).select((F.col("id") % 250).alias("user_id"))
    for lookup in range(LOOKUPS):  # a notebook's afternoon: many lookups, each set differently
        options = {
            **redis_users,
            "url": url,
            "capacity": str(4 + lookup),  # a client of its own each
            "cache.max-rows": str(1000 + lookup),  # a cache of its own each
            "cache.worker.max-mb": "1",
            "connection.max-idle.ms": "1500",
        }
        out = lookup_join(df, "user_id", schema=SCHEMA, options=options)
        assert out.where("name IS NOT NULL").count() == 350
    probe = spark.range(4, numPartitions=4)
    schema = "pid long, kept long, cache_bytes long, max_bytes long, lookups long"
    states = probe.mapInArrow(_worker_state, schema).collect()
    # the workers that ran the lookups answer (each job's two tasks may share a worker)
    assert max(s.lookups for s in states) >= LOOKUPS // 2
    for state in states:
        assert state.kept <= 16  # lifetime.MAX_KEPT_CLIENTS per thread
        assert state.cache_bytes <= state.max_bytes
        assert state.max_bytes == 2**20 or state.lookups == 0  # (a fresh worker: the default)
    # the workers' sweepers close them, no task asking
    waited_for(lambda: all(c.get("name") != tag for c in redis_db.client_list()), 15, 0.25)
    assert all(c.get("name") != tag for c in redis_db.client_list()), "idle clients connected"
    states = probe.mapInArrow(_worker_state, schema).collect()
    assert all(state.kept == 0 for state in states)
