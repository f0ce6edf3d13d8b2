"""The rows that carry a task's metrics, and a micro-batch's progress entry made of them.

After its output, each task of a lookup_join adds a few rows (its last input row again, with
null value columns) whose hidden :data:`METRICS_COLUMN` holds the task's metrics as JSON, then
its latency histogram a bucket a row (:class:`MetricsRows`); an observation
(``DataFrame.observe``) aggregates them and a filter drops them, so the DataFrame the user gets
has exactly the rows and columns of the join.

In a stream, the observation is each micro-batch's entry of ``observedMetrics``, named
``asynclookup_<name>`` (:func:`progress_key`), with numbers only (:data:`PROGRESS_FIELDS`, built
by :func:`progress_columns`): what a ``StreamingQueryListener`` reads, and what
:func:`progress_metrics` reads back from a progress::

    for name, figures in progress_metrics(query.lastProgress).items():
        print(name, figures["rows"], figures["latency_p99_ms"])
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from lookup_source.engine.metrics import LookupMetrics

PROGRESS_PREFIX = "asynclookup_"


def progress_key(name: str) -> str:
    """The entry of a streaming query's ``observedMetrics`` that holds lookup ``name``'s
    metrics of each micro-batch."""
    return f"{PROGRESS_PREFIX}{name}"


METRICS_COLUMN = "__asynclookup_metrics"
"""The hidden column that carries each task's metrics to an observation; dropped before the
user sees the DataFrame."""

SUMMED = (
    "rows",
    "keys",
    "requests",
    "missing_keys",
    "cache_hits",
    "cache_misses",
    "retries",
    "timeouts",
    "failed_keys",
)
QUANTILES = {"latency_p50_ms": 0.5, "latency_p99_ms": 0.99}
PROGRESS_FIELDS = (*SUMMED, "peak_in_flight", *QUANTILES)
"""The fields of a lookup's entry in a micro-batch's ``observedMetrics``: counters of
:class:`LookupMetrics` summed over the micro-batch's tasks, the highest ``peak_in_flight`` of
any, and request latency quantiles over all its requests (to within 10%). Zero in a
micro-batch with no rows. Each field is an aggregate of Spark's observation, which costs
about 1 ms a micro-batch whatever the aggregate (docs/benchmarks.md, "Streams"): these are the
figures an operator alerts on; ``lookup_metrics`` and OpenTelemetry have all."""
HEDGE_FIELDS = ("hedges", "hedges_won")
"""Added to the progress entry of a lookup with ``hedge.after.ms`` (summed)."""
SHARED_FIELDS = ("shared_hits", "shared_misses", "shared_errors", "shared_rejected")
"""Added to the progress entry of a lookup with ``cache.shared.url`` (summed)."""
BUDGET_FIELDS = ("budget_waits", "budget_wait_ms", "budget_fallbacks")
"""Added to the progress entry of a lookup with a budget (``budget.*``; summed)."""
OPTIONAL_FIELDS = (HEDGE_FIELDS, SHARED_FIELDS, BUDGET_FIELDS)
"""The groups a progress entry may add, in their order (the sums of their lengths differ, so
an entry written as a JSON array tells which it holds by its length)."""

_METRICS_FIELD = pa.field(METRICS_COLUMN, pa.string())


def metrics_spark_field() -> Any:
    """:data:`METRICS_COLUMN` as a Spark ``StructField``: text, null on every real row (a null
    text column costs a row a bit and an offset on its way to the JVM)."""
    from pyspark.sql.types import StringType, StructField

    return StructField(METRICS_COLUMN, StringType(), True)


def carried_rows(metrics: LookupMetrics) -> list[str]:
    """A task's metrics as the text of its carried rows: the whole :class:`LookupMetrics`
    (JSON), then one row per latency bucket in use, ``{"ms": upper bound, "n": requests}``."""
    buckets = [json.dumps({"ms": ms, "n": n}) for ms, n in metrics.latency_samples()]
    return [metrics.to_json().decode(), *buckets]


def is_task(document: str) -> bool:
    """Whether a carried row holds a task's whole metrics (not one latency bucket)."""
    return '"tasks":' in document


