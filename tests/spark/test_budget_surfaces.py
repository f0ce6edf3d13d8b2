"""A cluster budget on every surface of the test session (``local[2]``): lookup_join, the SQL
table function, the data source and a stream, each against a real HTTP service that refuses
(429) what goes beyond its quota and counts what it receives, with the budget kept by a real
Redis. Across executors and jobs: tests/spark/test_cluster_budget.py; over Spark Connect:
tests/spark/test_deployment.py."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lookup_source import lookup_join, lookup_metrics, progress_metrics, register_lookup_table
from lookup_source.bench.quota import QuotaService
from lookup_source.errors import OptionError
from lookup_source.spark.versions import DATA_SOURCE, TABLE_FUNCTION
from tests.helpers import finished, needs
from tests.servers import RedisServer

SCHEMA = "user_id long, name string"


@pytest.fixture
def service() -> Iterator[QuotaService]:
    with QuotaService(max_in_flight=3, latency_s=0.02) as srv:
        yield srv  # type: ignore[misc]


def budget(redis_srv: RedisServer, service: QuotaService, **extra: str) -> dict[str, str]:
    return {
        "connector": "http",
        "url": f"{service.base_url}/users/{{key}}",
        "capacity": "20",
        "budget.url": redis_srv.url,
        "budget.name": f"surfaces-{uuid.uuid4().hex[:8]}",
        "budget.max-in-flight": "3",
        # a busy machine's late first answer would be a fallback to the static share
        "budget.timeout.ms": "3000",
        **extra,
    }


def test_lookup_join_keeps_the_budget_and_reports_it(
    spark: Any, redis_srv: RedisServer, service: QuotaService
) -> None:
    events = spark.range(300, numPartitions=4).withColumnRenamed("id", "user_id")
    out = lookup_join(events, "user_id", schema=SCHEMA, options=budget(redis_srv, service))
    rows = sorted((r.user_id, r.name) for r in out.collect())
    assert rows == [(k, f"user {k}") for k in range(300)]
    assert service.refused == 0 and service.peak_in_flight == 3
    metrics = lookup_metrics(out)
    assert metrics.budget.startswith("coordinated (surfaces-")
    assert metrics.budget_waits > 0 and metrics.budget_grants > 0 and metrics.requests == 300
    assert "budget coordinated" in str(metrics)


def test_without_a_coordinator_each_task_keeps_its_share(spark: Any, service: QuotaService) -> None:
    events = spark.range(200, numPartitions=2).withColumnRenamed("id", "user_id")
    options = {
        "connector": "http",
        "url": f"{service.base_url}/users/{{key}}",
        "capacity": "20",
        "budget.max-in-flight": "2",  # over the two tasks local[2] runs at once: one each
    }
    out = lookup_join(events, "user_id", schema=SCHEMA, options=options)
    assert sorted(r.user_id for r in out.collect() if r.name) == list(range(200))
    assert service.refused == 0 and service.peak_in_flight <= 2
    assert lookup_metrics(out).budget.startswith("static split over 2 tasks")


@needs(TABLE_FUNCTION)
def test_the_sql_table_function_keeps_the_budget(
    spark: Any, redis_srv: RedisServer, service: QuotaService
) -> None:
    register_lookup_table(spark, "budgeted", schema=SCHEMA, options=budget(redis_srv, service))
    spark.range(200, numPartitions=4).withColumnRenamed("id", "user_id").createOrReplaceTempView(
        "budget_events"
    )
    rows = spark.sql("SELECT * FROM budgeted_lookup(TABLE(budget_events), 'user_id')").collect()
    assert sorted((r.user_id, r.name) for r in rows) == [(k, f"user {k}") for k in range(200)]
    assert service.refused == 0 and service.peak_in_flight == 3


@needs(DATA_SOURCE)
def test_the_data_source_keeps_the_budget(
    spark: Any, redis_srv: RedisServer, service: QuotaService
) -> None:
    from lookup_source import AsyncLookupDataSource

    spark.dataSource.register(AsyncLookupDataSource)
    read = (
        spark.read.format("asynclookup")
        .schema(SCHEMA)
        .options(**budget(redis_srv, service))
        .option("keys", json.dumps(list(range(150))))
        .option("partitions", "3")
        .load()
    )
    assert sorted((r.user_id, r.name) for r in read.collect()) == [
        (k, f"user {k}") for k in range(150)
    ]
    assert service.refused == 0 and service.peak_in_flight == 3


def test_a_stream_keeps_the_budget_and_reports_it_in_its_progress(
    spark: Any, redis_srv: RedisServer, service: QuotaService, tmp_path: Path
) -> None:
    source = tmp_path / "events"
    source.mkdir()
    for part in range(2):
        lines = [json.dumps({"user_id": part * 100 + i}) for i in range(100)]
        (source / f"{part}.json").write_text("\n".join(lines) + "\n")
    stream = spark.readStream.schema("user_id long").option("maxFilesPerTrigger", 1)
    enriched = lookup_join(
        stream.json(str(source)),
        "user_id",
        schema=SCHEMA,
        options=budget(redis_srv, service),
        name="budgeted",
    )
    query = (
        enriched.writeStream.format("memory")
        .queryName("budgeted_stream")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    finished(query)
    named = spark.sql("SELECT count(name) AS n FROM budgeted_stream").collect()[0].n
    assert named == 200 and service.refused == 0 and service.peak_in_flight <= 3
    entries = [progress_metrics(p).get("budgeted") for p in query.recentProgress]
    entries = [e for e in entries if e and e["rows"]]
    assert len(entries) == 2
    for entry in entries:
        assert {"budget_waits", "budget_wait_ms", "budget_fallbacks"} <= set(entry)
        assert entry["budget_fallbacks"] == 0 and entry["budget_waits"] >= 0


def test_a_bad_budget_is_named_before_any_task(spark: Any, service: QuotaService) -> None:
    events = spark.range(3).withColumnRenamed("id", "user_id")
    with pytest.raises(OptionError, match=r"budget\.cost\.column"):
        lookup_join(
            events,
            "user_id",
            schema=SCHEMA,
            options={
                "connector": "http",
                "url": f"{service.base_url}/users/{{key}}",
                "budget.cost.column": "tokens",
                "budget.rate": "10",
            },
        )
