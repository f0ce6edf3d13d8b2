"""Lookup metrics across a job: every task's :class:`LookupMetrics`, merged on the driver.

On a classic SparkSession a Spark accumulator carries them. Spark Connect has no Python
accumulators; there each task of a ``lookup_join`` hands its metrics over as one extra row
(a JSON column, null on every real row) that an observation (``DataFrame.observe``) collects
and a filter then drops, so the DataFrame the user gets has exactly the rows and columns of
the join. The observation's results are added up over every action, as an accumulator's are.

::

    enriched = lookup_join(events, "user_id", schema=..., options=...)
    enriched.write.parquet("/data/out")
    m = lookup_metrics(enriched)        # every task of every action run so far
    m.requests, m.cache_hits, m.retries, m.p99_ms
    print(m)                            # one line: keys, requests, hits, retries, latency...
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from lookup_source.engine.metrics import LookupMetrics
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


_NAMED: dict[str, Any] = {}  # registered lookup table -> its accumulator
_BY_FUNCTION: dict[str, Any] = {}  # name of a lookup_join's function in plans -> accumulator
_FUNCTION_NAME = re.compile(r"\basynclookup_[0-9a-f]{16}\b")


def name_lookup(accumulator: Any) -> str:
    """A name, unique in this driver, for the function of one ``lookup_join``; remembered with
    its accumulator so that :func:`lookup_metrics` finds it in a DataFrame's plan."""
    name = f"asynclookup_{uuid.uuid4().hex[:16]}"
    if accumulator is not None:
        _BY_FUNCTION[name] = accumulator
    return name


_DECISIONS: dict[str, Any] = {}  # lookup_join's name -> its strategy Choice


def decided(name: str, choice: Any) -> str:
    """``name``, the lookup_join whose strategy is ``choice`` (reported by lookup_metrics)."""
    _DECISIONS[name] = choice
    return name


def _with_strategy(metrics: LookupMetrics, names: list[str]) -> LookupMetrics:
    for name in names:
        choice = _DECISIONS.get(name)
        if choice is not None and not metrics.strategy:
            metrics.strategy, metrics.strategy_reason = choice.strategy, choice.reason
    return metrics


def new_accumulator(spark: Any, name: str | None = None) -> Any:
    """An accumulator of :class:`LookupMetrics`, or None where there is no SparkContext
    (Spark Connect)."""
    try:
        context = spark.sparkContext
    except Exception:
        if name:  # lookup_metrics(name) says why there is nothing to read
            _NAMED[name.lower()] = None
        return None
    accumulator = context.accumulator(LookupMetrics(), MetricsAccumulatorParam())
    if name:
        _NAMED[name.lower()] = accumulator
    return accumulator


METRICS_COLUMN = "__asynclookup_metrics"
"""Over Spark Connect: the hidden column that carries each task's metrics (JSON text) to the
observation; dropped before the user sees the DataFrame."""

