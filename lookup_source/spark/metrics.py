"""Lookup metrics across a job: every task's :class:`LookupMetrics`, merged on the driver, and
each micro-batch's in its streaming progress.

- **Batch jobs**: :func:`lookup_metrics` of a DataFrame gives the metrics of every lookup_join
  in its plan, summed over every action run so far. On a classic SparkSession a Spark
  accumulator carries them; over Spark Connect (no Python accumulators) each task hands them
  over as rows that an observation collects.
- **Streams**: each micro-batch's progress holds an entry of ``observedMetrics`` per lookup,
  named ``asynclookup_<name>``, with numbers only (:data:`PROGRESS_FIELDS`), on classic
  sessions and over Spark Connect alike: what a ``StreamingQueryListener`` reads.

The rows that carry a task's metrics: after its output, each task adds a few rows (its last
input row again, with null value columns) whose hidden :data:`METRICS_COLUMN` holds the task's
metrics as JSON, then its latency histogram a bucket a row; an observation
(``DataFrame.observe``) aggregates them and a filter drops them, so the DataFrame the user
gets has exactly the rows and columns of the
join.

::

    enriched = lookup_join(events, "user_id", schema=..., options=..., name="users")
    enriched.write.parquet("/data/out")
    m = lookup_metrics(enriched)        # every task of every action run so far
    m.requests, m.cache_hits, m.retries, m.p99_ms
    print(m)                            # asynclookup users: ... rows, ... requests, ...
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import pyarrow as pa

from lookup_source.engine.metrics import LookupMetrics
from lookup_source.errors import ConfigurationError
from lookup_source.spark import internals
from lookup_source.spark.versions import CONNECT_METRICS

log = logging.getLogger("lookup_source")

try:
    from pyspark.accumulators import AccumulatorParam
except ImportError:  # pragma: no cover - pyspark is a dependency
    AccumulatorParam = object  # type: ignore[assignment,misc]


class MetricsAccumulatorParam(AccumulatorParam):
    """Merges the metrics of every task into the driver's accumulator."""

    def zero(self, value: LookupMetrics) -> LookupMetrics:
        return LookupMetrics()

    def addInPlace(self, value1: LookupMetrics, value2: LookupMetrics) -> LookupMetrics:
        return value1.merge(value2)


# ---------------------------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------------------------

PROGRESS_PREFIX = "asynclookup_"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
FUNCTION_ID = re.compile(r"\basynclookup_[0-9a-f]{16}\b")
"""How a lookup_join's function is named in plans (``asynclookup_`` and 16 hex digits)."""


def lookup_name(name: str | None, connector: str) -> str:
    """``name`` checked (letters, digits and underscores, at most 64, not starting with a
    digit), or one made from the connector (``redis_1a2b3c4d``) when not given."""
    if name is None:
        return f"{connector or 'lookup'}_{uuid.uuid4().hex[:8]}"
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigurationError(
            f"name={name!r}: a lookup's name is made of letters, digits and underscores (at "
            "most 64, not starting with a digit), e.g. name='users'"
        )
    return name


def progress_key(name: str) -> str:
    """The entry of a streaming query's ``observedMetrics`` that holds lookup ``name``'s
    metrics of each micro-batch."""
    return f"{PROGRESS_PREFIX}{name}"


# ---------------------------------------------------------------------------------------------
# What the driver remembers: the most recent lookups only
# ---------------------------------------------------------------------------------------------

TRACKED = 1_000
"""The lookup_joins (and registered lookup tables) whose metrics the driver can find: the most
recently built. An older one's metrics are let go, so a driver that builds jobs for months
holds no more than this."""

K = TypeVar("K")
V = TypeVar("V")


class Recent(Generic[K, V]):
    """A mapping that keeps its ``limit`` most recently set entries."""

    def __init__(self, limit: int = TRACKED) -> None:
        self.limit = limit
        self._entries: OrderedDict[K, V] = OrderedDict()

    def __setitem__(self, key: K, value: V) -> None:
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self.limit:
            self._entries.popitem(last=False)

    def __getitem__(self, key: K) -> V:
        return self._entries[key]

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K, default: V | None = None) -> V | None:
        return self._entries.get(key, default)


