"""OpenTelemetry from the executors (``metrics.opentelemetry=true``): each task's metrics, as
counters and a request-duration histogram, through the OpenTelemetry API.

Off by default, and then nothing of OpenTelemetry is imported. On, each task adds its
:class:`~lookup_source.engine.metrics.LookupMetrics` when it ends, under the attributes
``asynclookup.lookup`` (the lookup's name) and ``asynclookup.connector``, and flushes: Spark
ends a Python worker by SIGKILL, so nothing may wait in memory for a periodic export.

Where it goes is OpenTelemetry's own configuration: a meter provider the process already has
(set by your code or by ``opentelemetry-instrument``), else — with ``opentelemetry-sdk`` on the
executors — one made here from OpenTelemetry's environment variables (``OTEL_METRICS_EXPORTER``:
``otlp``, the default, ``console`` or ``none``; ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT``; ``OTEL_EXPORTER_OTLP_METRICS_PROTOCOL`` or
``OTEL_EXPORTER_OTLP_PROTOCOL``: ``http/protobuf``, the default here, or ``grpc``;
``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``). Each Python worker is one
``service.instance.id``, so the cumulative series of different workers never collide.
"""

from __future__ import annotations

import logging
import os
import uuid
from dataclasses import dataclass
from typing import Any

from lookup_source.engine.metrics import LookupMetrics
from lookup_source.errors import OptionError

log = logging.getLogger("lookup_source")

METER_NAME = "asynclookup"
LOOKUP = "asynclookup.lookup"
CONNECTOR = "asynclookup.connector"
OUTCOME = "asynclookup.outcome"
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10)
"""The request-duration histogram's bucket bounds, in seconds (OpenTelemetry's semantic
conventions for HTTP durations)."""
FLUSH_TIMEOUT_MS = 5_000


@dataclass(frozen=True)
class Instrument:
    """One metric as exported: its name, kind, unit, outcomes and meaning."""

    name: str
    kind: str  # "counter" or "histogram"
    unit: str
    description: str
    outcomes: tuple[str, ...] = ()


INSTRUMENTS = (
    Instrument("asynclookup.rows", "counter", "{row}", "Input rows looked up."),
    Instrument(
        "asynclookup.keys",
        "counter",
        "{key}",
        "Distinct keys looked up per input batch, by outcome: found, missing (the store has "
        "none), failed (after the last attempt).",
        ("found", "missing", "failed"),
    ),
    Instrument(
        "asynclookup.requests",
        "counter",
        "{request}",
        "Requests sent to the store, retries included, by outcome: success or failure.",
        ("success", "failure"),
    ),
    Instrument("asynclookup.retries", "counter", "{retry}", "Requests sent again after a failure."),
    Instrument("asynclookup.timeouts", "counter", "{timeout}", "Requests that timed out."),
    Instrument(
        "asynclookup.cache.lookups",
        "counter",
        "{lookup}",
        "Keys looked for in the per-worker cache, by outcome: hit or miss.",
        ("hit", "miss"),
    ),
    Instrument(
        "asynclookup.hedges",
        "counter",
        "{request}",
        "Requests sent again past hedge.after.ms, by outcome: won (answered first) or lost.",
        ("won", "lost"),
    ),
    Instrument(
        "asynclookup.shared_cache.lookups",
        "counter",
        "{lookup}",
        "Keys looked for in the shared cache tier, by outcome: hit, miss, error (reads and "
        "writes that failed or timed out), or rejected (a value not believed: its tag does not "
        "match, or it is out of bounds or malformed; a miss too).",
        ("hit", "miss", "error", "rejected"),
    ),
    Instrument(
        "asynclookup.budget.waits",
        "counter",
        "{request}",
        "Requests that waited for their budget (budget.*): a lease, a request slot or cost.",
    ),
    Instrument(
        "asynclookup.budget.grants",
        "counter",
        "{call}",
        "Calls to the budget's coordinator that answered.",
    ),
    Instrument(
        "asynclookup.budget.fallbacks",
        "counter",
        "{fallback}",
        "Times a task fell back to its static share of the budget (the coordinator failed).",
    ),
    Instrument(
        "asynclookup.request.duration",
        "histogram",
        "s",
        "Duration of each request to the store, from sent to answered.",
    ),
)


def _split(metrics: LookupMetrics) -> dict[str, dict[str, int]]:
    """The counters' values of one task, by instrument and outcome ("" when it has none)."""
    found = max(0, metrics.keys - metrics.missing_keys - metrics.failed_keys)
    return {
        "asynclookup.rows": {"": metrics.rows},
        "asynclookup.keys": {
            "found": found,
            "missing": metrics.missing_keys,
            "failed": metrics.failed_keys,
        },
        "asynclookup.requests": {
            "success": max(0, metrics.requests - metrics.failed_requests),
            "failure": metrics.failed_requests,
        },
        "asynclookup.retries": {"": metrics.retries},
        "asynclookup.timeouts": {"": metrics.timeouts},
        "asynclookup.cache.lookups": {"hit": metrics.cache_hits, "miss": metrics.cache_misses},
        "asynclookup.hedges": {
            "won": metrics.hedges_won,
            "lost": metrics.hedges - metrics.hedges_won,
        },
        "asynclookup.shared_cache.lookups": {
            "hit": metrics.shared_hits,
            "miss": metrics.shared_misses,
            "error": metrics.shared_errors,
            "rejected": metrics.shared_rejected,
        },
        "asynclookup.budget.waits": {"": metrics.budget_waits},
        "asynclookup.budget.grants": {"": metrics.budget_grants},
        "asynclookup.budget.fallbacks": {"": metrics.budget_fallbacks},
    }


