"""Lookup metrics across a job: a Spark accumulator merges every task's :class:`LookupMetrics`.

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
from typing import Any

from lookup_source.engine.metrics import LookupMetrics

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


def new_accumulator(spark: Any, name: str | None = None) -> Any:
    """An accumulator of :class:`LookupMetrics`, or None where there is no SparkContext
    (Spark Connect)."""
    try:
        context = spark.sparkContext
    except Exception:
        return None
    accumulator = context.accumulator(LookupMetrics(), MetricsAccumulatorParam())
    if name:
        _NAMED[name.lower()] = accumulator
    return accumulator


def lookup_metrics(source: Any) -> LookupMetrics:
    """The metrics of a DataFrame returned by ``lookup_join``, or of any DataFrame derived from
    it (those of every lookup_join in its plan, merged), or of a table registered with
    ``register_lookup_table`` (by name: its table function), summed over every action run so
    far. Metrics are Spark accumulators: they need a classic SparkSession, not Spark Connect."""
    if isinstance(source, str):
        accumulator = _NAMED.get(source.lower())
        if accumulator is None:
            raise KeyError(f"no lookup table named {source!r} was registered in this session")
        value = accumulator.value
        assert isinstance(value, LookupMetrics)
        return value
    plan = _analyzed_plan(source)
    names = sorted(set(_FUNCTION_NAME.findall(plan)))
    accumulators = [_BY_FUNCTION[n] for n in names if n in _BY_FUNCTION]
    if not accumulators:
        raise ValueError("this DataFrame has no lookup_join in its plan")
    merged = LookupMetrics()
    for accumulator in accumulators:
        merged = merged.merge(accumulator.value)
    return merged


def _analyzed_plan(source: Any) -> str:
    java = getattr(source, "_jdf", None)
    if java is None:
        raise ValueError(
            "lookup_metrics needs a classic SparkSession: Spark Connect has no Python "
            "accumulators, so the lookups of a Connect session are not counted"
            if type(source).__module__.startswith("pyspark.sql.connect")
            else f"lookup_metrics takes a DataFrame or a lookup table's name, not "
            f"{type(source).__name__}"
        )
    return str(java.queryExecution().analyzed().toString())


def log_metrics(source: Any) -> LookupMetrics:
    """Log the metrics of ``source`` at INFO on the ``lookup_source`` logger; return them."""
    metrics = lookup_metrics(source)
    log.info("%s", metrics)
    return metrics
