"""What a lookup reports beyond lookup_metrics: the rows that carry a task's metrics to a
micro-batch's progress, reading a progress in every shape PySpark gives it, names, the bounded
memory of the driver, and OpenTelemetry (an in-memory reader of the real SDK)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from typing import Any

import pyarrow as pa
import pytest

from lookup_source.engine import telemetry
from lookup_source.engine.kept.worker import current_worker, forget_worker
from lookup_source.engine.metrics import LookupMetrics
from lookup_source.engine.runner import run_lookups
from lookup_source.errors import ConfigurationError, OptionError
from lookup_source.spark import metrics as spark_metrics
from lookup_source.spark.metrics import Recent, lookup_name
from lookup_source.spark.progress import (
    METRICS_COLUMN,
    PROGRESS_FIELDS,
    MetricsRows,
    carried_rows,
    progress_key,
    progress_metrics,
)
from tests.fakes import FakeClient, FakeStore, key_batch, make_config, make_options, make_spec

TABLE = {i: {"name": f"user-{i}", "n": i} for i in range(100)}


def task_metrics() -> LookupMetrics:
    m = LookupMetrics(tasks=1, rows=10, keys=4, requests=3, missing_keys=1, peak_in_flight=2)
    for seconds in (0.001, 0.001, 0.004):
        m.record_latency(seconds)
    return m


def test_a_tasks_metrics_leave_as_rows_after_its_output() -> None:
    metrics = task_metrics()
    rows = MetricsRows()
    batch = pa.RecordBatch.from_pydict({"k": [1, 2], "name": ["a", "b"]})
    output = list(rows.output(iter([batch])))  # nothing watched: an empty task adds no row
    assert len(output) == 1 and output[0].column(METRICS_COLUMN).null_count == 2
    list(rows.watch([batch.select(["k"])]))  # the input: the key only
    rows.finished(metrics)
    out = pa.Table.from_batches(list(rows.output([batch])))  # the output: key and value
    assert out.column(METRICS_COLUMN).null_count == 2  # the real rows
    carried = [r for r in out.to_pylist() if r[METRICS_COLUMN] is not None]
    assert [r["k"] for r in carried] == [2, 2, 2]  # the last input row again, values null
    assert all(r["name"] is None for r in carried)
    whole, *buckets = (r[METRICS_COLUMN] for r in carried)
    assert LookupMetrics.from_json(whole) == metrics
    # the latency histogram, a bucket a row: a quantile over them is lookup_metrics'
    assert [(round(b["ms"], 2), b["n"]) for b in map(json.loads, buckets)] == [(1.07, 2), (4.0, 1)]
    assert carried_rows(metrics) == [r[METRICS_COLUMN] for r in carried]


def test_a_task_with_no_request_carries_its_metrics_alone() -> None:
    metrics = LookupMetrics(tasks=1, rows=1, null_keys=1)
    assert carried_rows(metrics) == [metrics.to_json().decode()]


def test_rows_and_an_accumulator_both_get_the_metrics() -> None:
    class Accumulator:
        def __init__(self) -> None:
            self.added: list[LookupMetrics] = []

        def add(self, value: LookupMetrics) -> None:
            self.added.append(value)

    accumulator = Accumulator()
    MetricsRows(accumulator).finished(task_metrics())
    assert accumulator.added == [task_metrics()]


FIGURES = {name: index for index, name in enumerate(PROGRESS_FIELDS)}


def test_progress_metrics_reads_every_shape_pyspark_gives() -> None:
    from pyspark.sql import Row

    classic_row = Row(**FIGURES)
    connect_row = Row(
        values=list(FIGURES.values()),
        schema={"type": "struct", "fields": [{"name": n, "type": "long"} for n in FIGURES]},
    )
    shapes = [
        {"observedMetrics": {"asynclookup_users": classic_row}},  # a classic listener event
        {"observedMetrics": {"asynclookup_users": connect_row}},  # over Spark Connect
        {"observedMetrics": {"asynclookup_users": dict(FIGURES)}},  # lastProgress on 3.5
        json.loads(json.dumps({"observedMetrics": {"asynclookup_users": list(FIGURES.values())}})),
    ]
    for progress in shapes:
        found = progress_metrics(progress)
        assert found == {"users": FIGURES}, progress
    other = {"observedMetrics": {"my_own": Row(n=1), progress_key("a_b"): dict(FIGURES)}}
    assert progress_metrics(other) == {"a_b": FIGURES}  # not a lookup's: left out
    assert progress_metrics({"observedMetrics": {}}) == {}

    class Progress:  # an object with the attribute only
        observedMetrics = {"asynclookup_users": classic_row}

    assert progress_metrics(Progress()) == {"users": FIGURES}


def test_names() -> None:
    assert lookup_name("users", "redis") == "users"
    made = lookup_name(None, "redis")
    assert made.startswith("redis_") and len(made) == len("redis_") + 8
    assert lookup_name(None, "redis") != made
    for bad in ("", "9lives", "user name", "a-b", "x" * 65, 3):
        with pytest.raises(ConfigurationError, match=r"name=.*letters, digits and underscores"):
            lookup_name(bad, "redis")  # type: ignore[arg-type]
    assert progress_key("users") == "asynclookup_users"


def test_the_driver_keeps_the_most_recent_lookups_only() -> None:
    recent: Recent[str, int] = Recent(limit=3)
    for i in range(10):
        recent[f"k{i}"] = i
    assert len(recent) == 3 and "k6" not in recent and recent["k9"] == 9
    recent["k7"] = 70  # set again: the most recent
    recent["k10"] = 10
    assert "k8" not in recent and recent["k7"] == 70
    assert len(spark_metrics._LOOKUPS) <= spark_metrics.TRACKED
    assert spark_metrics._LOOKUPS.limit == spark_metrics.TRACKED


# ---------------------------------------------------------------------------------------------
# OpenTelemetry
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reader() -> Any:
    """The process's meter provider: the real SDK, read in memory (set once per process)."""
    from opentelemetry import metrics as otel
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    otel.set_meter_provider(MeterProvider(metric_readers=[reader]))
    return reader


