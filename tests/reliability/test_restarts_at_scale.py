"""Store restarts and dropped connections at scale, on every surface.

Millions of lookups run while the store is killed and started again (Redis: SIGKILL, then the
binary again, reloading its saved data; Postgres: ``pg_ctl restart``), or while every
connection to it is cut every second. With retries on, the job ends with every row exactly
once and every value right; with retries off, it fails within the time the README promises.
Each test prints its figures (``pytest -s``): docs/guarantees.md quotes them.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pyspark.sql import functions as F

from lookup_source import lookup_join, register_lookup_table
from lookup_source.spark.versions import DATA_SOURCE, TABLE_FUNCTION
from tests.faults import FaultProxy
from tests.helpers import needs
from tests.servers import (
    PostgresServer,
    RedisServer,
    own_postgres_server,
    own_redis_server,
    seed_users,
)
from tests.sizes import sized

pytestmark = pytest.mark.once  # the engine's, the same on any PySpark: run once

# lookups of lookup_join and the table function (4 partitions: at CI's size, 250 requests of
# 500 keys per task, long enough for a restart and several cuts mid-job)
ROWS = sized(ci=500_000, full=2_000_000)
KEYS = sized(ci=50_000, full=200_000)  # keys in the store; the data source reads them all
# the data source asks for each key once: smaller batches give it as many requests per task as
# the other surfaces (250 at CI's size), so a restart 0.3 s in still falls mid-job
DATA_SOURCE_BATCH = KEYS // 4 // 250
SCHEMA = "user_id long, name string"
RETRIES = {
    "retry.max-attempts": "40",
    "retry.initial-delay.ms": "50",
    "retry.max-delay.ms": "500",
    "timeout.ms": "3000",
}
NO_RETRIES = {"retry.max-attempts": "1", "timeout.ms": "3000"}
FAIL_WITHIN_S = 3 + 10  # timeout.ms, plus Spark's own time to stop the job (a quiet machine)


def spark_stop_s(spark: Any) -> float:
    """Spark's own time to run and stop a job of the tests' shape (4 tasks) whose every task
    fails at once: measured in the run, so that a busy machine's bound grows with it."""

    def fail(batches: Iterator[Any]) -> Iterator[Any]:
        raise RuntimeError("asynclookup test: a task that fails at once")
        yield  # a generator, as mapInArrow takes

    taken = []
    for _ in range(2):  # the faster of two: the first may start the Python workers
        started = time.monotonic()
        with pytest.raises(Exception, match="a task that fails at once"):
            spark.range(4, numPartitions=4).mapInArrow(fail, "id long").collect()
        taken.append(time.monotonic() - started)
    return min(taken)


@pytest.fixture(scope="module")
def redis_store() -> Iterator[RedisServer]:
    with own_redis_server() as server:
        seed_users(server, KEYS)
        yield server


@pytest.fixture(scope="module")
def postgres_store() -> Iterator[PostgresServer]:
    with own_postgres_server() as server:
        seed_users(server, KEYS)
        yield server


def _options(store: str, address: str) -> dict[str, str]:
    if store == "redis":
        return {"connector": "redis", "url": address, "redis.key.pattern": "u:{key}"}
    return {"connector": "postgres", "url": address, "postgres.table": "users"}


def _checked(spark: Any, surface: str, options: dict[str, str]) -> dict[str, int]:
    """Run the lookup on ``surface``; count rows, distinct events and wrong values in one
    action (each action would run the lookups again)."""
    if surface == "data source":
        keys = json.dumps(list(range(KEYS)))
        out = (
            spark.read.format("asynclookup")
            .schema(SCHEMA)
            .options(**{"batch.size": str(DATA_SOURCE_BATCH), **options})
            .options(keys=keys, partitions="4")
            .load()
            .withColumn("event_id", F.col("user_id"))
        )
        expected = KEYS
    else:
        events = spark.range(ROWS, numPartitions=4).select(
            F.col("id").alias("event_id"), (F.col("id") * 7919 % KEYS).alias("user_id")
        )
        if surface == "lookup_join":
            out = lookup_join(events, "user_id", schema=SCHEMA, options=options)
        else:
            register_lookup_table(spark, "restart_users", schema=SCHEMA, options=options)
            events.createOrReplaceTempView("restart_events")
            out = spark.sql("SELECT * FROM restart_users_lookup(TABLE(restart_events), 'user_id')")
        expected = ROWS
    wrong = F.col("name").isNull() | (F.col("name") != F.concat(F.lit("user "), "user_id"))
    row = out.agg(
        F.count("*").alias("rows"),
        F.countDistinct("event_id").alias("distinct"),
        F.sum(F.when(wrong, 1).otherwise(0)).alias("wrong"),
    ).collect()[0]
    return {"expected": expected, "rows": row.rows, "distinct": row.distinct, "wrong": row.wrong}


