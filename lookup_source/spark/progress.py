"""The rows that carry a task's metrics, and a micro-batch's progress entry made of them.

After its output, each task of a lookup_join adds a few rows (its last input row again, with
null value columns) whose hidden :data:`METRICS_COLUMN` holds the task's metrics as JSON, then
its latency histogram a bucket a row (:class:`MetricsRows`); an observation
(``DataFrame.observe``) aggregates them and a filter drops them, so the DataFrame the user gets
has exactly the rows and columns of the join.

In a stream, the observation is each micro-batch's entry of ``observedMetrics``, named
``asynclookup_<name>`` (:func:`progress_key`), in one of two forms (``metrics.progress``):

- ``true`` (the default): one text field, ``tasks``, a JSON list of each task's metrics
  (:func:`progress_document`): one aggregate, the cheapest entry Spark can keep;
- ``fields``: the numbers themselves (:data:`PROGRESS_FIELDS`, built by
  :func:`progress_columns`), an aggregate each, which Spark plans anew every micro-batch.

:func:`progress_metrics` reads either back from a progress, as the same numbers::

    for name, figures in progress_metrics(query.lastProgress).items():
        print(name, figures["rows"], figures["latency_p99_ms"])
"""

from __future__ import annotations

import itertools
import json
import math
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


def carried_rows(metrics: LookupMetrics, buckets: bool = True) -> list[str]:
    """A task's metrics as the text of its carried rows: the whole :class:`LookupMetrics`
    (JSON), then (``buckets``: for an entry of named fields, whose latency quantiles Spark
    computes) one row per latency bucket in use, ``{"ms": upper bound, "n": requests}``."""
    if not buckets:
        return [metrics.to_json().decode()]
    samples = [json.dumps({"ms": ms, "n": n}) for ms, n in metrics.latency_samples()]
    return [metrics.to_json().decode(), *samples]


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

    def __init__(self, accumulator: Any = None, buckets: bool = True) -> None:
        self._accumulator = accumulator
        self._buckets = buckets
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
        carried = carried_rows(self._metrics, self._buckets)
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


TASKS_FIELD = "tasks"
"""The one field of a progress entry of the default form: a JSON list, its first element the
entry's field names (``{"fields": [...]}``), then each task's metrics."""


def progress_document(extra: tuple[str, ...] = ()) -> Any:
    """The default progress entry's one column: every task's metrics, as a JSON list — one
    aggregate (``collect_list``), whatever the number of fields. :func:`progress_metrics`
    decodes it into the numbers :func:`progress_columns` would have given."""
    from pyspark.sql import functions as F

    header = json.dumps({"fields": [*PROGRESS_FIELDS, *extra]}, separators=(",", ":"))
    documents = F.concat_ws(",", F.lit(header), F.collect_list(F.col(METRICS_COLUMN)))
    return F.concat(F.lit("["), documents, F.lit("]")).alias(TASKS_FIELD)


def decode_tasks(text: str) -> dict[str, float]:
    """A default progress entry's ``tasks`` text as :data:`PROGRESS_FIELDS` (and its extra
    fields): what the named-field entry holds for the same micro-batch — counters summed over
    the tasks, the highest peak in flight, and latency quantiles computed as Spark's
    ``percentile(ms, q, n)`` over every task's histogram buckets."""
    documents = json.loads(text)
    fields = list(PROGRESS_FIELDS)
    tasks: list[LookupMetrics] = []
    for document in documents:
        if isinstance(document, dict) and "fields" in document and "tasks" not in document:
            fields = [str(name) for name in document["fields"]]
        elif isinstance(document, dict) and "tasks" in document:
            tasks.append(LookupMetrics.from_json(json.dumps(document)))
    figures: dict[str, float] = {}
    samples = [sample for task in tasks for sample in task.latency_samples()]
    for name in fields:
        if name in QUANTILES:
            figures[name] = weighted_percentile(samples, QUANTILES[name])
        elif name == "peak_in_flight":
            figures[name] = max((task.peak_in_flight for task in tasks), default=0)
        elif name.endswith("_ms"):
            figures[name] = float(sum(float(getattr(task, name, 0) or 0) for task in tasks))
        else:
            figures[name] = sum(int(getattr(task, name, 0) or 0) for task in tasks)
    return figures


def weighted_percentile(samples: list[tuple[float, int]], quantile: float) -> float:
    """Spark's ``percentile(value, quantile, frequency)`` over (value, frequency) pairs: the
    value at position ``quantile x (count - 1)`` of the values repeated by their frequency,
    interpolated between its two neighbours; 0 for no sample (``coalesce(..., 0D)``)."""
    counts: dict[float, int] = {}
    for value, frequency in samples:
        if frequency > 0:
            counts[value] = counts.get(value, 0) + frequency
    total = sum(counts.values())
    if not total:
        return 0.0
    ordered = sorted(counts.items())
    position = quantile * (total - 1)
    lower, higher = math.floor(position), math.ceil(position)

    def at(index: int) -> float:
        seen = 0
        for value, frequency in ordered:
            seen += frequency
            if index < seen:
                return value
        return ordered[-1][0]

    low, high = at(lower), at(higher)
    if lower == higher:
        return low
    return (higher - position) * low + (position - lower) * high


def progress_metrics(progress: Any) -> dict[str, dict[str, float]]:
    """Each lookup's metrics in one micro-batch's progress, by lookup name::

        {"users": {"rows": 200, "requests": 50, "failed_keys": 0, ..., "latency_p99_ms": 4.2}}

    ``progress``: ``query.lastProgress``, an entry of ``query.recentProgress``, or the
    ``progress`` of a ``StreamingQueryListener`` event, on a classic session or over Spark
    Connect (whose client hands the same numbers over in another shape). The fields are
    :data:`PROGRESS_FIELDS` (and those of the features the lookup uses), whichever form the
    entry has (``metrics.progress``: its one text field is decoded); entries that are not a
    lookup's are left out."""
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
    entry = _entry(value)
    text = entry.get(TASKS_FIELD) if len(entry) == 1 else None
    return decode_tasks(text) if isinstance(text, str) else entry


def _entry(value: Any) -> dict[str, Any]:
    if hasattr(value, "asDict"):  # a Row
        row = value.asDict()
        if set(row) == {"values", "schema"}:  # over Connect: the row's values and its schema
            names = [field["name"] for field in row["schema"]["fields"]]
            return dict(zip(names, row["values"]))
        return dict(row)
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, (list, tuple)) and len(value) == 1 and isinstance(value[0], str):
        return {TASKS_FIELD: value[0]}  # a one-field row written as a JSON array
    names = list(PROGRESS_FIELDS)  # a row written as a JSON array: its fields by its length
    extra = len(value) - len(names)
    for chosen in itertools.product((False, True), repeat=len(OPTIONAL_FIELDS)):
        groups = [g for g, used in zip(OPTIONAL_FIELDS, chosen) if used]
        if sum(map(len, groups)) == extra:
            names += [name for group in groups for name in group]
            break
    return dict(zip(names, value))
