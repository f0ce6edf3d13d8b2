"""Lookup metrics across a job: every task's :class:`LookupMetrics`, merged on the driver.

- **Batch jobs**: :func:`lookup_metrics` of a DataFrame gives the metrics of every lookup_join
  in its plan, summed over every action run so far. On a classic SparkSession a Spark
  accumulator carries them; over Spark Connect (no Python accumulators) each task hands them
  over as rows (:mod:`lookup_source.spark.progress`) that an observation collects.
- **Streams**: each micro-batch's progress holds an entry of ``observedMetrics`` per lookup,
  built from the same rows (:mod:`lookup_source.spark.progress`).

The driver remembers the most recent lookup_joins (:data:`TRACKED`) by a function id that
their plans carry, so any DataFrame derived from a join finds its metrics::

    enriched = lookup_join(events, "user_id", schema=..., options=..., name="users")
    enriched.write.parquet("/data/out")
    m = lookup_metrics(enriched)        # every task of every action run so far
    m.requests, m.cache_hits, m.retries, m.p99_ms
    print(m)                            # asynclookup users: ... rows, ... requests, ...
"""

from __future__ import annotations

import logging
import re
import uuid
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from lookup_source.engine.clock import monotonic
from lookup_source.engine.kept.keeper import Keeper
from lookup_source.engine.metrics import LookupMetrics
from lookup_source.errors import ConfigurationError
from lookup_source.spark import internals
from lookup_source.spark.join_markers import DECISION_LOOKUP
from lookup_source.spark.progress import (
    METRICS_COLUMN,
    is_task,
    progress_columns,
    progress_document,
    progress_key,
)
from lookup_source.spark.versions import CONNECT_METRICS, is_connect

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
    """A mapping that keeps its ``limit`` most recently set entries (on the engine's one
    :class:`~lookup_source.engine.kept.keeper.Keeper`, under its one policy)."""

    def __init__(self, limit: int = TRACKED) -> None:
        self.limit = limit
        self._kept: Keeper[tuple[K, V]] = Keeper(max_entries=limit, clock=monotonic)

    def __setitem__(self, key: K, value: V) -> None:
        self._kept.put(repr(key), (key, value))
        self._kept.evict()

    def __getitem__(self, key: K) -> V:
        kept = self._kept.get(repr(key))
        if kept is None:
            raise KeyError(key)
        return kept.value[1]

    def __contains__(self, key: object) -> bool:
        return self._kept.get(repr(key)) is not None

    def get(self, key: K, default: V | None = None) -> V | None:
        kept = self._kept.get(repr(key))
        return default if kept is None else kept.value[1]

    def __len__(self) -> int:
        return len(self._kept)


@dataclass
class Tracked:
    """One lookup_join as the driver knows it: its name, how its metrics reach the driver
    (an accumulator, or over Spark Connect an observation), and its strategy."""

    name: str
    choice: Any = None
    accumulator: Any = None
    observation: Any = None


_LOOKUPS: Recent[str, Tracked] = Recent()  # function id -> the lookup_join
# by (session, registered lookup table): each session's tables are its own
_TABLES: Recent[tuple[str, str], Any] = Recent()  # -> its accumulator (or None)
_JOIN_FUNCTIONS: Recent[tuple[str, str], str] = Recent()  # -> its SQL JOIN function


def remember_join_function(spark: Any, table: str, function: str) -> None:
    """The table function a SQL JOIN against ``spark``'s registered table ``table`` is
    rewritten into: :func:`lookup_metrics` reads the SQL extension's last decision about it."""
    _JOIN_FUNCTIONS[(internals.session_key(spark), table.lower())] = function


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
        _TABLES[(internals.session_key(spark), table.lower())] = accumulator
    return accumulator