class Faults:
    """Injects a fault into the store while a job runs, from a thread: ``after_s`` seconds
    after the job's tasks have started, then every ``every_s`` seconds (0: once)."""

    def __init__(
        self, spark: Any, inject: Callable[[], None], *, after_s: float, every_s: float = 0.0
    ) -> None:
        self.tracker = spark.sparkContext.statusTracker()
        self.inject, self.after_s, self.every_s = inject, after_s, every_s
        self.count = 0
        self.first_at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _tasks_running(self) -> bool:
        for stage in self.tracker.getActiveStageIds():
            info = self.tracker.getStageInfo(stage)
            if info is not None and info.numActiveTasks > 0:
                return True
        return False

    def _run(self) -> None:
        while not self._tasks_running():
            if self._stop.wait(0.02):
                return
        if self._stop.wait(self.after_s):
            return
        while True:
            self.first_at = self.first_at or time.monotonic()
            self.inject()
            self.count += 1
            if not self.every_s or self._stop.wait(self.every_s):
                return

    def __enter__(self) -> Faults:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


def _restart(store: str, server: Any) -> Callable[[], None]:
    if store == "redis":

        def kill_and_start() -> None:
            server.kill()
            time.sleep(0.5)
            server.start()

        return kill_and_start

    def pg_restart() -> None:
        server.stop()
        server.start()

    return pg_restart


SURFACES = [
    "lookup_join",
    pytest.param("table function", marks=needs(TABLE_FUNCTION)),
    pytest.param("data source", marks=needs(DATA_SOURCE)),
]


def _assert_each_row_once_and_right(result: dict[str, int]) -> None:
    assert result == {**result, "rows": result["expected"], "distinct": result["expected"]}
    assert result["wrong"] == 0


def _report(what: str, result: dict[str, int], faults: Faults, seconds: float) -> None:
    lost = result["expected"] - result["distinct"]
    duplicated = result["rows"] - result["distinct"]
    print(
        f"\n{what}: {result['expected']:,} rows, {faults.count} fault(s), lost {lost}, "
        f"wrong {result['wrong']}, duplicated {duplicated}, {seconds:.1f} s"
    )


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize("store", ["redis", "postgres"])
def test_a_store_restart_loses_nothing_with_retries(
    spark: Any, request: pytest.FixtureRequest, store: str, surface: str
) -> None:
    server = request.getfixturevalue(f"{store}_store")
    address = server.url
    options = {**_options(store, address), **RETRIES}
    started = time.monotonic()
    with Faults(spark, _restart(store, server), after_s=0.3) as faults:
        result = _checked(spark, surface, options)
    _report(f"{store} restart, {surface}", result, faults, time.monotonic() - started)
    assert faults.count == 1  # the restart happened during the job
    _assert_each_row_once_and_right(result)


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize("store", ["redis", "postgres"])
def test_every_connection_cut_every_second_loses_nothing_with_retries(
    spark: Any, request: pytest.FixtureRequest, store: str, surface: str
) -> None:
    server = request.getfixturevalue(f"{store}_store")
    proxy = FaultProxy(server.host, server.port)
    address = server.url.replace(f":{server.port}/", f":{proxy.port}/")
    options = {**_options(store, address), **RETRIES}
    started = time.monotonic()
    try:
        with Faults(spark, proxy.cut, after_s=0.2, every_s=1.0) as faults:
            result = _checked(spark, surface, options)
    finally:
        proxy.close()
    _report(f"{store} cut every second, {surface}", result, faults, time.monotonic() - started)
    assert faults.count >= 1
    _assert_each_row_once_and_right(result)


def _down(store: str, server: Any) -> Callable[[], None]:
    return server.kill if store == "redis" else server.stop


@pytest.mark.parametrize("store", ["redis", "postgres"])
def test_without_retries_a_store_that_goes_down_fails_the_job_in_bounded_time(
    spark: Any, request: pytest.FixtureRequest, store: str
) -> None:
    """With retries off, a store that goes down mid-job fails it (Spark's own task retry
    included) within the time the README promises: about timeout.ms per attempt."""
    server = request.getfixturevalue(f"{store}_store")
    options = {**_options(store, server.url), **NO_RETRIES}
    # timeout.ms and a second's grace, plus Spark's time to stop the job as this machine
    # takes it now (three times a job that fails at once), never less than the quiet bound
    stop_s = spark_stop_s(spark)
    within_s = max(FAIL_WITHIN_S, 3 + 1 + 3 * stop_s)
    try:
        with Faults(spark, _down(store, server), after_s=0.3) as faults:
            with pytest.raises(Exception, match="LookupFailedError|lookup at .* failed"):
                _checked(spark, "lookup_join", options)
            failed_after = time.monotonic() - (faults.first_at or time.monotonic())
    finally:
        server.start()  # back for the other tests
    print(
        f"\n{store} down without retries: the job failed {failed_after:.1f} s after it "
        f"(Spark stops a failing job in {stop_s:.1f} s here)"
    )
    assert faults.count == 1
    assert failed_after < within_s, (failed_after, stop_s)
