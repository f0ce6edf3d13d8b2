"""The caches and hedging windows a worker keeps for its tasks (:class:`KeptCaches`): made on
a task's first use by the lookup's identity and settings, pinned while a task uses them, kept
within ``cache.worker.max-mb`` together (:class:`~.cache.WorkerCaches`), a full cache loaded
once and reloaded in the background. Owned by the :class:`~.worker.Worker`."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lookup_source.connector_api import ConnectorConfig, LookupClient
from lookup_source.engine.clock import Clock
from lookup_source.engine.kept.cache import FullCache, PartialCache, WorkerCaches
from lookup_source.engine.kept.cache_layer import CacheLayer, PartialCacheLayer, ReadingLayer
from lookup_source.engine.kept.clients import ClientFactory
from lookup_source.engine.kept.identity import LookupIdentity
from lookup_source.engine.kept.table_load import load_table, reload_table
from lookup_source.engine.loop import TaskLoop
from lookup_source.engine.request.hedge import Hedging

if TYPE_CHECKING:
    from lookup_source.settings import CacheSettings, HedgeSettings


class KeptCaches:
    """A worker's caches and hedging windows, and the reloads of its full caches."""

    def __init__(self, clock: Clock) -> None:
        self.caches = WorkerCaches(clock=clock)
        self.clock = clock
        self._lock = threading.Lock()
        self._reloads: set[threading.Thread] = set()

    def _pinned(
        self, identity: LookupIdentity, kind: str, make: Callable[[], Any], pins: list[str]
    ) -> tuple[str, Any]:
        """The worker's cache (or hedging window) of the lookup ``identity`` with settings
        ``kind``, made by ``make`` on first use, pinned for the task (its key added to
        ``pins``: unpin them when the task ends); its key and itself."""
        key = identity.digest("cache", kind)
        pins.append(key)
        return key, self.caches.get(key, make, pin=True)

    def task_cache(
        self,
        settings: CacheSettings,
        config: ConnectorConfig,
        client: LookupClient,
        loop: TaskLoop,
        factory: ClientFactory,
        value_fields: Sequence[pa.Field],
        identity: LookupIdentity,
        pins: list[str],
    ) -> CacheLayer | None:
        """The cache a task's settings ask for, kept for the worker's other tasks: a full
        cache (loaded now by ``client`` if this worker has not yet, reloaded in the background
        when due), a partial one, or None. The worker's caches together keep within
        ``cache.worker.max-mb`` (the smallest of the tasks that run: the caller releases it
        with :meth:`~.cache.WorkerCaches.release_budget` when the task ends); the task's own is
        pinned (its key added to ``pins``: unpin them when the task ends)."""
        clock = self.clock
        if settings.mode == "full":
            key, full = self._pinned(
                identity,
                f"full reload={settings.reload_s}",
                lambda: FullCache(settings.reload_s, clock=clock),
                pins,
            )
            key_fields = [pa.field(n, t) for n, t in zip(config.key_columns, config.key_types)]
            with full.load_lock:
                if not full.loaded:
                    full.install(loop.run(load_table(client, key_fields, value_fields)))
                    self.caches.fit(protect=key)
            if full.claim_reload():
                self.reload(full, key, lambda: factory(config), key_fields, value_fields)
            return ReadingLayer(full, value_fields)
        if settings.max_rows > 0:
            # a lookup with other cache settings gets a cache of its own, with its settings
            kind = (
                f"partial max-rows={settings.max_rows} ttl={settings.ttl_s} "
                f"missing-keys={settings.missing_keys}"
            )
            key, partial = self._pinned(
                identity,
                kind,
                lambda: PartialCache(settings.max_rows, settings.ttl_s, clock=clock),
                pins,
            )
            return PartialCacheLayer(
                partial,
                value_fields,
                cache_missing=settings.missing_keys,
                grew=lambda: self.caches.fit(protect=key),
            )
        return None

    def hedging(
        self, identity: LookupIdentity, settings: HedgeSettings, pins: list[str]
    ) -> Hedging:
        """The worker's hedging of the lookup ``identity`` with these settings (its recent
        latencies, its budget), shared by the worker's tasks like its caches and pinned like
        them (its key added to ``pins``)."""
        kind = f"hedge after={settings.after} budget={settings.budget}"
        _, hedging = self._pinned(identity, kind, lambda: Hedging.of(settings), pins)
        return hedging

    def reload(
        self,
        cache: FullCache,
        key: str,
        factory: Callable[[], LookupClient],
        key_fields: Sequence[pa.Field],
        value_fields: Sequence[pa.Field],
    ) -> None:
        """Reload the full ``cache`` kept under ``key`` in a thread of its own (own loop, own
        client), tracked. While it runs, the old table and the new one are both in memory."""

        def run() -> None:
            try:
                reload_table(cache, factory, key_fields, value_fields)  # (never raises)
                self.caches.fit(protect=key)
            finally:
                with self._lock:
                    self._reloads.discard(threading.current_thread())

        thread = threading.Thread(target=run, name="asynclookup-cache-reload", daemon=True)
        with self._lock:
            self._reloads.add(thread)
        thread.start()

    def close(self, join_s: float) -> None:
        """Wait up to ``join_s`` for each reload that runs, then drop every cache."""
        with self._lock:
            reloads = list(self._reloads)
        for thread in reloads:
            thread.join(join_s)
        self.caches.clear()


__all__ = ["KeptCaches"]
