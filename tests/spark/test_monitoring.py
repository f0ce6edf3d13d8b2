"""Metrics where operators look: each micro-batch's progress (read by a listener), names, and
OpenTelemetry received by a real OTLP endpoint that decodes the protobuf a real job sends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from lookup_source import lookup_join, lookup_metrics, progress_metrics
from lookup_source.errors import ConfigurationError
from lookup_source.spark.internals import plan_text
from lookup_source.spark.progress import METRICS_COLUMN, PROGRESS_FIELDS
from tests.helpers import finished

SCHEMA = "user_id long, name string"


def write_batches(source: Path, batches: list[list[int]]) -> None:
    source.mkdir(parents=True, exist_ok=True)
    event = 0
    for index, users in enumerate(batches):
        lines = []
        for user in users:
            lines.append(json.dumps({"event_id": event, "user_id": user}))
            event += 1
        (source / f"{index:03d}.json").write_text("\n".join(lines) + "\n")


def run_stream(spark: Any, enriched: Any, tmp_path: Path, name: str) -> Any:
    query = (
        enriched.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / f"cp-{name}"))
        .trigger(availableNow=True)
        .start()
    )
    finished(query)
    return query


def stream_of(spark: Any, source: Path) -> Any:
    return (
        spark.readStream.schema("event_id long, user_id long")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
    )


@pytest.fixture
def users(redis_db: Any, prefix: str) -> dict[str, str]:
    redis_db.mset({f"{prefix}{i}": json.dumps({"name": f"user {i}"}) for i in range(50)})
    return {"redis.key.pattern": f"{prefix}{{key}}"}


def test_each_micro_batch_reports_its_own_figures(
    spark: Any, redis_srv: Any, users: dict[str, str], tmp_path: Path
) -> None:
    """Three micro-batches of different sizes: each progress entry has that batch's rows,
    distinct keys and missing keys (keys 50 and up are missing), not a running total."""
    batches = [list(range(40, 60)), [1, 1, 2, 2, 3], list(range(100, 130))]
    write_batches(tmp_path / "in", batches)
    options = {"connector": "redis", "url": redis_srv.url, **users}
    enriched = lookup_join(
        stream_of(spark, tmp_path / "in"), "user_id", schema=SCHEMA, options=options, name="users"
    )
    query = run_stream(spark, enriched, tmp_path, "per_batch")
    reported = [progress_metrics(p)["users"] for p in query.recentProgress if p["numInputRows"]]
    assert sorted((m["rows"], m["keys"], m["missing_keys"]) for m in reported) == [
        (5, 3, 0),  # (the files of one moment are taken in any order)
        (20, 20, 10),
        (30, 30, 30),
    ]
    for m in reported:
        assert list(m) == list(PROGRESS_FIELDS)
        assert m["failed_keys"] == m["retries"] == m["timeouts"] == 0
        assert m["requests"] >= 1 and m["peak_in_flight"] >= 1
        assert 0 < m["latency_p50_ms"] <= m["latency_p99_ms"]
    rows = spark.sql("SELECT * FROM per_batch").collect()
    assert len(rows) == 55 and METRICS_COLUMN not in rows[0].asDict()
    assert all(r.name == (f"user {r.user_id}" if r.user_id < 50 else None) for r in rows)
    total = lookup_metrics(enriched)  # the accumulator still sums them, on a classic session
    assert (total.rows, total.missing_keys, total.name) == (55, 40, "users")


def test_failures_and_two_lookups_of_one_query(
    spark: Any, redis_srv: Any, users: dict[str, str], tmp_path: Path
) -> None:
    """A function that fails for some keys (on.error=null): the micro-batch's failed keys and
    failed requests; a second lookup in the same query has an entry of its own."""

    async def flaky(user_id: int) -> dict[str, str]:
        if user_id % 4 == 0:
            raise ConnectionError(f"no answer for {user_id}")
        return {"tier": f"t{user_id % 3}"}

    write_batches(tmp_path / "in", [list(range(12))])
    enriched = lookup_join(
        stream_of(spark, tmp_path / "in"),
        "user_id",
        schema=SCHEMA,
        options={"connector": "redis", "url": redis_srv.url, **users},
        name="names",
    )
    tiered = lookup_join(
        enriched,
        "user_id",
        schema="user_id long, tier string",
        fetch=flaky,
        options={"on.error": "null", "retry.max-attempts": "2", "retry.initial-delay.ms": "1"},
        name="tiers",
    )
    query = run_stream(spark, tiered, tmp_path, "two_lookups")
    [progress] = [p for p in query.recentProgress if p["numInputRows"]]
    found = progress_metrics(progress)
    assert set(found) == {"names", "tiers"}
    assert found["names"]["rows"] == found["tiers"]["rows"] == 12
    assert found["names"]["failed_keys"] == 0
    assert found["tiers"]["failed_keys"] == 3  # 0, 4 and 8
    assert found["tiers"]["retries"] == 3  # each failing key tried twice
    rows = spark.sql("SELECT * FROM two_lookups").collect()
    assert sorted((r.user_id, r.name, r.tier) for r in rows) == [
        (u, f"user {u}", None if u % 4 == 0 else f"t{u % 3}") for u in range(12)
    ]


def test_a_batch_job_on_a_classic_session_carries_no_metrics_rows(
    spark: Any, redis_srv: Any, users: dict[str, str]
) -> None:
    """Batch jobs keep their accumulator: no extra rows, no observation in the plan."""
    events = spark.range(10).withColumnRenamed("id", "user_id")
    options = {"connector": "redis", "url": redis_srv.url, **users}
    enriched = lookup_join(events, "user_id", schema=SCHEMA, options=options, name="batch")
    assert METRICS_COLUMN not in plan_text(enriched) and "CollectMetrics" not in plan_text(enriched)
    assert enriched.count() == 10
    assert lookup_metrics(enriched).rows == 10


def test_a_bad_name_is_refused_before_any_job(spark: Any) -> None:
    events = spark.range(3).withColumnRenamed("id", "user_id")

    async def fetch(user_id: int) -> dict[str, str]:
        return {"name": "x"}

    with pytest.raises(ConfigurationError, match=r"name='my lookup': a lookup's name is made"):
        lookup_join(events, "user_id", schema=SCHEMA, fetch=fetch, name="my lookup")


# ---------------------------------------------------------------------------------------------
# OpenTelemetry: a real job, a real OTLP/HTTP endpoint decoding the real protobuf
# ---------------------------------------------------------------------------------------------


class OtlpReceiver:
    """An OTLP/HTTP metrics endpoint: decodes each ExportMetricsServiceRequest and keeps, per
    worker (service.instance.id), metric and attributes, the latest cumulative point."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2

        self.latest: dict[tuple[str, str, tuple[tuple[str, str], ...]], Any] = {}
        self.resources: list[dict[str, str]] = []
        self.requests = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = metrics_service_pb2.ExportMetricsServiceRequest()
                request.ParseFromString(body)
                receiver.take(request)
                answer = metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/metrics"
        self._lock = threading.Lock()

    def take(self, request: Any) -> None:
        with self._lock:
            self.requests += 1
            for resource_metrics in request.resource_metrics:
                carried = resource_metrics.resource.attributes
                resource = {a.key: a.value.string_value for a in carried}
                self.resources.append(resource)
                worker = resource.get("service.instance.id", "")
                for scope in resource_metrics.scope_metrics:
                    for metric in scope.metrics:
                        kind = metric.WhichOneof("data")
                        for point in getattr(metric, kind).data_points:
                            attributes = tuple(
                                sorted((a.key, a.value.string_value) for a in point.attributes)
                            )
                            self.latest[(worker, metric.name, attributes)] = point

    def total(self, metric: str, **attributes: str) -> float:
        """The sum over workers of ``metric``'s points that carry ``attributes``."""
        value = 0.0
        for (_, name, carried), point in self.latest.items():
            if name == metric and set(attributes.items()) <= set(carried):
                value += point.count if hasattr(point, "bucket_counts") else point.as_int
        return value

    def __enter__(self) -> OtlpReceiver:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    pytest.importorskip("opentelemetry.proto", reason="needs asynclookup[opentelemetry]")
    with OtlpReceiver() as receiving:
        yield receiving


