"""Lookup caches, one per Python worker process, shared by the tasks that reuse the worker.

- :class:`PartialCache`: LRU of at most ``cache.max-rows`` keys, entries expire
  ``cache.ttl.ms`` after they were written; misses are cached too unless
  ``cache.missing-keys=false``.
- :class:`FullCache`: the whole table, loaded through the connector's scan, answered locally,
  reloaded every ``cache.reload.ms`` in a background thread.

Caches are keyed by the connector configuration (connector, address, options, key and value
columns), so two lookup tables never share entries. Both are thread-safe.

The engine sees a cache through one small protocol, :class:`CacheLayer`: what it knows of a
batch's keys (:meth:`CacheLayer.lookup`) and what to keep of an answer (``store_*``);
:func:`task_cache` sets up the one a task's options ask for.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pyarrow as pa

from lookup_source.connector_api import ConnectorConfig, Key, LookupClient, Matches

if TYPE_CHECKING:
    from lookup_source.engine.loop import TaskLoop
    from lookup_source.options import CacheSettings

log = logging.getLogger("lookup_source")

MISSING: Any = object()
"""Cached marker of a key the store does not have."""

Clock = Callable[[], float]


@dataclass(frozen=True, eq=False)
class CachedRows:
    """A cached key's matches: rows ``start`` to ``start + count`` of an Arrow batch of value
    columns (a compact copy of the rows its answer held for cached keys, never an error)."""

    values: pa.RecordBatch
    start: int
    count: int


@dataclass(frozen=True)
class CachedError:
    """A key whose stored value is malformed (full cache): reported each time it is asked."""

    message: str


def cache_rows(
    keys: Sequence[Key], answer: Matches, found: np.ndarray, *, cache_missing: bool
) -> list[tuple[Key, Any]]:
    """What to cache from a columnar answer to ``keys``: a :class:`CachedRows` per key that
    has matches, :data:`MISSING` per key without (if ``cache_missing``); keys whose value was
    malformed are not cached."""
    index = answer.key_index
    usable = np.ones(len(index), dtype=bool)
    if answer.errors is not None and answer.errors.null_count < len(answer.errors):
        bad = answer.errors.is_valid().to_numpy(zero_copy_only=False)
        usable &= ~np.isin(index, index[bad])
    rows = np.flatnonzero(usable)
    rows = rows[np.argsort(index[rows], kind="stable")]
    items: list[tuple[Key, Any]] = []
    if len(rows):
        segment = answer.values.take(pa.array(rows))
        positions, starts, counts = np.unique(index[rows], return_index=True, return_counts=True)
        items = [
            (keys[p], CachedRows(segment, int(a), int(n)))
            for p, a, n in zip(positions.tolist(), starts.tolist(), counts.tolist())
        ]
    if cache_missing:
        items += [(keys[p], MISSING) for p in np.flatnonzero(~found).tolist()]
    return items


def cached_matches(
    hits: Sequence[tuple[int, CachedRows | CachedError]], fields: Sequence[pa.Field]
) -> Matches:
    """The matches of cache hits ``(position, entry)``, as one :class:`Matches`."""
    by_segment: dict[int, tuple[pa.RecordBatch, list[int], list[int]]] = {}
    failed: list[tuple[int, str]] = []
    for position, cached in hits:
        if isinstance(cached, CachedError):
            failed.append((position, cached.message))
            continue
        _, rows, positions = by_segment.setdefault(id(cached.values), (cached.values, [], []))
        rows.extend(range(cached.start, cached.start + cached.count))
        positions.extend([position] * cached.count)
    schema = pa.schema(list(fields))
    batches = [values.take(pa.array(rows)) for values, rows, _ in by_segment.values()]
    if failed:
        empty = pa.RecordBatch.from_pylist([], schema=schema)
        batches.append(empty.take(pa.nulls(len(failed), pa.int64())))
    table = pa.Table.from_batches(batches, schema=schema).combine_chunks()
    values = (
        table.to_batches()[0] if table.num_rows else pa.RecordBatch.from_pylist([], schema=schema)
    )
    index = np.asarray(
        [p for _, _, positions in by_segment.values() for p in positions] + [p for p, _ in failed],
        dtype=np.int64,
    )
    errors = None
    if failed:
        found = len(index) - len(failed)
        errors = pa.array([None] * found + [m for _, m in failed], type=pa.string())
    return Matches(index, values, errors)


def cache_identity(config: ConnectorConfig) -> str:
    """What makes two lookups share a cache: the same store, table and columns."""
    parts = [
        config.connector,
        config.url or "",
        repr(sorted((k, repr(v)) for k, v in config.options.items())),
        repr(config.key_columns),
        repr(config.value_columns),
        repr([str(t) for t in config.value_types]),
    ]
    return hashlib.sha256("\x00".join(parts).encode("utf-8", "surrogateescape")).hexdigest()


class PartialCache:
    """A thread-safe LRU map key -> record (or :data:`MISSING`) with a time-to-live."""

    def __init__(self, max_rows: int, ttl_s: float = 0.0, *, clock: Clock = time.monotonic):
        self.max_rows = max_rows
        self.ttl_s = ttl_s
        self._clock = clock
        self._entries: OrderedDict[Key, tuple[Any, float]] = OrderedDict()
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
                value, written = entry
                if self.ttl_s and now - written >= self.ttl_s:
                    del self._entries[key]
                    continue
                self._entries.move_to_end(key)
                found[key] = value
        return found

    def put_many(self, items: Iterable[tuple[Key, Any]]) -> None:
        now = self._clock()
        with self._lock:
            for key, value in items:
                self._entries[key] = (value, now)
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


async def load_table(
    client: LookupClient, key_fields: Sequence[pa.Field], value_fields: Sequence[pa.Field]
) -> dict[Key, Any]:
    """Read the whole table through ``client.scan_arrow()``: key -> :class:`CachedRows` (all
    its rows, in one Arrow batch for the whole table) or :class:`CachedError` (a malformed
    value, reported for the key each time it is looked up, until the next reload)."""
    from lookup_source.connector_api.keys import encode_rows, python_keys
    from lookup_source.engine.scan import scan_rows
    from lookup_source.options import ERROR_COLUMN

    chunks = []
    async for keys, matches in client.scan_arrow(0, 1):
        chunks.append(
            scan_rows(
                keys,
                matches,
                key_fields,
                value_fields,
                on_error="column",
                connector=client.name,
                address=client.config.url,
                name_keys=False,  # the engine names the key as it is asked
            )
        )
    if not chunks:
        return {}
    rows = pa.Table.from_batches(chunks).combine_chunks().to_batches()[0]
    width = len(key_fields)
    codes = encode_rows(rows.columns[:width])
    order = np.argsort(codes, kind="stable")
    order = order[codes[order] >= 0]  # a key that did not convert can never be asked
    rows = rows.take(pa.array(order))
    codes = codes[order]
    _, starts, counts = np.unique(codes, return_index=True, return_counts=True)
    keys = python_keys(rows.select(list(range(width))))
    values = rows.select([f.name for f in value_fields])
    errors = rows.column(ERROR_COLUMN).to_pylist()
    table: dict[Key, Any] = {}
    for start, count in zip(starts.tolist(), counts.tolist()):
        failure = next((e for e in errors[start : start + count] if e), None)
        table[keys[start]] = CachedError(failure) if failure else CachedRows(values, start, count)
    return table


def reload_in_background(
    cache: FullCache,
    factory: Callable[[], LookupClient],
    key_fields: Sequence[pa.Field],
    value_fields: Sequence[pa.Field],
) -> None:
    """Reload ``cache`` in a daemon thread with its own event loop and client."""
    from lookup_source.engine.loop import TaskLoop

    def run() -> None:
        with TaskLoop() as loop:
            client = factory()
            try:
                loop.run(client.open())
                cache.install(loop.run(load_table(client, key_fields, value_fields)))
            except Exception:
                log.warning(
                    "asynclookup: reloading the full cache failed; keeping the old table",
                    exc_info=True,
                )
                cache.release_reload()
            finally:
                loop.run(client.close())

    threading.Thread(target=run, name="asynclookup-cache-reload", daemon=True).start()


_CACHES: dict[tuple[str, str], Any] = {}
_CACHES_LOCK = threading.Lock()


def worker_cache(kind: str, config: ConnectorConfig, make: Callable[[], Any]) -> Any:
    """The cache of this worker process for ``config`` (created on first use)."""
    identity = (kind, cache_identity(config))
    with _CACHES_LOCK:
        cache = _CACHES.get(identity)
        if cache is None:
            cache = _CACHES[identity] = make()
        return cache


def clear_worker_caches() -> None:
    """Forget every cache of this process (for tests)."""
    with _CACHES_LOCK:
        _CACHES.clear()


# ---------------------------------------------------------------------------------------------
# What the engine sees of a cache
# ---------------------------------------------------------------------------------------------


@dataclass
class CacheAnswer:
    """What a cache knows of a batch's distinct keys: the positions still to fetch
    (``wanted``), the columnar hits (``matches``, ``key_index`` = positions), the hits in the
    record form (``record_positions``, ``records``), and the counts for the metrics."""

    wanted: np.ndarray
    matches: Matches | None = None
    record_positions: list[int] = field(default_factory=list)
    records: dict[Key, Any] = field(default_factory=dict)
    hits: int = 0
    misses: int = 0
    missing: int = 0
    """Keys the cache knows to be missing."""


class CacheLayer(Protocol):
    """A task's view of its worker's cache."""

    def lookup(self, keys: list[Key], fields: Sequence[pa.Field]) -> CacheAnswer:
        """What the cache knows of a batch's distinct ``keys``."""
        ...

    def store(self, keys: Sequence[Key], answer: Matches | Mapping[Key, Any]) -> None:
        """Keep what the store answered for ``keys`` (columnar, or the record form)."""
        ...


