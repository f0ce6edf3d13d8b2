"""The lookup caches a Python worker keeps for its tasks (:class:`~.worker.Worker` owns them).

- :class:`PartialCache`: LRU of at most ``cache.max-rows`` keys, entries expire
  ``cache.ttl.ms`` after they were written; misses are cached too unless
  ``cache.missing-keys=false``.
- :class:`FullCache`: the whole table, loaded through the connector's scan
  (:mod:`.table_load`), answered locally, reloaded every ``cache.reload.ms``.
- :class:`WorkerCaches`: every cache (and hedging window) of the worker, by the lookup's
  identity (:mod:`.identity`: everything that decides its answers, secrets included) and
  settings, so two lookups whose answers could differ never share entries; together they hold
  at most ``cache.worker.max-mb`` (an estimate of their memory) and
  :data:`MAX_KEPT_LOOKUPS` entries, the least recently used lookups' dropped first.

All are thread-safe and read one clock, the worker's (given for tests). What the engine sees of
them is :mod:`.cache_layer`.
"""

from __future__ import annotations

import logging
import math
import sys
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from lookup_source.connector_api import Key
from lookup_source.engine.clock import SYSTEM_CLOCKS, Clock
from lookup_source.engine.kept.keeper import Keeper
from lookup_source.engine.request.answers import MISSING, CachedError, CachedRows

log = logging.getLogger("lookup_source")


MAX_KEPT_LOOKUPS = 256
"""Most caches and hedging windows a worker keeps (least recently used dropped first)."""

DEFAULT_MAX_BYTES = 1024 * 2**20
"""What a worker's caches may hold together unless ``cache.worker.max-mb`` says otherwise."""

ENTRY_BYTES = 160
"""What one cached key costs beyond its key and value (its map slot, tuples, floats)."""

SMALL_BYTES = 4096
"""What a cache-like object that does not measure itself (a hedging window) is counted as."""


def object_bytes(value: Any) -> int:
    """An estimate of the memory ``value`` holds: a key, a record, a list of records."""
    if isinstance(value, (str, bytes)):
        return sys.getsizeof(value)
    if isinstance(value, tuple | list):
        return 56 + 8 * len(value) + sum(object_bytes(item) for item in value)
    if isinstance(value, Mapping):
        return 232 + sum(object_bytes(k) + object_bytes(v) for k, v in value.items())
    return 32


def entry_bytes(key: Key, value: Any) -> int:
    """An estimate of what keeping ``key -> value`` costs, beyond the Arrow rows of a
    :class:`CachedRows` (counted per batch they belong to: :func:`segment_of`)."""
    size = ENTRY_BYTES + object_bytes(key)
    if value is MISSING:
        return size
    if isinstance(value, CachedRows):
        return size + 48
    if isinstance(value, CachedError):
        return size + 48 + len(value.message)
    return size + object_bytes(value)


def segment_of(value: Any) -> pa.RecordBatch | None:
    """The Arrow batch a cached value keeps alive (all of it, whatever rows it points to)."""
    return value.values if isinstance(value, CachedRows) else None


