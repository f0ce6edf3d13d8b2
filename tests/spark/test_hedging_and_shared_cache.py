"""Hedged requests and the shared cache tier through Spark: a stream's progress reports them,
a second job over the same keys makes no request to the service (the connector's, and your own
``fetch=`` in a new job), and hedging cuts the service's tail without a wrong row."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from lookup_source import lookup_join, lookup_metrics, progress_metrics
from lookup_source.service import BackgroundHttpServer
from lookup_source.spark.progress import HEDGE_FIELDS, PROGRESS_FIELDS, SHARED_FIELDS
from tests.spark.test_monitoring import run_stream, stream_of, write_batches

SCHEMA = "user_id long, name string"


class Service(BackgroundHttpServer):
    """``GET /users/{id}``: 5 ms, or 500 ms the first time a key ending in 7 is asked."""

    def __init__(self) -> None:
        self.asked: Counter[int] = Counter()
        app = web.Application()
        app.router.add_get("/users/{id}", self._one)
        super().__init__(app)

    async def _one(self, request: web.Request) -> web.StreamResponse:
        key = int(request.match_info["id"])
        slow = self.asked[key] == 0 and key % 10 == 7
        self.asked[key] += 1
        await asyncio.sleep(0.5 if slow else 0.005)
        if key >= 1000:
            return web.json_response({}, status=404)
        return web.json_response({"name": f"user {key}"})


@pytest.fixture
def service() -> Iterator[Service]:
    with Service() as srv:
        yield srv  # type: ignore[misc]


def test_a_stream_reports_hedges_and_shared_hits_in_its_progress(
    spark: Any, service: Service, redis_srv: Any, prefix: str, tmp_path: Path
) -> None:
    keys = [*range(60), 1000, 1001]
    write_batches(tmp_path / "in", [keys, keys])  # the second micro-batch: the same keys
    options = {
        "connector": "http",
        "url": f"{service.base_url}/users/{{key}}",
        "capacity": "8",
        "hedge.after.ms": "100",
        "hedge.budget": "0.2",
        "cache.shared.url": redis_srv.url,
        "cache.shared.namespace": prefix,  # this test's answers only
        "cache.shared.timeout.ms": "10000",  # a busy machine's late read is not a miss here
    }
    enriched = lookup_join(
        stream_of(spark, tmp_path / "in"), "user_id", schema=SCHEMA, options=options, name="u"
    )
    query = run_stream(spark, enriched, tmp_path, "hedged_shared")
    reported = [progress_metrics(p)["u"] for p in query.recentProgress if p["numInputRows"]]
    assert len(reported) == 2
    for entry in reported:
        assert list(entry) == [*PROGRESS_FIELDS, *HEDGE_FIELDS, *SHARED_FIELDS]
        assert entry["shared_errors"] == 0 and entry["missing_keys"] == 2
    first, second = reported
    assert first["shared_misses"] == 62 and first["requests"] == 62 + first["hedges"]
    assert first["hedges"] >= 6 and first["hedges_won"] >= 6  # keys 7, 17, ... 57
    assert second["shared_hits"] == 62 and second["requests"] == 0
    assert sum(service.asked[k] for k in keys) == 62 + first["hedges"]
    rows = spark.sql("SELECT user_id, name FROM hedged_shared").collect()
    expected = [(k, f"user {k}" if k < 1000 else None) for k in keys] * 2
    assert sorted((r.user_id, r.name) for r in rows) == sorted(expected)


def test_a_second_job_asks_the_service_nothing(
    spark: Any, service: Service, redis_srv: Any, prefix: str
) -> None:
    url = f"{service.base_url}/users/{{key}}"
    shared = {
        "cache.shared.url": redis_srv.url,
        "cache.shared.namespace": prefix,
        "cache.shared.timeout.ms": "10000",  # a busy machine's late read is not a miss here
    }
    facts = spark.range(0, 300, numPartitions=3).withColumnRenamed("id", "user_id")
    options = {"connector": "http", "url": url, **shared}
    first = lookup_join(facts, "user_id", schema=SCHEMA, options=options).collect()
    assert sum(service.asked.values()) == 300
    again = lookup_join(facts, "user_id", schema=SCHEMA, options=options)
    rows = again.collect()
    assert sum(service.asked.values()) == 300  # not one more request
    assert sorted(rows) == sorted(first)
    assert lookup_metrics(again).shared_hits == 300

    base = service.base_url

    async def fetch_user(user_id: int) -> Any:  # your own function: its code is its identity
        import aiohttp

        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{base}/users/{user_id}") as answer,
        ):
            return await answer.json() if answer.status == 200 else None

    for _ in range(2):  # two jobs, each with a new lookup_join of the function
        enriched = lookup_join(
            facts, "user_id", schema=SCHEMA, fetch=fetch_user, options=shared
        ).collect()
        assert sorted(enriched) == sorted(first)
    assert sum(service.asked.values()) == 600  # the function's first job only
