"""Your own async function as the lookup, on Spark: lookup_join (batch and streaming) and the
SQL table function, against a real HTTP service, opened once per Python worker."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from lookup_source import lookup_join, lookup_metrics, register_lookup_table
from lookup_source.service import UserService
from lookup_source.spark.versions import TABLE_FUNCTION
from tests.helpers import finished, needs

SCHEMA = "user_id long, name string, tier string"


@pytest.fixture(scope="module")
def service() -> Iterator[UserService]:
    with UserService(users=500, latency_ms=1) as running:
        yield running


class UserApi:
    """One aiohttp session per Python worker; each open and close is written to ``log``, with
    the worker's process id."""

    def __init__(self, base_url: str, log: str) -> None:
        self.base_url = base_url
        self.log = log

    def _note(self, what: str) -> None:
        import os

        with open(self.log, "a") as out:
            out.write(f"{what}:{os.getpid()}\n")

    async def open(self) -> None:
        import aiohttp

        self.session = aiohttp.ClientSession(base_url=self.base_url)
        self._note("open")

    async def __call__(self, user_id: int) -> Any:
        async with self.session.get(f"/users/{user_id}") as answer:
            if answer.status == 404:
                return None
            answer.raise_for_status()
            return await answer.json()

    async def close(self) -> None:
        await self.session.close()
        self._note("close")


def events(spark: Any, rows: int = 3_000, partitions: int = 3) -> Any:
    return spark.range(rows, numPartitions=partitions).select(
        F.col("id").alias("event_id"), (F.col("id") % 700).alias("user_id")
    )


def expected_name(user_id: int) -> str | None:
    return f"user-{user_id}" if user_id < 500 else None


def test_fetch_is_opened_once_per_worker_and_serves_its_tasks(
    spark: Any, service: UserService, tmp_path: Path
) -> None:
    log = tmp_path / "life.log"
    out = lookup_join(
        events(spark),
        "user_id",
        schema=SCHEMA,
        fetch=UserApi(service.base_url, str(log)),
        options={"capacity": "20"},
    )
    for _ in range(3):  # three actions: nine tasks
        rows = out.collect()
        assert len(rows) == 3_000
        assert all(r.name == expected_name(r.user_id) for r in rows)
        assert all(r.tier is not None for r in rows if r.user_id < 500)
    notes = log.read_text().split()
    opened = [note.split(":")[1] for note in notes if note.startswith("open:")]
    assert opened and len(opened) == len(set(opened))  # once per worker process, not per task
    assert not [note for note in notes if note.startswith("close:")]  # kept for the next tasks
    metrics = lookup_metrics(out)
    assert metrics.rows == 3 * 3_000 and metrics.tasks == 3 * 3
    assert metrics.missing_keys == 9 * 200  # users 500..699, once per task
    assert metrics.requests == metrics.keys  # one call per distinct key of a batch


class Batches:
    """POST /users/batch through one session per task."""

    def __init__(self, url: str) -> None:
        self.url = url

    async def open(self) -> None:
        import aiohttp

        self.session = aiohttp.ClientSession()

    async def __call__(self, user_ids: list[int]) -> dict[int, Any]:
        async with self.session.post(self.url, json={"keys": user_ids}) as answer:
            answer.raise_for_status()
            found = await answer.json()
        return {int(k): v for k, v in found.items()}

    async def close(self) -> None:
        await self.session.close()


def test_fetch_many_against_a_batch_endpoint(spark: Any, service: UserService) -> None:
    before = service.requests
    out = lookup_join(
        events(spark, partitions=2),
        "user_id",
        schema=SCHEMA,
        fetch_many=Batches(service.batch_url),
        options={"batch.size": "250"},
        how="inner",
    )
    rows = out.collect()
    assert sorted((r.event_id, r.name) for r in rows) == sorted(
        (e, f"user-{e % 700}") for e in range(3_000) if e % 700 < 500
    )
    assert service.requests - before <= 2 * 3  # 700 distinct keys per task, 250 per call