@pytest.mark.once  # the engine's, the same on any PySpark: run once
def test_opentelemetry_reaches_an_otlp_endpoint_from_the_executors(
    redis_srv: Any, redis_db: Any, prefix: str, receiver: OtlpReceiver
) -> None:
    redis_db.mset({f"{prefix}{i}": json.dumps({"name": f"user {i}"}) for i in range(500)})
    root = str(Path(__file__).resolve().parents[2])
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p),
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": receiver.url,
        "OTEL_SERVICE_NAME": "enrichment-test",
    }
    env.pop("OTEL_METRICS_EXPORTER", None)
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("otel_job.py")), redis_srv.url, prefix],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    job = json.loads(done.stdout.strip().splitlines()[-1])
    assert job["rows"] == 3_000 and job["named"] == 2_500 and job["tasks"] == 3
    deadline = time.monotonic() + 10  # each task flushed before it ended: nothing is late
    while receiver.total("asynclookup.rows") < 3_000 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert receiver.requests >= 1
    assert all(r.get("service.name") == "enrichment-test" for r in receiver.resources)
    lookup = {"asynclookup.lookup": "users", "asynclookup.connector": "redis"}
    assert receiver.total("asynclookup.rows", **lookup) == 3_000
    assert receiver.total("asynclookup.keys", **lookup) == job["keys"]
    assert (
        receiver.total("asynclookup.keys", **lookup, **{"asynclookup.outcome": "missing"})
        == (job["missing_keys"])
    )
    assert receiver.total("asynclookup.requests", **lookup) == job["requests"]
    assert receiver.total("asynclookup.request.duration", **lookup) == job["requests"]