def _absent(value: Any) -> bool:
    return value is None or (isinstance(value, (list, tuple)) and not value)


class _Layer:
    """Answers a batch's keys from ``cache`` (anything with ``get_many``)."""

    def __init__(self, cache: Any) -> None:
        self.cache = cache

    def lookup(self, keys: list[Key], fields: Sequence[pa.Field]) -> CacheAnswer:
        everything = np.arange(len(keys), dtype=np.int64)
        if not keys:
            return CacheAnswer(everything)
        hits = self.cache.get_many(keys)
        if not hits:
            return CacheAnswer(everything, misses=len(keys))
        wanted: list[int] = []
        columnar: list[tuple[int, CachedRows | CachedError]] = []
        answer = CacheAnswer(everything)
        for position, key in enumerate(keys):
            value = hits.get(key)
            if value is None:
                wanted.append(position)
            elif value is MISSING:
                answer.missing += 1
            elif isinstance(value, (CachedRows, CachedError)):
                columnar.append((position, value))
            else:
                answer.records[key] = value
                answer.record_positions.append(position)
        if columnar:
            answer.matches = cached_matches(columnar, fields)
        answer.wanted = np.asarray(wanted, dtype=np.int64)
        answer.hits = len(keys) - len(wanted)
        answer.misses = len(wanted)
        return answer

    def store(self, keys: Sequence[Key], answer: Matches | Mapping[Key, Any]) -> None:
        """Nothing: a full cache is loaded by scans only."""