class SeesCollector:
    """GET /users/{id}, answering the worker's youngest-generation threshold as ``tier``."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url

    async def open(self) -> None:
        import aiohttp

        self.session = aiohttp.ClientSession(base_url=self.base_url)

    async def __call__(self, user_id: int) -> Any:
        import gc

        async with self.session.get(f"/users/{user_id}") as answer:
            if answer.status == 404:
                return None
            record = await answer.json()
        return {"name": record["name"], "tier": str(gc.get_threshold()[0])}

    async def close(self) -> None:
        await self.session.close()


@pytest.mark.parametrize("threshold", [None, "50000", "0"])
def test_the_worker_collects_less_often_while_its_lookups_run(
    spark: Any, service: UserService, threshold: str | None
) -> None:
    options = {"capacity": "20", "connection.max-idle.ms": "0"}
    if threshold is not None:
        options["gc.threshold"] = threshold
    out = lookup_join(
        events(spark, rows=600, partitions=2),
        "user_id",
        schema=SCHEMA,
        fetch=SeesCollector(service.base_url),
        options=options,
        how="inner",
    )
    rows = out.collect()
    assert sorted(r.name for r in rows) == sorted(f"user-{i % 700}" for i in range(500))
    seen = {int(r.tier) for r in rows}
    if threshold == "0":  # left as the worker has it: Python's own default
        assert len(seen) == 1 and seen.pop() < 10_000
    else:
        assert seen == {int(threshold or "10000")}


def test_a_failing_function_fails_the_job_naming_it_and_the_key(spark: Any) -> None:
    async def refuse(user_id: int) -> Any:
        raise PermissionError(13, "denied")  # an OSError: transient, retried, then fails

    out = lookup_join(
        events(spark, rows=10, partitions=1),
        "user_id",
        schema=SCHEMA,
        fetch=refuse,
        options={"retry.max-attempts": "2", "retry.initial-delay.ms": "1"},
    )
    with pytest.raises(Exception) as raised:
        out.collect()
    message = str(raised.value)
    assert "fetch=" in message and ".refuse lookup failed for" in message
    assert "after 2 attempts: TransientError:" in message
    assert re.search(r"\.refuse\(\d\) raised PermissionError: \[Errno 13\] denied", message)


def test_streaming_with_a_function(spark: Any, service: UserService, tmp_path: Path) -> None:
    source = tmp_path / "events"
    source.mkdir()
    with open(source / "part-0.json", "w") as out:
        for event in range(200):
            out.write(json.dumps({"event_id": event, "user_id": event * 3}) + "\n")
    stream = spark.readStream.schema("event_id long, user_id long").json(str(source))
    enriched = lookup_join(
        stream,
        "user_id",
        schema=SCHEMA,
        fetch=UserApi(service.base_url, str(tmp_path / "life.log")),
    )
    query = (
        enriched.writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    finished(query)
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert sorted((r.event_id, r.name) for r in rows) == [
        (e, expected_name(e * 3)) for e in range(200)
    ]


@needs(TABLE_FUNCTION)
def test_the_table_function_on_a_function(spark: Any, service: UserService, tmp_path: Path) -> None:
    register_lookup_table(
        spark,
        "api_users",
        schema=SCHEMA,
        fetch=UserApi(service.base_url, str(tmp_path / "life.log")),
    )
    events(spark, rows=1_000, partitions=2).createOrReplaceTempView("fn_events")
    rows = spark.sql("SELECT * FROM api_users_lookup(TABLE(fn_events), 'user_id', 'inner')")
    got = sorted((r.event_id, r.name) for r in rows.collect())
    assert got == sorted((e, f"user-{e % 700}") for e in range(1_000) if e % 700 < 500)
    assert lookup_metrics("api_users").rows == 1_000
    time.sleep(0)  # (each instance closed its client at the end of its input)
    # a function's table has a view a JOIN can name, which cannot be read: it says so
    assert spark.catalog.tableExists("api_users")
    with pytest.raises(Exception, match="cannot be read as a table"):
        spark.table("api_users").collect()
