"""Spark-level reliability: task re-execution, leaks across jobs, secrets."""

from __future__ import annotations

import io
import json
import logging
import os
from contextlib import redirect_stdout
from typing import Any

import pytest
from pyspark.sql import functions as F

from lookup_source import lookup_join
from lookup_source.spark.versions import DATA_SOURCE
from tests.helpers import needs
from tests.servers import RedisServer

SCHEMA = "user_id long, name string"


@pytest.fixture
def users(redis_db: Any, prefix: str) -> None:
    redis_db.mset({f"{prefix}{i}": json.dumps({"name": f"user {i}"}) for i in range(3000)})


def test_a_failed_task_is_retried_by_spark_and_each_row_appears_once(
    spark: Any, redis_srv: RedisServer, prefix: str, users: None
) -> None:
    df = spark.range(20_000, numPartitions=2).select(
        F.col("id").alias("event_id"), (F.col("id") % 3100).alias("user_id")
    )
    out = lookup_join(
        df,
        "user_id",
        schema=SCHEMA,
        options={
            "connector": "tests.reliability.flaky:FailFirstAttemptRedis",
            "url": redis_srv.url,
            "redis.key.pattern": f"{prefix}{{key}}",
            "batch.size": "100",
            "capacity": "2",
        },
    )
    rows = out.collect()
    assert len(rows) == 20_000
    assert sorted(r.event_id for r in rows) == list(range(20_000))  # exactly once
    assert all(r.name == (f"user {r.user_id}" if r.user_id < 3000 else None) for r in rows)


def _probe(batches: Any) -> Any:
    """Threads and open sockets of the Python worker running this task."""
    import threading

    import pyarrow as pa

    for _ in batches:
        pass
    sockets = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                sockets += 1
        except OSError:
            pass
    yield pa.RecordBatch.from_pydict(
        {"pid": [os.getpid()], "threads": [threading.active_count()], "sockets": [sockets]}
    )


def probe_workers(spark: Any) -> dict[int, tuple[int, int]]:
    rows = (
        spark.range(4, numPartitions=4)
        .mapInArrow(_probe, "pid long, threads long, sockets long")
        .collect()
    )
    return {r.pid: (r.threads, r.sockets) for r in rows}


@pytest.mark.once  # the engine's, the same on any PySpark: run once
def test_no_leaks_across_jobs(
    spark: Any,
    redis_srv: RedisServer,
    redis_db: Any,
    prefix: str,
    users: None,
    postgres_srv: Any,
    pg: Any,
    table_name: str,
) -> None:
    """Each Python worker keeps one client per lookup configuration, for job after job: the
    connections, sockets and threads after the first round of jobs do not grow with more."""
    from lookup_source.service import UserService

    pg(f"CREATE TABLE {table_name} (user_id bigint PRIMARY KEY, name text)")
    pg.many(f"INSERT INTO {table_name} VALUES ($1, $2)", [(i, f"user {i}") for i in range(500)])

    def pg_connections() -> int:
        return int(
            pg.fetch(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = "
                "'client backend' AND application_name <> 'psql'"
            )[0][0]
        )

    df = spark.range(5_000, numPartitions=4).select((F.col("id") % 600).alias("user_id"))
    with UserService(users=500, latency_ms=0) as service:
        targets = [
            {"connector": "redis", "url": redis_srv.url, "redis.key.pattern": f"{prefix}{{key}}"},
            {"connector": "postgres", "url": postgres_srv.url, "postgres.table": table_name},
            {"connector": "http", "url": service.url},
        ]
        known = [3000, 500, 500]  # users each store holds
        seen = []
        for _ in range(4):
            for options, users_held in zip(targets, known):
                out = lookup_join(df, "user_id", schema=SCHEMA, options=options)
                expected = sum(1 for i in range(5_000) if i % 600 < users_held)
                assert out.where("name IS NOT NULL").count() == expected
            seen.append(
                (
                    len(redis_db.client_list(_type="normal")),
                    pg_connections(),
                    service.connections,
                    probe_workers(spark),
                )
            )
    # two rounds warm the workers up: Spark hands tasks to its idle workers in turn, and
    # each worker opens a client per configuration the first time it serves one
    (redis_first, pg_first, http_first, workers_first) = seen[1]
    for redis_now, pg_now, http_now, workers in seen[2:]:
        assert (redis_now, pg_now, http_now) == (redis_first, pg_first, http_first)
        for pid, (threads, sockets) in workers.items():
            if pid in workers_first:  # the same worker process, reused by later jobs
                assert threads <= workers_first[pid][0], (pid, workers_first[pid], threads)
                assert sockets <= workers_first[pid][1] + 1, (pid, workers_first[pid], sockets)
    pg(f"DROP TABLE {table_name}")


@needs(DATA_SOURCE)
def test_passwords_never_reach_plans_errors_or_logs(
    spark: Any, redis_srv: RedisServer, caplog: Any
) -> None:
    secret = "Sup3r-S3cret-pw"
    url = f"redis://user:{secret}@127.0.0.1:1/0"
    df = spark.range(3).select(F.col("id").alias("user_id"))
    out = lookup_join(
        df,
        "user_id",
        schema=SCHEMA,
        options={"connector": "redis", "url": url, "retry.max-attempts": "1"},
    )
    captured = io.StringIO()
    # our own logger at its most verbose; (py4j's DEBUG trace echoes every value sent to the
    # JVM, options included: that is why secrets belong in *.env options)
    with redirect_stdout(captured), caplog.at_level(logging.DEBUG, logger="lookup_source"):
        out.explain(True)
        spark.read.format("asynclookup").schema(SCHEMA).options(
            connector="redis", url=url, keys="[1]"
        ).load().explain(True)
        with pytest.raises(Exception) as info:
            out.collect()
    assert "user:***@127.0.0.1:1" in str(info.value)
    for text in (captured.getvalue(), str(info.value), caplog.text):
        assert secret not in text
