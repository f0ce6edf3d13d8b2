"""The lookup caches, one per Python worker process, shared by the tasks that reuse the worker.

- :class:`PartialCache`: LRU of at most ``cache.max-rows`` keys, entries expire
  ``cache.ttl.ms`` after they were written; misses are cached too unless
  ``cache.missing-keys=false``.
- :class:`FullCache`: the whole table, loaded through the connector's scan
  (:mod:`.table_load`), answered locally, reloaded every ``cache.reload.ms``.

Caches are keyed by the lookup's identity (:mod:`.identity`: everything that decides its
answers, secrets included) and their settings (:func:`worker_cache`), so two lookups whose
answers could differ never share entries.
Both are thread-safe; their clock (``time.monotonic``) may be given, for tests. What the engine
sees of them is :mod:`.cache_layer`.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from lookup_source.connector_api import ConnectorConfig, Key
from lookup_source.engine.answers import MISSING
from lookup_source.engine.identity import LookupIdentity

Clock = Callable[[], float]


class PartialCache:
    """A thread-safe LRU map key -> record (or :data:`MISSING`) with a time-to-live."""

    def __init__(self, max_rows: int, ttl_s: float = 0.0, *, clock: Clock = time.monotonic):
        self.max_rows = max_rows
        self.ttl_s = ttl_s
        self._clock = clock
        self._entries: OrderedDict[Key, tuple[Any, float]] = OrderedDict()
        """key -> (value, when it expires)"""
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get_many(self, keys: Iterable[Key]) -> dict[Key, Any]:
        """The cached values of ``keys`` (a record or MISSING); absent keys are not cached."""
        now = self._clock()
        found: dict[Key, Any] = {}
        with self._lock:
            for key in keys:
                entry = self._entries.get(key)
                if entry is None:
                    continue
                value, expires = entry
                if now >= expires:
                    del self._entries[key]
                    continue
                self._entries.move_to_end(key)
                found[key] = value
        return found

    def put_many(self, items: Iterable[tuple[Key, Any]], ttl_s: float | None = None) -> None:
        """Keep ``items`` for the cache's time to live, or ``ttl_s`` when that is shorter (an
        answer that had less time left elsewhere)."""
        ttl = self.ttl_s
        if ttl_s is not None:
            ttl = min(ttl, ttl_s) if ttl else ttl_s
        expires = self._clock() + ttl if ttl else math.inf
        with self._lock:
            for key, value in items:
                self._entries[key] = (value, expires)
                self._entries.move_to_end(key)
            while len(self._entries) > self.max_rows:
                self._entries.popitem(last=False)


class FullCache:
    """The whole table in memory, loaded once per worker and reloaded in the background."""

    def __init__(self, reload_s: float, *, clock: Clock = time.monotonic) -> None:
        self.reload_s = reload_s
        self._clock = clock
        self._table: dict[Key, Any] | None = None
        self._loaded_at = 0.0
        self._lock = threading.Lock()
        self._reloading = False
        self.loads = 0
        self.load_lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._table is not None

    def get_many(self, keys: Iterable[Key]) -> dict[Key, Any]:
        table = self._table or {}
        return {key: table.get(key, MISSING) for key in keys}

    def install(self, table: dict[Key, Any]) -> None:
        with self._lock:
            self._table = table
            self._loaded_at = self._clock()
            self.loads += 1
            self._reloading = False

    def stale(self) -> bool:
        return bool(self.reload_s) and self._clock() - self._loaded_at >= self.reload_s

    def claim_reload(self) -> bool:
        """True for exactly one caller while a reload is due and none is running."""
        with self._lock:
            if self._reloading or not self.stale():
                return False
            self._reloading = True
            return True

    def release_reload(self) -> None:
        with self._lock:
            self._reloading = False


_CACHES: dict[str, Any] = {}
_CACHES_LOCK = threading.Lock()


def worker_cache(
    kind: str,
    config: ConnectorConfig,
    make: Callable[[], Any],
    identity: LookupIdentity | None = None,
) -> Any:
    """The cache of this worker process for the lookup ``config`` (its identity, if the
    caller has it already) and ``kind`` (its settings), created on first use."""
    key = (identity or LookupIdentity.of(config)).digest("cache", kind)
    with _CACHES_LOCK:
        cache = _CACHES.get(key)
        if cache is None:
            cache = _CACHES[key] = make()
        return cache


def clear_worker_caches() -> None:
    """Forget every cache of this process (for tests)."""
    with _CACHES_LOCK:
        _CACHES.clear()