class PartialCacheLayer(_Layer):
    """A task's view of a :class:`PartialCache`: answers come from it and go into it."""

    def __init__(self, cache: PartialCache, *, cache_missing: bool) -> None:
        super().__init__(cache)
        self.cache_missing = cache_missing

    def store(self, keys: Sequence[Key], answer: Matches | Mapping[Key, Any]) -> None:
        if isinstance(answer, Matches):
            found = np.zeros(len(keys), dtype=bool)
            found[answer.key_index] = True
            self.cache.put_many(cache_rows(keys, answer, found, cache_missing=self.cache_missing))
            return
        items = []
        for key in keys:
            value = answer.get(key)
            if _absent(value):
                if self.cache_missing:
                    items.append((key, MISSING))
            elif isinstance(value, Mapping) or (
                isinstance(value, (list, tuple)) and all(isinstance(v, Mapping) for v in value)
            ):
                items.append((key, value))
        if items:
            self.cache.put_many(items)


def task_cache(
    settings: CacheSettings,
    config: ConnectorConfig,
    client: LookupClient,
    loop: TaskLoop,
    factory: Callable[[ConnectorConfig], LookupClient],
    value_fields: Sequence[pa.Field],
) -> CacheLayer | None:
    """The cache a task's settings ask for, shared with the other tasks of this worker: a full
    cache (loaded now by ``client`` if this worker has not yet, reloaded in the background when
    due), a partial one, or None."""
    if settings.mode == "full":
        full = worker_cache(
            f"full reload={settings.reload_s}",
            config,
            lambda: FullCache(settings.reload_s),
        )
        key_fields = [pa.field(n, t) for n, t in zip(config.key_columns, config.key_types)]
        with full.load_lock:
            if not full.loaded:
                full.install(loop.run(load_table(client, key_fields, value_fields)))
        if full.claim_reload():
            reload_in_background(full, lambda: factory(config), key_fields, value_fields)
        return _Layer(full)
    if settings.max_rows > 0:
        # a lookup with other cache settings gets a cache of its own, with its settings
        partial = worker_cache(
            f"partial max-rows={settings.max_rows} ttl={settings.ttl_s}",
            config,
            lambda: PartialCache(settings.max_rows, settings.ttl_s),
        )
        return PartialCacheLayer(partial, cache_missing=settings.missing_keys)
    return None