class PartialCache:
    """A thread-safe LRU map key -> record (or :data:`MISSING`) with a time-to-live. Its
    estimated memory counts each Arrow batch its entries point into once, whole, for as long
    as any entry points into it."""

    def __init__(
        self, max_rows: int, ttl_s: float = 0.0, *, clock: Clock = SYSTEM_CLOCKS.monotonic
    ):
        self.max_rows = max_rows
        self.ttl_s = ttl_s
        self._clock = clock
        self._entries: OrderedDict[Key, tuple[Any, float, int]] = OrderedDict()
        """key -> (value, when it expires, its estimated bytes)"""
        self._segments: dict[int, list[int]] = {}
        """id of an Arrow batch entries point into -> [its bytes, how many entries do]"""
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        """An estimate of the memory the entries hold."""
        return self._bytes

    def get_many(self, keys: Iterable[Key]) -> dict[Key, Any]:
        """The cached values of ``keys`` (a record or MISSING); absent keys are not cached."""
        now = self._clock()
        found: dict[Key, Any] = {}
        with self._lock:
            for key in keys:
                entry = self._entries.get(key)
                if entry is None:
                    continue
                value, expires, _ = entry
                if now >= expires:
                    self._forget(key)
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
                if key in self._entries:
                    self._forget(key)
                size = entry_bytes(key, value)
                self._entries[key] = (value, expires, size)
                self._bytes += size
                segment = segment_of(value)
                if segment is not None:
                    counted = self._segments.get(id(segment))
                    if counted is None:
                        counted = self._segments[id(segment)] = [segment.nbytes, 0]
                        self._bytes += counted[0]
                    counted[1] += 1
            self._trim(self.max_rows, math.inf)

    def trim(self, max_bytes: float) -> None:
        """Forget the least recently used keys until the rest hold at most ``max_bytes``."""
        with self._lock:
            self._trim(self.max_rows, max_bytes)

    def _trim(self, max_rows: int, max_bytes: float) -> None:
        while self._entries and (len(self._entries) > max_rows or self._bytes > max_bytes):
            self._forget(next(iter(self._entries)))

    def _forget(self, key: Key) -> None:
        value, _, size = self._entries.pop(key)
        self._bytes -= size
        segment = segment_of(value)
        if segment is not None:
            counted = self._segments[id(segment)]
            counted[1] -= 1
            if not counted[1]:  # no entry points into it: freed with the last
                del self._segments[id(segment)]
                self._bytes -= counted[0]


class FullCache:
    """The whole table in memory, loaded once per worker and reloaded in the background."""

    def __init__(self, reload_s: float, *, clock: Clock = SYSTEM_CLOCKS.monotonic) -> None:
        self.reload_s = reload_s
        self._clock = clock
        self._table: dict[Key, Any] | None = None
        self._loaded_at = 0.0
        self._lock = threading.Lock()
        self._reloading = False
        self.loads = 0
        self.load_lock = threading.Lock()
        self.nbytes = 0
        """An estimate of the memory the table holds."""

    @property
    def loaded(self) -> bool:
        return self._table is not None

    def get_many(self, keys: Iterable[Key]) -> dict[Key, Any]:
        table = self._table or {}
        return {key: table.get(key, MISSING) for key in keys}

    def install(self, table: dict[Key, Any]) -> None:
        segments = {}
        size = 0
        for key, value in table.items():
            size += entry_bytes(key, value)
            segment = segment_of(value)
            if segment is not None:
                segments[id(segment)] = segment.nbytes
        size += sum(segments.values())
        with self._lock:
            self._table = table
            self.nbytes = size
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


def _nbytes(kept: Any) -> int:
    return int(getattr(kept, "nbytes", SMALL_BYTES))


