"""Faults between the engine and real servers, through a fault-injecting proxy.

For Redis, Postgres and HTTP: connections cut mid-job, a server down for good, answers slower
than timeout.ms, and a fraction of requests failing. The invariant checked everywhere: as many
rows out as in (left join), each row keeps its key, and no value is attached to the wrong key.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest

from lookup_source.engine.metrics import LookupMetrics
from lookup_source.engine.runner import run_lookups
from lookup_source.errors import LookupFailedError
from lookup_source.spark.plan import LookupPlan
from tests.faults import FaultProxy

KEYS: list[Any] = [*range(600), *range(2000, 2020), None, 5, 5]  # found, missing, null, dups
FAST = {"retry.initial-delay.ms": "20", "retry.max-delay.ms": "200", "timeout.ms": "3000"}


@dataclass
class Target:
    name: str
    proxy: FaultProxy
    options: dict[str, str]
    schema: str
    expected: Callable[[int], Any]


@pytest.fixture(params=["redis", "postgres", "http"])
def target(request: Any, prefix: str, table_name: str) -> Iterator[Target]:
    kind = request.param
    if kind == "redis":
        server = request.getfixturevalue("redis_srv")
        db = request.getfixturevalue("redis_db")
        db.mset({f"{prefix}{i}": json.dumps({"v": f"value {i}"}) for i in range(600)})
        proxy = FaultProxy(server.host, server.port)
        yield Target(
            kind,
            proxy,
            {
                "connector": "redis",
                "url": f"redis://127.0.0.1:{proxy.port}/{server.db}",
                "redis.key.pattern": f"{prefix}{{key}}",
            },
            "id long, v string",
            lambda i: f"value {i}",
        )
    elif kind == "postgres":
        server = request.getfixturevalue("postgres_srv")
        pg = request.getfixturevalue("pg")
        pg(f"CREATE TABLE {table_name} (id bigint PRIMARY KEY, v text)")
        pg.many(
            f"INSERT INTO {table_name} VALUES ($1, $2)", [(i, f"value {i}") for i in range(600)]
        )
        from urllib.parse import urlsplit

        parts = urlsplit(server.url)
        proxy = FaultProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
        url = server.url.replace(f"{parts.hostname}:{parts.port}", f"127.0.0.1:{proxy.port}")
        yield Target(
            kind,
            proxy,
            {"connector": "postgres", "url": url, "postgres.table": table_name},
            "id long, v string",
            lambda i: f"value {i}",
        )
        pg(f"DROP TABLE IF EXISTS {table_name}")
    else:
        from lookup_source.service import UserService

        with UserService(users=600, latency_ms=0) as service:
            proxy = FaultProxy("127.0.0.1", service.port)
            yield Target(
                kind,
                proxy,
                {"connector": "http", "url": f"http://127.0.0.1:{proxy.port}/users/{{key}}"},
                "id long, name string",
                lambda i: f"user-{i}",
            )
    proxy.close()


def run(
    target: Target,
    stats: list[LookupMetrics] | None = None,
    client_factory: Any = None,
    **options: str,
) -> list[dict[str, Any]]:
    plan = LookupPlan.build({**target.options, **FAST, **options}, target.schema)
    batches = [
        pa.RecordBatch.from_arrays([pa.array(KEYS[i : i + 100], pa.int64())], names=["id"])
        for i in range(0, len(KEYS), 100)
    ]
    out = run_lookups(
        batches,
        plan.engine_spec(("id",), how="left"),
        plan.connector_config(),
        client_factory=client_factory,
        on_metrics=stats.append if stats is not None else None,
    )
    return [row for batch in out for row in batch.to_pylist()]


def check(
    target: Target,
    rows: list[dict[str, Any]],
    *,
    failures_allowed: bool = False,
    nulls_allowed: bool = False,
) -> int:
    """The invariant; returns how many rows carry an error."""
    value = target.schema.split(",")[1].split()[0]
    assert [r["id"] for r in rows] == KEYS  # every input row, in order, with its own key
    errors = 0
    for row in rows:
        error = row.get("_lookup_error")
        if error is not None:
            assert failures_allowed and row[value] is None
            errors += 1
        elif nulls_allowed and row[value] is None:
            continue
        elif row["id"] is not None and row["id"] < 600:
            assert row[value] == target.expected(row["id"])  # never another key's value
        else:
            assert row[value] is None
    return errors


def cutting_client(target: Target, action: Callable[[], None], at_call: int) -> Any:
    client_class = LookupPlan.build(target.options, target.schema).options.connector_class()
    calls = 0

    def counting(form: str) -> Any:  # the engine calls one form or the other, never both
        async def wrapped(self, keys):  # type: ignore[no-untyped-def]
            nonlocal calls
            calls += 1
            if calls == at_call:
                action()
            return await getattr(super(Client, self), form)(keys)

        return wrapped

    forms = {
        "lookup": counting("lookup"),
        "lookup_arrow": counting("lookup_arrow"),
        "columnar": property(lambda self: client_class.columnar.fget(self)),  # as the parent
    }
    Client = type("Client", (client_class,), forms)
    return Client


def test_connection_cut_mid_job(target: Target) -> None:
    """Connections are cut while requests are in flight; the server itself stays up."""
    stats: list[LookupMetrics] = []
    target.proxy.delay_s = 0.2  # answers take a while: the cut lands on requests in flight

    def cut_soon() -> None:
        threading.Timer(0.1, target.proxy.cut).start()

    client = cutting_client(target, cut_soon, at_call=3)
    size = {"batch.size": "1"} if target.name == "http" else {"batch.size": "50"}
    rows = run(target, stats, client_factory=client, **size)
    check(target, rows)
    # the cut requests were retried, and counted (aiohttp itself re-sends a request whose
    # reused keep-alive connection was closed under it, so HTTP may need no retry of ours)
    assert stats[0].retries >= (0 if target.name == "http" else 1)


def test_server_down_then_back(target: Target) -> None:
    stats: list[LookupMetrics] = []
    timers: list[threading.Timer] = []

    def outage() -> None:
        target.proxy.down()
        timer = threading.Timer(0.5, target.proxy.up)
        timers.append(timer)
        timer.start()

    client = cutting_client(target, outage, at_call=2)
    try:
        rows = run(
            target,
            stats,
            client_factory=client,
            **{
                # about 11 s of retrying for a 0.5 s outage: its timer may be late
                "retry.max-attempts": "30",
                "retry.initial-delay.ms": "100",
                "retry.max-delay.ms": "400",
                "capacity": "4",
            },
        )
    finally:
        for timer in timers:
            timer.join()
    check(target, rows)
    assert stats[0].retries >= 1


def test_server_down_for_good_fails_in_bounded_time(target: Target) -> None:
    target.proxy.down()
    started = time.monotonic()
    with pytest.raises(LookupFailedError) as info:
        run(target, **{"retry.max-attempts": "3", "timeout.ms": "1000"})
    assert time.monotonic() - started < 15
    message = str(info.value)
    assert message.startswith(f"{target.name} lookup at ")
    assert f"127.0.0.1:{target.proxy.port}" in message
    assert "after 3 attempts" in message and info.value.failed_keys >= 1


@pytest.mark.parametrize("on_error", ["fail", "null", "column"])
def test_answers_slower_than_the_timeout(target: Target, on_error: str) -> None:
    target.proxy.delay_s = 0.4
    options = {
        "timeout.ms": "100",
        "retry.max-attempts": "2",
        "on.error": on_error,
        "capacity": "200",
        "batch.size": "1" if target.name == "http" else "200",
    }
    if on_error == "fail":
        with pytest.raises(LookupFailedError, match="no answer within timeout.ms=100"):
            run(target, **options)
        return
    started = time.monotonic()
    rows = run(target, **options)
    assert time.monotonic() - started < 20
    errors = check(target, rows, failures_allowed=True, nulls_allowed=on_error == "null")
    non_null = sum(1 for k in KEYS if k is not None)
    if on_error == "column":
        assert errors > 0
        assert all("timeout.ms=100" in r["_lookup_error"] for r in rows if r["_lookup_error"])
    else:
        value = target.schema.split(",")[1].split()[0]
        assert all(r[value] is None for r in rows)  # every lookup timed out: all null, none lost
        assert len(rows) == len(KEYS) and non_null > 0


def test_a_fraction_of_requests_failing(target: Target) -> None:
    target.proxy.fail_rate = 0.1
    stats: list[LookupMetrics] = []
    size = {"batch.size": "1"} if target.name == "http" else {"batch.size": "20"}
    rows = run(target, stats, **size, **{"retry.max-attempts": "10", "capacity": "8"})
    check(target, rows)  # with retries: complete and correct
    assert target.proxy.dropped > 0 and stats[0].retries > 0
    target.proxy.dropped = 0
    rows = run(target, **size, **{"retry.max-attempts": "1", "on.error": "column", "capacity": "8"})
    errors = check(target, rows, failures_allowed=True)  # without: each affected row accounted
    assert target.proxy.dropped > 0 and errors > 0
