"""lookup_join on Structured Streaming DataFrames."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from lookup_source import lookup_join
from tests.helpers import finished, waited_for
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
    finished(query)
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
    finished(query)  # append mode needs the watermark: it must be there
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


def test_restart_from_checkpoint_gives_every_row_exactly_once(
    spark: Any, options: dict, tmp_path: Path
) -> None:
    source, sink, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "checkpoint"
    for part in range(4):
        write_events(
            source,
            f"part-{part}.json",
            [(e, e % 130, "2024-01-01 00:00:00") for e in range(part * 100, part * 100 + 100)],
        )

    def start(trigger: dict[str, Any]) -> Any:
        stream = (
            spark.readStream.schema("event_id long, user_id long, ts timestamp")
            .option("maxFilesPerTrigger", 1)
            .json(str(source))
        )
        enriched = lookup_join(stream, "user_id", schema=SCHEMA, options=options)
        return (
            enriched.writeStream.format("parquet")
            .option("path", str(sink))
            .option("checkpointLocation", str(checkpoint))
            .trigger(**trigger)
            .start()
        )

    first = start({"processingTime": "100 milliseconds"})
    # its first two batches done (a busy machine starts a stream slowly)
    waited_for(lambda: (first.lastProgress or {}).get("batchId", -1) >= 1, 300, 0.2)
    first.stop()  # stopped mid-way: some files are done, usually not all of them
    done = spark.read.parquet(str(sink)).count() if any(sink.glob("*.parquet")) else 0
    # at least two batches of one file each were committed; a slow poll may let the rest
    # finish too (then the restart still has the two files that arrive while it is down)
    assert 200 <= done <= 400
    for part in range(4, 6):  # more events arrive while the job is down
        write_events(
            source,
            f"part-{part}.json",
            [(e, e % 130, "2024-01-01 00:00:00") for e in range(part * 100, part * 100 + 100)],
        )
    second = start({"availableNow": True})
    finished(second)
    rows = spark.read.parquet(str(sink)).collect()
    assert sorted(r.event_id for r in rows) == list(range(600))  # none lost, none doubled
    for row in rows:
        assert row.name == (f"user {row.user_id}" if row.user_id < 100 else None)


@pytest.mark.parametrize(
    ("mode", "output_mode"),
    [
        ("append", "ordered"),
        ("update", "ordered"),
        ("append", "unordered"),
        ("append", "key-ordered"),
    ],
)
def test_windowed_aggregation_after_the_join_matches_batch(
    spark: Any,
    options: dict,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    mode: str,
    output_mode: str,
) -> None:
    """Under a watermark, a windowed count after the join equals the batch answer, whether the
    join emits its Arrow batches in order or as their lookups finish (small Arrow batches, so
    that each task has many to reorder)."""
    options = {**options, "output.mode": output_mode, "batch.size": "3"}
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "16")
    request.addfinalizer(lambda: spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch"))
    source = tmp_path / "events"
    write_events(
        source, "a.json", [(i, i % 7, f"2024-01-01 00:0{i % 4}:1{i % 6}") for i in range(200)]
    )
    write_events(source, "b.json", [(999, 1, "2024-01-01 00:30:00")])  # moves the watermark
    schema = "event_id long, user_id long, ts timestamp"
    stream = spark.readStream.schema(schema).json(str(source)).withWatermark("ts", "1 minute")
    windowed = (
        lookup_join(stream, "user_id", schema=SCHEMA, options=options)
        .groupBy(F.window("ts", "1 minute"), "tier")
        .agg(F.count("*").alias("n"))
    )
    name = f"windows_{mode}_{output_mode.replace('-', '_')}"
    query = (
        windowed.writeStream.outputMode(mode)
        .format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    finished(query)
    batch = (
        lookup_join(
            spark.read.schema(schema).json(str(source)), "user_id", schema=SCHEMA, options=options
        )
        .groupBy(F.window("ts", "1 minute"), "tier")
        .agg(F.count("*").alias("n"))
    )
    expected = {(r.window.start, r.tier, r.n) for r in batch.collect() if r.window.start.minute < 4}
    got = {(r.window.start, r.tier, r.n) for r in spark.sql(f"SELECT * FROM {name}").collect()}
    # update mode may emit a window more than once as it fills: keep its last (largest) count
    final: dict[tuple[Any, Any], int] = {}
    for start, tier, n in got:
        final[(start, tier)] = max(n, final.get((start, tier), 0))
    assert {(s, t, n) for (s, t), n in final.items() if s.minute < 4} == expected


def test_cache_persists_across_micro_batches_and_metrics_reach_the_driver(
    spark: Any, tmp_path: Path
) -> None:
    """Six micro-batches of the same 50 keys: without a cache, 300 requests. With the
    per-worker cache, each Python worker asks each key at most once, whatever the micro-batch
    it serves. Which worker Spark hands a micro-batch is Spark's (any idle one, of however many
    earlier jobs left): the service tells the workers apart by their connection (one each,
    capacity 1), and the bound is per worker."""
    from lookup_source import lookup_metrics
    from lookup_source.service import UserService

    class PerConnection(UserService):
        def __init__(self) -> None:
            super().__init__(users=40, latency_ms=0)
            self.asked: list[tuple[Any, str]] = []

        async def _get(self, request: Any) -> Any:
            peer = request.transport.get_extra_info("peername") if request.transport else None
            self.asked.append((peer, request.match_info["user_id"]))
            return await super()._get(request)

    batches = 6
    source = tmp_path / "events"
    source.mkdir()
    with PerConnection() as service:
        options = {
            "connector": "http",
            "url": service.url,
            "capacity": "1",
            "cache.max-rows": "1000",
            "cache.ttl.ms": "600000",
        }
        stream = (
            spark.readStream.schema("event_id long, user_id long, ts timestamp")
            .option("maxFilesPerTrigger", 1)
            .json(str(source))
        )
        enriched = lookup_join(
            stream.coalesce(1), "user_id", schema="user_id long, name string", options=options
        )
        query = (
            enriched.writeStream.format("memory")
            .queryName("cached_stream")
            .option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(processingTime="100 milliseconds")
            .start()
        )
        per_batch: list[int] = []
        try:
            deadline = time.monotonic() + 90
            for batch in range(batches):
                before = service.requests
                write_events(
                    source,
                    f"{batch}.json",
                    [
                        (i, i % 50, "2024-01-01 00:00:00")
                        for i in range(batch * 200, batch * 200 + 200)
                    ],
                )
                while (
                    spark.sql("SELECT count(*) FROM cached_stream").collect()[0][0]
                    < (batch + 1) * 200
                    and time.monotonic() < deadline
                ):
                    time.sleep(0.1)
                per_batch.append(service.requests - before)
        finally:
            query.stop()
        total = service.requests
        asked = list(service.asked)
    assert per_batch[0] == 50  # 50 distinct keys, each asked once
    assert all(n in (0, 50) for n in per_batch), per_batch  # a worker asks all, or none
    workers = {peer for peer, _ in asked}
    assert len(asked) == len(set(asked)) == total  # no worker asked a key twice
    assert total == 50 * len(workers), (per_batch, len(workers))
    if len(workers) < batches:  # some worker served two micro-batches: from its cache
        assert total < batches * 50 and min(per_batch[1:]) == 0, per_batch
    rows = spark.sql("SELECT * FROM cached_stream").collect()
    assert len(rows) == batches * 200
    assert all(r.name == (f"user-{r.user_id}" if r.user_id < 40 else None) for r in rows)
    metrics = lookup_metrics(enriched)
    assert metrics.rows == batches * 200 and metrics.requests == total
    assert metrics.cache_hits == batches * 50 - total and metrics.cache_misses == total
