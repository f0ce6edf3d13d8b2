"""The lookup engine: asyncio and Arrow, no Spark.

Split the way Flink splits its ``AsyncWaitOperator``, one job per module, in folders by the path
each serves:

- :mod:`.lookup_engine`: :class:`LookupEngine`, the conductor only (batches in, requests out,
  output when done); :mod:`.spec`: what it is told; :mod:`.runner`, :mod:`.scan`: one Spark
  task's lookups or scan; :mod:`.metrics`, :mod:`.telemetry`: a task's counters and their
  export; :mod:`.loop`, :mod:`.clock`: the event loop a task runs on, and its clocks;
- ``intake/``: a batch on its way in — its entry in the output queue and its requests, its
  distinct keys, what the caches and the shared tier already know, keys already asked;
- ``request/``: one request to the store — its slot and its limit, its pacing (rate limit,
  cluster budget), its attempts (retries, time limits, hedges) and its answer;
- ``output/``: the output — the queues that keep its order, what follows an answer
  (``on.error``, ``lookup.max-matches``), the input rows joined to their matches;
- ``kept/``: what outlives a task in a Python worker and its one owner, the worker — kept
  clients and loops, caches and hedging windows, the shared tier, the lookup's identity.

Nothing here imports pyspark.
"""

from lookup_source.engine.lookup_engine import LookupEngine
from lookup_source.engine.metrics import LookupMetrics
from lookup_source.engine.runner import LookupTask, run_lookups
from lookup_source.engine.spec import EngineSpec

__all__ = ["EngineSpec", "LookupEngine", "LookupMetrics", "LookupTask", "run_lookups"]
