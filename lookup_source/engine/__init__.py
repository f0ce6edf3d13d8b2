"""The lookup engine: asyncio and Arrow, no Spark.

Split the way Flink splits its ``AsyncWaitOperator``: the operator (:mod:`.operator`:
capacity, backpressure, batching, shared requests), the output queues (:mod:`.queue`:
ordered, unordered), the retry policy (:mod:`.retry`), one attempt under its deadline
(:mod:`.deadline`), the keys in flight (:mod:`.inflight`), the Arrow output builder shared by
lookups and scans (:mod:`.output`), the caches (:mod:`.cache`), the metrics of a task
(:mod:`.metrics`), and what runs one Spark task's lookups on its own event loop
(:mod:`.runner`, :mod:`.loop`, :mod:`.scan`). Nothing here imports pyspark.
"""

from lookup_source.engine.metrics import LookupMetrics
from lookup_source.engine.operator import EngineSpec, LookupEngine
from lookup_source.engine.runner import LookupTask, run_lookups

__all__ = ["EngineSpec", "LookupEngine", "LookupMetrics", "LookupTask", "run_lookups"]