@dataclass
class Tracked:
    """One lookup_join as the driver knows it: its name, how its metrics reach the driver
    (an accumulator, or over Spark Connect an observation), and its strategy."""

    name: str
    choice: Any = None
    accumulator: Any = None
    observation: Any = None


_LOOKUPS: Recent[str, Tracked] = Recent()  # function id -> the lookup_join
_TABLES: Recent[str, Any] = Recent()  # registered lookup table -> its accumulator (or None)


def track(name: str, choice: Any, accumulator: Any = None) -> str:
    """A function id (unique in this driver) for lookup_join ``name``; :func:`lookup_metrics`
    finds it in the plan of any DataFrame derived from the join."""
    function_id = f"asynclookup_{uuid.uuid4().hex[:16]}"
    _LOOKUPS[function_id] = Tracked(name, choice, accumulator)
    return function_id


def new_accumulator(spark: Any, table: str | None = None) -> Any:
    """An accumulator of :class:`LookupMetrics`, or None where there is no SparkContext
    (Spark Connect); remembered under ``table``, a registered lookup table's name."""
    try:
        accumulator = spark.sparkContext.accumulator(LookupMetrics(), MetricsAccumulatorParam())
    except Exception:
        accumulator = None
    if table:  # lookup_metrics(table) reads it, or says why there is nothing to read
        _TABLES[table.lower()] = accumulator
    return accumulator


# ---------------------------------------------------------------------------------------------
# The rows that carry a task's metrics
# ---------------------------------------------------------------------------------------------

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
HEDGE_FIELDS = ("hedges", "hedges_won")
"""Added to the progress entry of a lookup with ``hedge.after.ms`` (summed)."""
SHARED_FIELDS = ("shared_hits", "shared_misses", "shared_errors")
"""Added to the progress entry of a lookup with ``cache.shared.url`` (summed)."""
"""The fields of a lookup's entry in a micro-batch's ``observedMetrics``: counters of
:class:`LookupMetrics` summed over the micro-batch's tasks, the highest ``peak_in_flight`` of
any, and request latency quantiles over all its requests (to within 10%). Zero in a
micro-batch with no rows. Each field is an aggregate Spark plans, compiles and updates for
every row of every micro-batch (about 1.5 ms a micro-batch and 0.03 core-µs a row each):
these are the figures an operator alerts on; ``lookup_metrics`` and OpenTelemetry have all."""

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


def _is_task(document: str) -> bool:
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
    return extra


def _progress_columns(extra: tuple[str, ...] = ()) -> list[Any]:
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
    columns += [F.expr(f"coalesce(sum({_figure(name)}), 0L)").alias(name) for name in extra]
    return columns