class MetricsRows:
    """A task's output with a null :data:`METRICS_COLUMN`, then the rows that carry the task's
    metrics (:func:`carried_rows`), which an observation collects and a filter drops.

    Those rows repeat the task's last input row (Spark refuses a null in a column declared not
    null, even in a row a filter drops) with null value columns::

        rows = MetricsRows(accumulator)
        yield from rows.output(run_lookups(rows.watch(batches), ..., on_metrics=rows.finished))
    """

    def __init__(self, accumulator: Any = None) -> None:
        self._accumulator = accumulator
        self._last_input: pa.RecordBatch | None = None
        self._metrics: LookupMetrics | None = None

    def watch(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """``batches``, remembering the last input row."""
        for batch in batches:
            if batch.num_rows:
                self._last_input = batch.slice(batch.num_rows - 1, 1)
            yield batch

    def finished(self, metrics: LookupMetrics) -> None:
        self._metrics = metrics
        if self._accumulator is not None:
            self._accumulator.add(metrics)

    def output(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        schema: pa.Schema | None = None
        for batch in batches:
            schema = batch.schema
            yield batch.append_column(_METRICS_FIELD, pa.nulls(batch.num_rows, _METRICS_FIELD.type))
        last = self._last_input
        if schema is None or last is None or self._metrics is None:  # an empty task
            return
        columns = [
            last.column(field.name) if field.name in last.schema.names else pa.nulls(1, field.type)
            for field in schema
        ]
        carried = carried_rows(self._metrics)
        repeat = pa.array([0] * len(carried), pa.int32())
        columns = [column.take(repeat) for column in columns]
        columns.append(pa.array(carried, pa.string()))
        yield pa.RecordBatch.from_arrays(columns, schema=schema.append(_METRICS_FIELD))


def _figure(field: str, kind: str = "BIGINT") -> str:
    """A carried row's ``field`` (SQL); null on every real row, and cheap there."""
    return f"cast(get_json_object(`{METRICS_COLUMN}`, '$.{field}') AS {kind})"


def progress_fields(options: Any) -> tuple[str, ...]:
    """The summed fields a lookup's progress entry adds to :data:`PROGRESS_FIELDS`: those of
    the features its ``options`` use (each field costs every micro-batch a little)."""
    extra: tuple[str, ...] = ()
    if options.hedge.after is not None:
        extra += HEDGE_FIELDS
    if options.cache.shared.url is not None:
        extra += SHARED_FIELDS
    if options.budget.active:
        extra += BUDGET_FIELDS
    return extra


def progress_columns(extra: tuple[str, ...] = ()) -> list[Any]:
    """The columns of a lookup's entry in a micro-batch's progress (:data:`PROGRESS_FIELDS`).

    Each is one plain aggregate over the micro-batch's rows (null on every real row): Spark
    plans and compiles the observation again for every micro-batch, and an expression of
    higher-order functions there cost a small micro-batch a hundred milliseconds or more. The
    latency quantiles are ``percentile(ms, q, n)`` over every task's histogram buckets (one
    carried row each), the bucket where the running count of requests reaches ``q``, to within
    10% as :meth:`LookupMetrics.latency_ms`."""
    from pyspark.sql import functions as F

    columns = [F.expr(f"coalesce(sum({_figure(name)}), 0L)").alias(name) for name in SUMMED]
    peak = F.expr(f"coalesce(max({_figure('peak_in_flight')}), 0L)")
    columns.append(peak.alias("peak_in_flight"))
    for name, quantile in QUANTILES.items():
        exact = f"percentile({_figure('ms', 'DOUBLE')}, {quantile}, {_figure('n')})"
        columns.append(F.expr(f"coalesce({exact}, 0D)").alias(name))
    for name in extra:  # durations (``*_ms``) are fractional
        kind, zero = ("DOUBLE", "0D") if name.endswith("_ms") else ("BIGINT", "0L")
        columns.append(F.expr(f"coalesce(sum({_figure(name, kind)}), {zero})").alias(name))
    return columns


def progress_metrics(progress: Any) -> dict[str, dict[str, float]]:
    """Each lookup's metrics in one micro-batch's progress, by lookup name::

        {"users": {"rows": 200, "requests": 50, "failed_keys": 0, ..., "latency_p99_ms": 4.2}}

    ``progress``: ``query.lastProgress``, an entry of ``query.recentProgress``, or the
    ``progress`` of a ``StreamingQueryListener`` event, on a classic session or over Spark
    Connect (whose client hands the same numbers over in another shape). The fields are
    :data:`PROGRESS_FIELDS`; entries that are not a lookup's are left out."""
    observed = progress["observedMetrics"] if _subscriptable(progress) else None
    if observed is None:
        observed = getattr(progress, "observedMetrics", None) or {}
    found: dict[str, dict[str, float]] = {}
    for key, value in dict(observed).items():
        if isinstance(key, str) and key.startswith(PROGRESS_PREFIX):
            found[key[len(PROGRESS_PREFIX) :]] = _fields(value)
    return found


def _subscriptable(progress: Any) -> bool:
    try:
        progress["observedMetrics"]
    except (TypeError, KeyError, AttributeError):
        return False
    return True


def _fields(value: Any) -> dict[str, float]:
    """One progress entry as {field: number}, whatever form the session's client gave it."""
    if hasattr(value, "asDict"):  # a Row
        row = value.asDict()
        if set(row) == {"values", "schema"}:  # over Connect: the row's values and its schema
            names = [field["name"] for field in row["schema"]["fields"]]
            return dict(zip(names, row["values"]))
        return row
    if isinstance(value, dict):
        return dict(value)
    names = list(PROGRESS_FIELDS)  # a row written as a JSON array: its fields by its length
    extra = len(value) - len(names)
    for chosen in itertools.product((False, True), repeat=len(OPTIONAL_FIELDS)):
        groups = [g for g, used in zip(OPTIONAL_FIELDS, chosen) if used]
        if sum(map(len, groups)) == extra:
            names += [name for group in groups for name in group]
            break
    return dict(zip(names, value))
