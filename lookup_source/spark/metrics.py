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


_NAMED: dict[str, Any] = {}


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
    """The metrics of a DataFrame returned by ``lookup_join`` (or of anything derived from it),
    or of a table registered with ``register_lookup_table`` (by name: its table function),
    summed over every action run so far."""
    if isinstance(source, str):
        accumulator = _NAMED.get(source.lower())
        if accumulator is None:
            raise KeyError(f"no lookup table named {source!r} was registered in this session")
    else:
        accumulator = getattr(source, "_asynclookup_metrics", None)
        if accumulator is None:
            raise ValueError(
                "this DataFrame was not returned by lookup_join (or metrics are not "
                "available over Spark Connect)"
            )
    value = accumulator.value
    assert isinstance(value, LookupMetrics)
    return value


def log_metrics(source: Any) -> LookupMetrics:
    """Log the metrics of ``source`` at INFO on the ``lookup_source`` logger; return them."""
    metrics = lookup_metrics(source)
    log.info("%s", metrics)
    return metrics