def observed(df: Any, function_id: str, extra: tuple[str, ...] = ()) -> Any:
    """``df`` (a lookup_join's mapInArrow, with :data:`METRICS_COLUMN`) observed, then without
    the metrics rows and column. A stream: under the lookup's progress key, in every
    micro-batch's progress. A batch DataFrame over Spark Connect: by an observation whose
    results add up over actions (:func:`lookup_metrics` reads it). ``extra``: the fields a
    stream's entry has beyond :data:`PROGRESS_FIELDS` (:func:`progress_fields`)."""
    from pyspark.sql import functions as F

    tracked = _LOOKUPS[function_id]
    if df.isStreaming:
        watched = df.observe(progress_key(tracked.name), *_progress_columns(extra))
    else:
        from pyspark.sql.connect.observation import Observation

        observation = Observation(function_id)
        # one string (PySpark 4.0 cannot send an array back as an observed value)
        documents = F.concat_ws("\n", F.collect_list(F.col(METRICS_COLUMN)))
        watched = df.observe(observation, documents.alias("metrics"))
        tracked.observation = internals.summed_over_actions(observation)
    return watched.filter(F.col(METRICS_COLUMN).isNull()).drop(METRICS_COLUMN)


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` (a session or a DataFrame) is a Spark Connect one."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def carries_rows(df: Any, progress: bool = True) -> bool:
    """Whether a lookup_join over ``df`` hands its metrics over in rows: a stream when its
    micro-batches report in their ``progress`` (``metrics.progress``), a batch DataFrame over
    Spark Connect (no accumulators there)."""
    if df.isStreaming and not progress:
        return False
    if is_connect(df):
        return CONNECT_METRICS.available()
    return bool(df.isStreaming)


# ---------------------------------------------------------------------------------------------
# Reading them on the driver
# ---------------------------------------------------------------------------------------------


def _from_observation(tracked: Tracked) -> LookupMetrics:
    merged = LookupMetrics()
    result = internals.observed_result(tracked.observation) if tracked.observation else {}
    for document in (result.get("metrics") or "").splitlines():
        if _is_task(document):
            merged.merge(LookupMetrics.from_json(document))
    return merged


def lookup_metrics(source: Any) -> LookupMetrics:
    """The metrics of a DataFrame returned by ``lookup_join``, or of any DataFrame derived from
    it (those of every lookup_join in its plan, merged), or of a table registered with
    ``register_lookup_table`` (by name: its table function), summed over every action run so
    far. On a classic SparkSession Spark accumulators carry them; over Spark Connect (PySpark
    4.0+), observations of the DataFrame. A stream's per micro-batch metrics are in its
    progress (``observedMetrics['asynclookup_<name>']``)."""
    if isinstance(source, str):
        return _table_metrics(source)
    if not callable(getattr(source, "explain", None)):
        raise ValueError(
            f"lookup_metrics takes a DataFrame or a lookup table's name, not "
            f"{type(source).__name__}"
        )
    ids = sorted(set(FUNCTION_ID.findall(internals.plan_text(source))))
    known = [_LOOKUPS[i] for i in ids if i in _LOOKUPS]
    if not known:
        raise ValueError(
            "this DataFrame has no lookup_join in its plan"
            if not ids
            else f"this DataFrame's lookup_join was built before the last {TRACKED:,} ones, "
            "whose metrics are the only ones the driver keeps"
        )
    connect = is_connect(source)
    if connect and source.isStreaming:
        keys = ", ".join(repr(progress_key(t.name)) for t in known)
        raise ValueError(
            "over Spark Connect, the metrics of a streaming lookup_join are in the progress of "
            f"each micro-batch: query.lastProgress['observedMetrics'][{keys}]"
        )
    merged = LookupMetrics()
    for tracked in known:
        if connect:
            merged.merge(_from_observation(tracked))
        elif tracked.accumulator is not None:
            merged.merge(tracked.accumulator.value)
        if tracked.choice is not None and not merged.strategy:
            merged.strategy, merged.strategy_reason = tracked.choice.strategy, tracked.choice.reason
    merged.name = ", ".join(dict.fromkeys(t.name for t in known))
    return merged


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
    if extra == len(HEDGE_FIELDS) + len(SHARED_FIELDS):
        names += [*HEDGE_FIELDS, *SHARED_FIELDS]
    elif extra == len(HEDGE_FIELDS):
        names += HEDGE_FIELDS
    elif extra == len(SHARED_FIELDS):
        names += SHARED_FIELDS
    return dict(zip(names, value))


def _table_metrics(table: str) -> LookupMetrics:
    if table.lower() not in _TABLES:
        raise KeyError(f"no lookup table named {table!r} was registered in this session")
    accumulator = _TABLES[table.lower()]
    if accumulator is None:
        raise ValueError(
            f"lookup table {table!r} was registered over Spark Connect, where its table "
            "function cannot report metrics (no accumulators, and its rows are your "
            "query's): lookup_join reports them over Connect"
        )
    value = accumulator.value
    assert isinstance(value, LookupMetrics)
    value.name = value.name or table
    return value


def log_metrics(source: Any) -> LookupMetrics:
    """Log the metrics of ``source`` at INFO on the ``lookup_source`` logger (one line, led by
    the lookup's name); return them."""
    metrics = lookup_metrics(source)
    log.info("%s", metrics)
    return metrics