_METRICS_FIELD = pa.field(METRICS_COLUMN, pa.string())


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` (a session or a DataFrame) is a Spark Connect one."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


class MetricsRows:
    """Over Spark Connect: a task's output with a null :data:`METRICS_COLUMN`, then one row
    that carries the task's metrics (JSON) in it, which :func:`observed` collects and drops.

    That row repeats the task's last input row (Spark refuses a null in a column declared not
    null, even in a row a filter drops) with null value columns::

        rows = MetricsRows()
        yield from rows.output(run_lookups(rows.watch(batches), ..., on_metrics=rows.finished))
    """

    def __init__(self) -> None:
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

    def output(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        schema: pa.Schema | None = None
        for batch in batches:
            schema = batch.schema
            yield batch.append_column(_METRICS_FIELD, pa.nulls(batch.num_rows, pa.string()))
        last = self._last_input
        if schema is None or last is None or self._metrics is None:  # an empty task
            return
        columns = [
            last.column(field.name) if field.name in last.schema.names else pa.nulls(1, field.type)
            for field in schema
        ]
        columns.append(pa.array([self._metrics.to_json().decode()], pa.string()))
        yield pa.RecordBatch.from_arrays(columns, schema=schema.append(_METRICS_FIELD))


class _SummedResult(dict[str, Any]):
    """An observation's result that adds up the metrics of every action, as an accumulator
    does (the Connect client updates an observation's result with each action's values)."""

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            if key == "metrics" and self.get(key):
                self[key] = f"{self[key]}\n{value}" if value else self[key]
            else:
                self[key] = value


def observed(df: Any, name: str) -> Any:
    """Over Spark Connect: ``df`` (a lookup_join's mapInArrow, with :data:`METRICS_COLUMN`)
    observed under ``name``, then without the metrics rows and column."""
    from pyspark.sql import functions as F

    # one string (PySpark 4.0 cannot send an array back as an observed value)
    metrics = F.concat_ws("\n", F.collect_list(F.col(METRICS_COLUMN))).alias("metrics")
    if df.isStreaming:  # Connect refuses an Observation on a stream; a named one is reported
        watched = df.observe(name, metrics)  # in each micro-batch's progress (observedMetrics)
    else:
        from pyspark.sql.connect.observation import Observation

        observation = Observation(name)
        watched = df.observe(observation, metrics)
        if isinstance(getattr(observation, "_result", None), dict):
            observation._result = _SummedResult()
    return watched.filter(F.col(METRICS_COLUMN).isNull()).drop(METRICS_COLUMN)


def _merged_observations(source: Any) -> LookupMetrics:
    """Over Spark Connect: the metrics that the observations of ``source``'s plan collected."""
    CONNECT_METRICS.require()
    if source.isStreaming:
        raise ValueError(
            "over Spark Connect, the metrics of a streaming lookup_join are in the progress of "
            "each micro-batch: query.lastProgress.observedMetrics['asynclookup_...'] holds a "
            "line of JSON per task (LookupMetrics.from_json reads one)"
        )
    observations = {
        name: observation
        for name, observation in getattr(source._plan, "observations", {}).items()
        if _FUNCTION_NAME.fullmatch(name)
    }
    names = sorted(set(observations) | _names_in(source._plan))
    if not names:
        raise ValueError("this DataFrame has no lookup_join in its plan")
    merged = LookupMetrics()
    for observation in observations.values():
        result = getattr(observation, "_result", None) or {}  # nothing run yet: no metrics
        for document in (result.get("metrics") or "").splitlines():
            merged.merge(LookupMetrics.from_json(document))
    return _with_strategy(merged, names)


def _names_in(plan: Any, seen: set[int] | None = None) -> set[str]:
    """The lookup_join names a Spark Connect plan holds (a broadcast join's alias among them)."""
    seen = set() if seen is None else seen
    if id(plan) in seen or not hasattr(plan, "__dict__"):
        return set()
    seen.add(id(plan))
    found: set[str] = set()
    for value in vars(plan).values():
        if isinstance(value, str):
            found.update(_FUNCTION_NAME.findall(value))
        elif type(value).__module__.startswith("pyspark.sql.connect.plan"):
            found |= _names_in(value, seen)
        elif isinstance(value, (list, tuple)):
            for item in value:
                if type(item).__module__.startswith("pyspark.sql.connect.plan"):
                    found |= _names_in(item, seen)
    return found


def lookup_metrics(source: Any) -> LookupMetrics:
    """The metrics of a DataFrame returned by ``lookup_join``, or of any DataFrame derived from
    it (those of every lookup_join in its plan, merged), or of a table registered with
    ``register_lookup_table`` (by name: its table function), summed over every action run so
    far. On a classic SparkSession Spark accumulators carry them; over Spark Connect (PySpark
    4.0+), observations of the DataFrame."""
    if isinstance(source, str):
        if source.lower() not in _NAMED:
            raise KeyError(f"no lookup table named {source!r} was registered in this session")
        accumulator = _NAMED[source.lower()]
        if accumulator is None:
            raise ValueError(
                f"lookup table {source!r} was registered over Spark Connect, where its table "
                "function cannot report metrics (no accumulators, and its rows are your "
                "query's): lookup_join reports them over Connect"
            )
        value = accumulator.value
        assert isinstance(value, LookupMetrics)
        return value
    if is_connect(source):
        return _merged_observations(source)
    plan = _analyzed_plan(source)
    names = sorted(set(_FUNCTION_NAME.findall(plan)))
    accumulators = [_BY_FUNCTION[n] for n in names if n in _BY_FUNCTION]
    if not accumulators and not any(n in _DECISIONS for n in names):
        raise ValueError("this DataFrame has no lookup_join in its plan")
    merged = LookupMetrics()
    for accumulator in accumulators:
        merged = merged.merge(accumulator.value)
    return _with_strategy(merged, names)


def _analyzed_plan(source: Any) -> str:
    java = getattr(source, "_jdf", None)
    if java is None:
        raise ValueError(
            f"lookup_metrics takes a DataFrame or a lookup table's name, not "
            f"{type(source).__name__}"
        )
    return str(java.queryExecution().analyzed().toString())


def log_metrics(source: Any) -> LookupMetrics:
    """Log the metrics of ``source`` at INFO on the ``lookup_source`` logger; return them."""
    metrics = lookup_metrics(source)
    log.info("%s", metrics)
    return metrics