def observed(df: Any, function_id: str, extra: tuple[str, ...] = (), form: str = "true") -> Any:
    """``df`` (a lookup_join's mapInArrow, with :data:`METRICS_COLUMN`) observed, then without
    the metrics rows and column. A stream: under the lookup's progress key, in every
    micro-batch's progress. A batch DataFrame over Spark Connect: by an observation whose
    results add up over actions (:func:`lookup_metrics` reads it). ``extra``: the fields a
    stream's entry has beyond ``PROGRESS_FIELDS`` (``progress_fields``, in
    :mod:`lookup_source.spark.progress`)."""
    from pyspark.sql import functions as F

    tracked = _LOOKUPS[function_id]
    if df.isStreaming:
        columns = progress_columns(extra) if form == "fields" else [progress_document(extra)]
        watched = df.observe(progress_key(tracked.name), *columns)
    else:
        from pyspark.sql.connect.observation import Observation

        observation = Observation(function_id)
        # one string (PySpark 4.0 cannot send an array back as an observed value)
        documents = F.concat_ws("\n", F.collect_list(F.col(METRICS_COLUMN)))
        watched = df.observe(observation, documents.alias("metrics"))
        tracked.observation = internals.summed_over_actions(observation)
    return watched.filter(F.col(METRICS_COLUMN).isNull()).drop(METRICS_COLUMN)


def carries_rows(df: Any, progress: str = "true") -> bool:
    """Whether a lookup_join over ``df`` hands its metrics over in rows: a stream when its
    micro-batches report in their ``progress`` (``metrics.progress`` not ``false``), a batch
    DataFrame over Spark Connect (no accumulators there)."""
    if df.isStreaming and progress == "false":
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
        if is_task(document):
            merged.merge(LookupMetrics.from_json(document))
    return merged


def lookup_metrics(source: Any, spark: Any = None) -> LookupMetrics:
    """The metrics of a DataFrame returned by ``lookup_join``, or of any DataFrame derived from
    it (those of every lookup_join in its plan, merged), or of a table registered with
    ``register_lookup_table`` (by name: its table function), summed over every action run so
    far. On a classic SparkSession Spark accumulators carry them; over Spark Connect (PySpark
    4.0+), observations of the DataFrame. A stream's per micro-batch metrics are in its
    progress (``observedMetrics['asynclookup_<name>']``). A table's name is looked up in
    ``spark``'s registered tables (default: the active session's): each session's are its own."""
    if isinstance(source, str):
        return _table_metrics(source, spark)
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


def _table_metrics(table: str, spark: Any = None) -> LookupMetrics:
    from pyspark.sql import SparkSession

    spark = spark if spark is not None else SparkSession.getActiveSession()
    key = (internals.session_key(spark), table.lower())
    if key not in _TABLES:
        raise KeyError(f"no lookup table named {table!r} was registered in this session")
    accumulator = _TABLES[key]
    if accumulator is None:
        raise ValueError(
            f"lookup table {table!r} was registered over Spark Connect, where its table "
            "function cannot report metrics (no accumulators, and its rows are your "
            "query's): lookup_join reports them over Connect"
        )
    value = accumulator.value
    assert isinstance(value, LookupMetrics)
    value.name = value.name or table
    decision = _sql_join_decision(spark, table)
    if decision is not None:
        value.strategy, value.strategy_reason = decision
    return value


def _sql_join_decision(spark: Any, table: str) -> tuple[str, str] | None:
    """The SQL extension's last decision in ``spark`` about a JOIN against its registered table
    ``table``: (``lookup`` or ``scan``, why), or None (no JOIN seen, or no extension)."""
    function = _JOIN_FUNCTIONS.get((internals.session_key(spark), table.lower()))
    if spark is None or function is None:
        return None
    for outcome, view, called, reason in reversed(internals.jvm_decisions(spark)):
        if called == function or view.lower() == table.lower():
            return ("lookup" if outcome == DECISION_LOOKUP else "scan"), reason
    return None


def log_metrics(source: Any) -> LookupMetrics:
    """Log the metrics of ``source`` at INFO on the ``lookup_source`` logger (one line, led by
    the lookup's name); return them."""
    metrics = lookup_metrics(source)
    log.info("%s", metrics)
    return metrics
