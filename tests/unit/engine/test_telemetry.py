"""OpenTelemetry from the executors (lookup_source.engine.telemetry): a task's metrics split into
counters by outcome and a request-duration histogram under the lookup's and connector's
attributes, flushed at once; the process's meter provider used, or one made from OpenTelemetry's
environment variables; a missing or misconfigured OpenTelemetry an error naming the option; a
failure to report never failing the lookups."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from lookup_source.engine import telemetry
from lookup_source.engine.metrics import LookupMetrics
from lookup_source.engine.telemetry import (
    CONNECTOR,
    INSTRUMENTS,
    LOOKUP,
    OUTCOME,
    Exporter,
    record,
)
from lookup_source.errors import OptionError

otel_metrics = pytest.importorskip("opentelemetry.metrics")
sdk_metrics = pytest.importorskip("opentelemetry.sdk.metrics")
sdk_export = pytest.importorskip("opentelemetry.sdk.metrics.export")


@pytest.fixture
def reader(monkeypatch: pytest.MonkeyPatch) -> Any:
    """An in-memory reader of a meter provider set as the process's (for this test only)."""
    made = sdk_export.InMemoryMetricReader()
    provider = sdk_metrics.MeterProvider(metric_readers=[made])
    monkeypatch.setattr(otel_metrics, "get_meter_provider", lambda: provider)
    yield made
    provider.shutdown()


def points(reader: Any) -> dict[str, list[Any]]:
    """The data points read, by instrument name."""
    found: dict[str, list[Any]] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found.setdefault(metric.name, []).extend(metric.data.data_points)
    return found


def task_metrics() -> LookupMetrics:
    metrics = LookupMetrics(
        rows=10,
        keys=6,
        missing_keys=2,
        failed_keys=1,
        requests=5,
        failed_requests=1,
        retries=2,
        cache_hits=3,
        cache_misses=6,
        hedges=2,
        hedges_won=1,
    )
    metrics.record_latency(0.02)
    metrics.record_latency(0.02)
    metrics.record_latency(0.3)
    return metrics


def test_an_exporter_makes_every_instrument(reader: Any) -> None:
    exporter = Exporter()
    assert set(exporter.instruments) == {spec.name for spec in INSTRUMENTS}
    kinds = {spec.kind for spec in INSTRUMENTS}
    assert kinds == {"counter", "histogram"}


def test_a_tasks_metrics_are_counted_by_outcome_under_its_attributes(reader: Any) -> None:
    exporter = Exporter()
    record(exporter, task_metrics(), lookup="users", connector="redis")
    found = points(reader)
    attributes = {LOOKUP: "users", CONNECTOR: "redis"}

    def by_outcome(name: str) -> dict[str, int]:
        values = {}
        for point in found[name]:
            assert {k: v for k, v in point.attributes.items() if k != OUTCOME} == attributes
            values[point.attributes.get(OUTCOME, "")] = point.value
        return values

    assert by_outcome("asynclookup.rows") == {"": 10}
    assert by_outcome("asynclookup.keys") == {"found": 3, "missing": 2, "failed": 1}
    assert by_outcome("asynclookup.requests") == {"success": 4, "failure": 1}
    assert by_outcome("asynclookup.retries") == {"": 2}
    assert by_outcome("asynclookup.cache.lookups") == {"hit": 3, "miss": 6}
    assert by_outcome("asynclookup.hedges") == {"won": 1, "lost": 1}
    assert "asynclookup.timeouts" not in found  # nothing to add: no series
    assert "asynclookup.shared_cache.lookups" not in found
    (histogram,) = found["asynclookup.request.duration"]
    assert histogram.count == 3 and dict(histogram.attributes) == attributes
    assert histogram.sum == pytest.approx(0.02 * 2 + 0.3, rel=0.1)


def test_an_unnamed_lookup_is_said_so(reader: Any) -> None:
    record(Exporter(), LookupMetrics(rows=1), lookup="", connector="fake")
    (point,) = points(reader)["asynclookup.rows"]
    assert point.attributes[LOOKUP] == "unnamed"


def test_a_failure_to_report_never_fails_the_lookups(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        def record(self, metrics: LookupMetrics, attributes: dict[str, str]) -> None:
            raise RuntimeError("the collector is down")

    record(Broken(), LookupMetrics(), lookup="users", connector="fake")  # type: ignore[arg-type]
    assert "reporting to OpenTelemetry failed" in caplog.text


def test_opentelemetry_missing_is_an_error_naming_the_option(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # import fails
    with pytest.raises(OptionError, match="metrics.opentelemetry.*asynclookup\\[opentelemetry\\]"):
        Exporter()


def test_without_a_provider_one_is_made_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[Any] = []
    monkeypatch.setattr(
        otel_metrics, "get_meter_provider", lambda: otel_metrics.NoOpMeterProvider()
    )
    monkeypatch.setattr(otel_metrics, "set_meter_provider", made.append)
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    exporter = Exporter()
    assert made == [exporter.provider] and isinstance(exporter.provider, sdk_metrics.MeterProvider)
    resource = exporter.provider._sdk_config.resource.attributes
    assert resource["service.name"] == "asynclookup"
    assert str(resource["service.instance.id"]).startswith("asynclookup-")
    exporter.flush()  # no reader: nothing to export, and nothing fails
    exporter.provider.shutdown()


@pytest.mark.parametrize(
    ("variable", "kind"), [("none", type(None)), ("console", sdk_export.ConsoleMetricExporter)]
)
def test_the_exporter_is_the_one_the_environment_names(
    variable: str, kind: type, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", f" {variable.upper()} ,otlp")  # the first
    assert isinstance(telemetry._exporter_from_environment(), kind)


def test_an_exporter_not_set_up_here_is_an_error_naming_the_option(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "prometheus")
    with pytest.raises(OptionError, match="OTEL_METRICS_EXPORTER='prometheus'"):
        telemetry._exporter_from_environment()


def test_otlp_over_a_protocol_not_installed_is_an_error_naming_its_package(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "grpc")
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.grpc.metric_exporter", None)
    with pytest.raises(OptionError, match="opentelemetry-exporter-otlp-proto-grpc"):
        telemetry._exporter_from_environment()
