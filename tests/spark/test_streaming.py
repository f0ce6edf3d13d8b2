"""lookup_join on Structured Streaming DataFrames."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from lookup_source import lookup_join
from tests.servers import RedisServer

SCHEMA = "user_id long, name string, tier int"


@pytest.fixture
def options(redis_srv: RedisServer, redis_db: Any, prefix: str) -> dict[str, str]:
    redis_db.mset(
        {f"{prefix}user:{i}": json.dumps({"name": f"user {i}", "tier": i % 3}) for i in range(100)}
    )
    return {
        "connector": "redis",
        "url": redis_srv.url,
        "redis.key.pattern": f"{prefix}user:{{key}}",
    }


def write_events(directory: Path, name: str, rows: list[tuple[int, int | None, str]]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"event_id": e, "user_id": u, "ts": ts}) for e, u, ts in rows]
    (directory / name).write_text("\n".join(lines) + "\n")


def test_streaming_lookup_join_into_a_memory_sink(
    spark: Any, options: dict, tmp_path: Path
) -> None:
    source = tmp_path / "events"
    write_events(source, "a.json", [(i, i % 120, "2024-01-01 00:00:00") for i in range(300)])
    write_events(source, "b.json", [(300, None, "2024-01-01 00:00:00")])
    stream = spark.readStream.schema("event_id long, user_id long, ts timestamp").json(str(source))
    assert stream.isStreaming
    enriched = lookup_join(stream, "user_id", schema=SCHEMA, options=options)
    query = (
        enriched.writeStream.format("memory")
        .queryName("enriched_events")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    rows = spark.sql("SELECT * FROM enriched_events").collect()
    assert sorted(r.event_id for r in rows) == list(range(301))
    for row in rows:
        if row.user_id is None or row.user_id >= 100:
            assert row.name is None and row.tier is None
        else:
            assert row.name == f"user {row.user_id}" and row.tier == row.user_id % 3


def test_watermark_survives_the_lookup_join(spark: Any, options: dict, tmp_path: Path) -> None:
    source = tmp_path / "events"
    rows = [(i, i % 5, f"2024-01-01 00:0{i % 3}:10") for i in range(60)]
    write_events(source, "a.json", rows)
    stream = (
        spark.readStream.schema("event_id long, user_id long, ts timestamp")
        .json(str(source))
        .withWatermark("ts", "1 minute")
    )
    enriched = lookup_join(stream, "user_id", schema=SCHEMA, options=options)
    windowed = enriched.groupBy(F.window("ts", "1 minute"), "tier").count()
    query = (
        windowed.writeStream.outputMode("append")
        .format("memory")
        .queryName("tier_windows")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None  # append mode needs the watermark: it must be there
    batch = (
        lookup_join(
            spark.read.schema("event_id long, user_id long, ts timestamp").json(str(source)),
            "user_id",
            schema=SCHEMA,
            options=options,
        )
        .groupBy(F.window("ts", "1 minute"), "tier")
        .count()
    )
    streamed = spark.sql("SELECT * FROM tier_windows").collect()
    # append mode emits the windows the watermark (latest ts 00:02:10 - 1 minute) has closed
    expected = {(r.window.start, r.window.end, r.tier, r["count"]) for r in batch.collect()}
    got = {(r.window.start, r.window.end, r.tier, r["count"]) for r in streamed}
    watermark = max(end for _, end, _, _ in expected) - dt.timedelta(minutes=1, seconds=50)
    closed = {e for e in expected if e[1] <= watermark}
    assert closed and got == closed
