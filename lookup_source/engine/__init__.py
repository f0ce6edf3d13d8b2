"""The lookup engine: asyncio and Arrow, no Spark.

Split the way Flink splits its ``AsyncWaitOperator``, one job per module:

- :mod:`.operator`: :class:`LookupEngine`, the conductor (batches in, requests out, output
  when done); :mod:`.spec`: what it is told; :mod:`.batches`: its units of work;
- :mod:`.keys`: a batch's distinct keys; :mod:`.inflight`: keys already asked, and the
  fan-out of a shared request's answer; :mod:`.known`: what the cache (:mod:`.cache_layer`,
  :mod:`.cache`) and the shared tier (:mod:`.shared_cache`) already know;
- :mod:`.slots`: the requests in flight under :mod:`.limit` (fixed or adaptive);
  :mod:`.executor`: the retry loop (:mod:`.retry`), with pacing (:mod:`.rate_limit`,
  :mod:`.budget`), feedback and hedging (:mod:`.hedge`) around each call, and its time limits
  (:mod:`.deadline`);
- :mod:`.emitter`: the output side — :mod:`.queue` (ordered, unordered, key-ordered; it owns
  each entry's progress) and :mod:`.output` (``on.error``, ``lookup.max-matches``, the join
  to the input rows);
- :mod:`.metrics`: the counters of a task; :mod:`.runner`, :mod:`.scan`: one Spark task's
  lookups or scan; :mod:`.worker`: all that outlives a task in a Python worker (the event loop
  of :mod:`.loop`, the kept clients of :mod:`.lifetime`, the caches, the gc hold), and how long.

Nothing here imports pyspark.
"""

from lookup_source.engine.metrics import LookupMetrics
from lookup_source.engine.operator import LookupEngine
from lookup_source.engine.runner import LookupTask, run_lookups
from lookup_source.engine.spec import EngineSpec

__all__ = ["EngineSpec", "LookupEngine", "LookupMetrics", "LookupTask", "run_lookups"]
