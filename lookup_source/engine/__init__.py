"""The lookup engine: asyncio and Arrow, no Spark.

Split the way Flink splits its ``AsyncWaitOperator``, one job per module:

- :mod:`.operator`: :class:`LookupEngine`, the conductor (batches in, requests out, output
  when done); :mod:`.spec`: what it is told; :mod:`.batches`: its units of work;
- :mod:`.keys`: a batch's distinct keys; :mod:`.inflight`: keys already asked, and the
  fan-out of a shared request's answer; :mod:`.cache`: the per-worker caches and the
  engine's view of them;
- :mod:`.limit`: how many requests may be in flight (fixed or adaptive);
  :mod:`.rate_limit`: requests per second; :mod:`.retry`: backoff, policy and the attempt
  loop; :mod:`.deadline`: an attempt's time limit and ``deadline.ms``;
- :mod:`.output`: all that follows an answer (``on.error``, ``lookup.max-matches``, the join
  to the input rows); :mod:`.queue`: ordered, unordered and key-ordered output;
- :mod:`.metrics`: the counters of a task; :mod:`.runner`, :mod:`.scan`: one Spark task's
  lookups or scan; :mod:`.lifetime`: the event loop (:mod:`.loop`) and the opened clients a
  Python worker keeps from task to task.

Nothing here imports pyspark.
"""

from lookup_source.engine.metrics import LookupMetrics
from lookup_source.engine.operator import LookupEngine
from lookup_source.engine.runner import LookupTask, run_lookups
from lookup_source.engine.spec import EngineSpec

__all__ = ["EngineSpec", "LookupEngine", "LookupMetrics", "LookupTask", "run_lookups"]