class WorkerCaches:
    """The caches of one worker, each under the key of its lookup and settings, kept by one
    :class:`~.keeper.Keeper` (least recently used first, pinned while tasks use them):
    together at most ``max_bytes`` (estimated) and ``max_entries``."""

    def __init__(
        self,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_entries: int = MAX_KEPT_LOOKUPS,
        clock: Clock = SYSTEM_CLOCKS.monotonic,
    ) -> None:
        self._latest_budget = max_bytes
        self._budgets: Counter[int] = Counter()
        """The budgets (``cache.worker.max-mb``) of the tasks that run now, with how many ask
        each: the smallest applies while they run."""
        self._keeper: Keeper[Any] = Keeper(max_entries=max_entries, clock=clock, size_of=_nbytes)
        self._lock = threading.Lock()
        self._warned: set[str] = set()

    def __len__(self) -> int:
        return len(self._keeper)

    @property
    def dropped(self) -> int:
        """Caches dropped to keep within the budget (for tests and logs)."""
        return self._keeper.dropped

    @property
    def max_bytes(self) -> int:
        """What the caches may hold together: the smallest budget of the tasks that run now
        (:meth:`hold_budget`), else the latest task's."""
        return min(self._budgets) if self._budgets else self._latest_budget

    @max_bytes.setter
    def max_bytes(self, value: int) -> None:
        self._latest_budget = value

    def hold_budget(self, max_bytes: int) -> None:
        """A task that asks the caches to keep within ``max_bytes`` begins; hand it back with
        :meth:`release_budget` when it ends. While tasks with different budgets run together,
        the smallest holds (no task's budget is ever passed)."""
        with self._lock:
            self._budgets[max_bytes] += 1
            self._latest_budget = max_bytes  # (fitted to as the task takes its caches)

    def release_budget(self, max_bytes: int) -> None:
        """The task that held ``max_bytes`` ended."""
        with self._lock:
            self._budgets[max_bytes] -= 1
            if self._budgets[max_bytes] <= 0:
                del self._budgets[max_bytes]

    @property
    def nbytes(self) -> int:
        """An estimate of the memory the caches hold together."""
        with self._lock:
            return self._keeper.nbytes()

    def pinned(self) -> list[str]:
        """The keys of the caches running tasks use."""
        with self._lock:
            return [key for key, kept in self._keeper.items() if kept.users]

    def get(self, key: str, make: Callable[[], Any], *, pin: bool = False) -> Any:
        """The cache kept under ``key``, made by ``make`` on first use; the most recently used.
        ``pin``: a running task uses it — never dropped until :meth:`unpin`."""
        with self._lock:
            if self._keeper.get(key) is None:
                self._keeper.put(key, make())
            kept = self._keeper.use(key, pin=pin)
            self._fit((key,))
            return kept.value

    def unpin(self, keys: Iterable[str]) -> None:
        """The task that pinned ``keys`` ended: they may be dropped again, for the caches of
        other lookups (not to fit alone: the next task of the same lookup finds them)."""
        keys = list(keys)
        with self._lock:
            for key in keys:
                kept = self._keeper.get(key)
                if kept is not None:
                    self._keeper.unpin(kept)
            self._fit(keys)

    def fit(self, protect: str | None = None) -> None:
        """Drop the least recently used caches no running task uses until the rest fit (after
        one grew: ``protect``, by default the most recently used, which, if that is not enough,
        keeps its most recent keys when it is a partial cache; a full one is kept whole, said
        once)."""
        with self._lock:
            self._fit(() if protect is None else (protect,))

    def _fit(self, protect: Sequence[str]) -> None:
        if not protect:  # the most recently used: what the last task used
            newest = self._keeper.newest()
            protect = (newest,) if newest is not None else ()
        # small ones (a hedging window) go for the count only
        total = self._keeper.evict(
            max_bytes=self.max_bytes, protect=protect, small_bytes=SMALL_BYTES
        )
        if total <= self.max_bytes:
            return
        for key in protect:
            found = self._keeper.get(key)
            kept = found.value if found is not None else None
            if isinstance(kept, PartialCache):  # too large with what runs: its oldest keys go
                total -= kept.nbytes
                kept.trim(max(0, self.max_bytes - total))
                total += kept.nbytes
            elif isinstance(kept, FullCache) and key not in self._warned:  # whole, or nothing
                self._warned.add(key)
                log.warning(
                    "asynclookup: a full cache holds about %.0f MB, more than cache.worker.max-mb "
                    "(%.0f MB) allows for every cache of this Python worker together; it is kept "
                    "while its lookup runs, other caches are dropped: raise cache.worker.max-mb "
                    "or use cache.mode=partial",
                    kept.nbytes / 2**20,
                    self.max_bytes / 2**20,
                )

    def clear(self) -> None:
        with self._lock:
            self._keeper.clear()