def points(reader: Any) -> dict[tuple[str, tuple[tuple[str, Any], ...]], Any]:
    data = reader.get_metrics_data()
    found: dict[tuple[str, tuple[tuple[str, Any], ...]], Any] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    key = (metric.name, tuple(sorted(point.attributes.items())))
                    found[key] = point
    return found


def run_with_telemetry(name: str, keys: list[Any]) -> LookupMetrics:
    options = dataclasses.replace(make_options(), metrics_opentelemetry=True)
    spec = dataclasses.replace(make_spec(options), name=name)
    got: list[LookupMetrics] = []
    out = run_lookups(
        [key_batch(keys)],
        spec,
        make_config(spec),
        client_factory=lambda c: FakeClient(c, FakeStore(TABLE)),
        on_metrics=got.append,
    )
    assert sum(batch.num_rows for batch in out) == len(keys)
    return got[0]


def test_opentelemetry_counts_a_tasks_lookups(reader: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    forget_worker()  # a new process: its instruments made anew
    metrics = run_with_telemetry("users", [1, 2, 2, 500, 501])
    assert metrics.name == "users"
    found = points(reader)
    base = (("asynclookup.connector", "fake"), ("asynclookup.lookup", "users"))

    def value(metric: str, outcome: str | None = None) -> Any:
        extra = [("asynclookup.outcome", outcome)] if outcome else []
        attributes = tuple(sorted([*base, *extra]))
        return found[(metric, attributes)]

    assert value("asynclookup.rows").value == 5
    assert value("asynclookup.keys", "found").value == 2
    assert value("asynclookup.keys", "missing").value == 2
    assert ("asynclookup.keys", tuple(sorted([*base, ("asynclookup.outcome", "failed")]))) not in (
        found
    )  # nothing failed: no point
    assert value("asynclookup.requests", "success").value == metrics.requests
    duration = value("asynclookup.request.duration")
    assert duration.count == metrics.requests
    assert list(duration.explicit_bounds) == list(telemetry.DURATION_BUCKETS)
    assert 0 < duration.sum <= metrics.requests * metrics.latency_max_ms / 1000 + 1e-9

    run_with_telemetry("users", [3])  # a second task adds to the same series
    assert points(reader)[("asynclookup.rows", base)].value == 6


def test_opentelemetry_off_imports_nothing_of_it() -> None:
    code = """
import sys
from lookup_source.engine.runner import run_lookups
from tests.fakes import FakeClient, FakeStore, key_batch, make_config, make_options, make_spec
spec = make_spec(make_options())
out = list(run_lookups([key_batch([1, 2])], spec, make_config(spec),
                       client_factory=lambda c: FakeClient(c, FakeStore({1: {"name": "a"}}))))
assert sum(b.num_rows for b in out) == 2
print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_opentelemetry_missing_fails_the_task_naming_the_option(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    forget_worker()  # a new process: its instruments made anew
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # import opentelemetry fails
    with pytest.raises(OptionError, match=r"'metrics.opentelemetry'.*asynclookup\[opentelemetry\]"):
        run_with_telemetry("users", [1])


def test_an_exporter_asynclookup_does_not_set_up_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "prometheus")
    with pytest.raises(OptionError, match=r"OTEL_METRICS_EXPORTER='prometheus'.*otlp, console"):
        telemetry._exporter_from_environment()
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    assert telemetry._exporter_from_environment() is None
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://127.0.0.1:9/v1/metrics")
    exporter = telemetry._exporter_from_environment()
    assert type(exporter).__module__.startswith("opentelemetry.exporter.otlp.proto.http")


def test_a_failing_export_never_fails_the_task(
    reader: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    forget_worker()  # a new process: its instruments made anew
    exporter = current_worker().telemetry()
    assert isinstance(exporter, telemetry.Exporter)

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("collector down")

    monkeypatch.setattr(exporter, "record", broken)
    metrics = run_with_telemetry("users", [1, 2])
    assert metrics.rows == 2
    assert "reporting to OpenTelemetry failed" in caplog.text