class Exporter:
    """This process's instruments and the provider they report to (made once per process, by
    the worker: :meth:`~lookup_source.engine.kept.worker.Worker.telemetry`); making one fails with
    an error naming the option when OpenTelemetry is missing or set up wrong."""

    def __init__(self) -> None:
        try:
            from opentelemetry import metrics as otel
        except ImportError:
            raise OptionError(
                "metrics.opentelemetry",
                "is true, but OpenTelemetry is not installed where this task runs: install "
                "asynclookup[opentelemetry] (opentelemetry-api, -sdk and the OTLP exporter) on "
                "the executors",
            ) from None
        self.provider = _configured_provider(otel)
        meter = self.provider.get_meter(METER_NAME)
        self.instruments: dict[str, Any] = {}
        for spec in INSTRUMENTS:
            if spec.kind == "counter":
                made = meter.create_counter(spec.name, unit=spec.unit, description=spec.description)
            else:
                made = _histogram(meter, spec)
            self.instruments[spec.name] = made

    def record(self, metrics: LookupMetrics, attributes: dict[str, str]) -> None:
        for name, by_outcome in _split(metrics).items():
            counter = self.instruments[name]
            for outcome, value in by_outcome.items():
                if value:
                    counter.add(value, {**attributes, OUTCOME: outcome} if outcome else attributes)
        histogram = self.instruments["asynclookup.request.duration"]
        for ms, count in metrics.latency_samples():
            for _ in range(count):
                histogram.record(ms / 1000.0, attributes)
        self.flush()

    def flush(self) -> None:
        """Export what is recorded now (the provider may be the user's: never shut down)."""
        flush = getattr(self.provider, "force_flush", None)
        if flush is not None:
            flush(timeout_millis=FLUSH_TIMEOUT_MS)


def _histogram(meter: Any, spec: Instrument) -> Any:
    try:  # the API's advice on bucket bounds (opentelemetry-api 1.23+)
        return meter.create_histogram(
            spec.name,
            unit=spec.unit,
            description=spec.description,
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        )
    except TypeError:
        return meter.create_histogram(spec.name, unit=spec.unit, description=spec.description)


def _configured_provider(otel: Any) -> Any:
    """The process's meter provider; when it has none and the SDK is installed, one made from
    OpenTelemetry's environment variables and set as the process's own."""
    provider = otel.get_meter_provider()
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
    except ImportError:
        log.warning(
            "asynclookup: metrics.opentelemetry is true, but opentelemetry-sdk is not installed "
            "here and no meter provider is set: the metrics go nowhere"
        )
        return provider
    if isinstance(provider, MeterProvider):  # set up already, by the user or an agent
        return provider
    exporter = _exporter_from_environment()
    readers = [] if exporter is None else [PeriodicExportingMetricReader(exporter)]
    resource = Resource.create({"service.instance.id": f"asynclookup-{uuid.uuid4().hex}"})
    if "OTEL_SERVICE_NAME" not in os.environ and "service.name=" not in os.environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    ):
        resource = resource.merge(Resource({"service.name": "asynclookup"}))
    made = MeterProvider(metric_readers=readers, resource=resource)
    otel.set_meter_provider(made)  # the process's own from now on (a fetch= function's too)
    return made


def _exporter_from_environment() -> Any:
    """The exporter ``OTEL_METRICS_EXPORTER`` names (otlp by default; console; none)."""
    kind = os.environ.get("OTEL_METRICS_EXPORTER", "otlp").split(",")[0].strip().lower()
    if kind == "none":
        return None
    if kind == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return ConsoleMetricExporter()
    if kind != "otlp":
        raise OptionError(
            "metrics.opentelemetry",
            f"is true, but OTEL_METRICS_EXPORTER={kind!r} is not one asynclookup sets up "
            "(otlp, console, none): set your own meter provider in the executors for it",
        )
    protocol = os.environ.get(
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
        os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
    ).strip()
    try:
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
                OTLPMetricExporter,
            )
        else:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
                OTLPMetricExporter,
            )
    except ImportError:
        package = f"opentelemetry-exporter-otlp-proto-{'grpc' if protocol == 'grpc' else 'http'}"
        raise OptionError(
            "metrics.opentelemetry",
            f"is true and OTLP over {protocol} is asked for, but {package} is not installed "
            "where this task runs",
        ) from None
    return OTLPMetricExporter()


def record(exporter: Exporter, metrics: LookupMetrics, *, lookup: str, connector: str) -> None:
    """Add one task's ``metrics`` to this process's OpenTelemetry instruments, and flush."""
    attributes = {LOOKUP: lookup or "unnamed", CONNECTOR: connector}
    try:
        exporter.record(metrics, attributes)
    except Exception:  # metrics never fail the lookups they describe
        log.warning("asynclookup: reporting to OpenTelemetry failed", exc_info=True)
