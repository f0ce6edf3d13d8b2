"""What a task knows of a batch's keys before asking the store (:class:`KnownAnswers`): the worker's
cache (:mod:`lookup_source.engine.kept.cache_layer`), then the shared cache tier
(:mod:`lookup_source.engine.kept.shared_cache`); and what they keep of the store's answers. Each
answer found is placed at its batch's key positions, and the output queue hears which keys have
theirs."""

from __future__ import annotations

import numpy as np

from lookup_source.engine.intake.batches import BatchEntry
from lookup_source.engine.kept.cache_layer import CacheLayer
from lookup_source.engine.kept.shared_cache import SharedTier
from lookup_source.engine.metrics import LookupMetrics
from lookup_source.engine.output.queue import OutputQueue
from lookup_source.engine.request.answers import Answer, Part


class KnownAnswers:
    """A task's cache and shared tier (either may be None, each answering in the lookup's
    value schema), with its metrics and queue."""

    def __init__(
        self,
        cache: CacheLayer | None,
        shared: SharedTier | None,
        metrics: LookupMetrics,
        queue: OutputQueue,
    ) -> None:
        self.cache = cache
        self.shared = shared
        self._metrics = metrics
        self._queue = queue

    def from_cache(self, job: BatchEntry) -> np.ndarray:
        """Answer what the cache knows; return the positions of the keys still to fetch."""
        if self.cache is None or not len(job.distinct):
            return np.arange(len(job.distinct), dtype=np.int64)
        known = self.cache.lookup(job.python_keys())
        job.receive(*known.parts)
        self._metrics.cache_hits += known.hits
        self._metrics.cache_misses += known.misses
        self._metrics.missing_keys += known.missing
        self._queue.answered_but(job, None, known.wanted)
        return known.wanted

    async def from_shared(self, job: BatchEntry, wanted: np.ndarray) -> np.ndarray:
        """Answer what the shared tier knows of the keys at ``wanted`` (also kept in the
        worker's cache); return the positions still to fetch. The batch is not complete while
        the tier is asked (the engine seals it after)."""
        if self.shared is None or not len(wanted):
            return wanted
        everything = job.python_keys()
        known = await self.shared.lookup([everything[p] for p in wanted.tolist()])
        for part in known.parts:
            job.receive(Part(wanted[part.positions], part.answer))
            if self.cache is not None:
                self.cache.store(part.answer, ttl_s=known.ttl_s)  # its time left
        self._metrics.missing_keys += known.missing
        still = wanted[known.wanted]
        self._queue.answered_but(job, wanted, still)
        return still

    def keep(self, answer: Answer) -> None:
        """Keep what the cache and the tier should know of the store's ``answer``."""
        if self.cache is not None:
            self.cache.store(answer)
        if self.shared is not None:
            self.shared.store(answer)

    async def aclose(self, *, flush: bool) -> None:
        """The tier's last writes (``flush``: unless the task failed)."""
        if self.shared is not None:
            await self.shared.aclose(flush=flush)
