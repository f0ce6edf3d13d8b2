"""What the engine sees of a cache (:class:`CacheLayer`): what it knows of a batch's keys and
what to keep of an answer (the worker sets up the one a task's options ask for:
:meth:`~lookup_source.engine.kept.caches.KeptCaches.task_cache`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from lookup_source.connector_api import Key
from lookup_source.engine.kept.cache import PartialCache
from lookup_source.engine.request.answers import (
    MISSING,
    Answer,
    CachedError,
    CachedRows,
    Part,
    RecordAnswer,
    cached_answer,
)


@dataclass
class CacheAnswer:
    """What a cache knows of a batch's distinct keys: the positions still to fetch
    (``wanted``), the hits as answers placed at the batch's positions (``parts``), and the
    counts for the metrics."""

    wanted: np.ndarray
    parts: list[Part] = field(default_factory=list)
    hits: int = 0
    misses: int = 0
    missing: int = 0
    """Keys the cache knows to be missing."""
    ttl_s: float | None = None
    """How long the answers may still be kept (the least a shared-tier hit had left), or
    None for the keeping cache's own time to live."""


class CacheLayer(Protocol):
    """A task's view of its worker's cache."""

    def lookup(self, keys: list[Key]) -> CacheAnswer:
        """What the cache knows of a batch's distinct ``keys`` (answers in the lookup's value
        schema)."""
        ...

    def store(self, answer: Answer, ttl_s: float | None = None) -> None:
        """Keep what the store answered (for at most ``ttl_s``, when given)."""
        ...


def known_answer(
    keys: list[Key], known: Mapping[Key, Any], fields: Sequence[pa.Field]
) -> CacheAnswer:
    """What a cache's entries ``known`` (key -> :data:`MISSING`, :class:`CachedRows`,
    :class:`CachedError` or records; a key it does not hold left out) tell of ``keys``."""
    everything = np.arange(len(keys), dtype=np.int64)
    if not known:
        return CacheAnswer(everything, misses=len(keys))
    wanted: list[int] = []
    columnar: list[tuple[int, CachedRows | CachedError]] = []
    records: list[tuple[int, Any]] = []
    answer = CacheAnswer(everything)
    for position, key in enumerate(keys):
        value = known.get(key)
        if value is None:
            wanted.append(position)
        elif value is MISSING:
            answer.missing += 1
        elif isinstance(value, (CachedRows, CachedError)):
            columnar.append((position, value))
        else:
            records.append((position, value))
    if columnar:
        positions = np.asarray([p for p, _ in columnar], dtype=np.int64)
        found = cached_answer([(keys[p], entry) for p, entry in columnar], fields)
        answer.parts.append(Part(positions, found))
    if records:
        positions = np.asarray([p for p, _ in records], dtype=np.int64)
        asked = [keys[p] for p, _ in records]
        kept = RecordAnswer([entry for _, entry in records], asked, fields)
        answer.parts.append(Part(positions, kept))
    answer.wanted = np.asarray(wanted, dtype=np.int64)
    answer.hits = len(keys) - len(wanted)
    answer.misses = len(wanted)
    return answer


class ReadingLayer:
    """Answers a batch's keys from ``cache`` (a :class:`FullCache`, or anything with
    ``get_many``), in the value schema ``fields``; keeps nothing (a full cache is loaded by
    scans only)."""

    def __init__(self, cache: Any, fields: Sequence[pa.Field]) -> None:
        self.cache = cache
        self.fields = list(fields)

    def lookup(self, keys: list[Key]) -> CacheAnswer:
        if not keys:
            return CacheAnswer(np.arange(0, dtype=np.int64))
        return known_answer(keys, self.cache.get_many(keys), self.fields)

    def store(self, answer: Answer, ttl_s: float | None = None) -> None:
        """Nothing: a full cache is loaded by scans only."""


class PartialCacheLayer(ReadingLayer):
    """A task's view of a :class:`PartialCache`: answers come from it and go into it (then
    ``grew`` is called: the worker keeps its caches within their budget)."""

    def __init__(
        self,
        cache: PartialCache,
        fields: Sequence[pa.Field],
        *,
        cache_missing: bool,
        grew: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(cache, fields)
        self.cache_missing = cache_missing
        self.grew = grew

    def store(self, answer: Answer, ttl_s: float | None = None) -> None:
        items = answer.cache_entries(cache_missing=self.cache_missing)
        if items:
            self.cache.put_many(items, ttl_s=ttl_s)
            if self.grew is not None:
                self.grew()