def test_both_progress_entry_forms_give_the_same_numbers(spark: Any) -> None:
    """One aggregate (the default: each task's metrics as one text field, decoded by
    progress_metrics) and the entry of named fields (an aggregate each, computed by Spark)
    give the same figures for the same tasks, the latency quantiles included."""
    from lookup_source.engine.metrics import LookupMetrics
    from lookup_source.spark.progress import (
        HEDGE_FIELDS,
        carried_rows,
        progress_columns,
        progress_document,
    )

    tasks = []
    for index, latencies in enumerate(((0.001, 0.002), (0.004, 0.004, 0.03), (0.25,), ())):
        task = LookupMetrics(tasks=1, rows=100 + index, keys=10 * index, requests=len(latencies))
        task.peak_in_flight, task.hedges, task.hedges_won = 3 * index, index, index // 2
        for seconds in latencies:
            task.record_latency(seconds)
        tasks.append(task)
    real_rows: list[tuple[Any]] = [(None,)] * 7  # the join's own rows: null metrics

    def frame(buckets: bool) -> Any:
        carried = [(text,) for task in tasks for text in carried_rows(task, buckets)]
        return spark.createDataFrame(real_rows + carried, f"`{METRICS_COLUMN}` string")

    named = frame(True).agg(*progress_columns(HEDGE_FIELDS)).first().asDict()
    text = frame(False).agg(progress_document(HEDGE_FIELDS)).first()[0]
    decoded = progress_metrics({"observedMetrics": {"asynclookup_users": {"tasks": text}}})
    assert list(decoded["users"]) == list(named) == [*PROGRESS_FIELDS, *HEDGE_FIELDS]
    for name, value in named.items():
        assert decoded["users"][name] == pytest.approx(value), name
    assert named["rows"] == 406 and named["hedges"] == 6 and named["latency_p99_ms"] > 200
    empty = frame(False).limit(3).agg(progress_document()).first()[0]  # no task: zeros
    assert set(
        progress_metrics({"observedMetrics": {"asynclookup_x": {"tasks": empty}}})["x"].values()
    ) == {0}
