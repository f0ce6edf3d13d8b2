"""Run the engine inside one Spark task, on a loop and a client that live as long as the
worker (:mod:`.worker`): opened by the first task, reused by the next ones.

Spark hands a task an iterator of Arrow batches and expects an iterator back. The loop runs
while the engine waits for room or for answers; the requests already sent stay in flight while
Spark hands the next batch over, so ``capacity`` requests are kept busy across batch boundaries.
When the task ends — on success, on failure, and when Spark stops reading early — what is still
in flight is cancelled and the client handed back: kept for the next task when it is sound,
closed otherwise.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

import lookup_source.engine.telemetry as telemetry
from lookup_source.connector_api import ConnectorConfig, secret_from_env
from lookup_source.engine.budget import TaskBudget
from lookup_source.engine.hedge import Hedging
from lookup_source.engine.identity import LookupIdentity, implicit_inputs
from lookup_source.engine.lifetime import ClientFactory, Lease
from lookup_source.engine.loop import LoopFactory, loop_kind
from lookup_source.engine.metrics import LookupMetrics
from lookup_source.engine.operator import LookupEngine
from lookup_source.engine.shared_cache import SharedTier, StoreHealth
from lookup_source.engine.spec import EngineSpec
from lookup_source.engine.worker import Worker, current_worker

log = logging.getLogger("lookup_source")


class LookupTask:
    """The engine of one task, driven synchronously, batch by batch::

    task = LookupTask(spec, config)
    try:
        for batch in batches:
            yield from task.submit(batch)
        yield from task.finish()
    except BaseException:
        task.close(failed=True)
        raise
    finally:
        task.close()
    """

    def __init__(
        self,
        spec: EngineSpec,
        config: ConnectorConfig,
        *,
        client_factory: ClientFactory | None = None,
        on_metrics: Callable[[LookupMetrics], None] | None = None,
        keep_client: bool | None = None,
        loop_factory: LoopFactory | None = None,
        worker: Worker | None = None,
    ) -> None:
        self.config = config
        self._thread = threading.get_ident()
        self._spec = spec
        self._on_metrics = on_metrics
        self._engine: LookupEngine | None = None
        self._plugin_leases: list[Lease] = []  # the shared tier's store, a budget's coordinator
        self._closed = False
        self._gc_held = False
        self._telemetry: Any = None
        self._pins: list[str] = []  # the worker's caches this task uses (never dropped meanwhile)
        self._cache_budget = 0  # the memory budget this task holds the worker's caches to
        factory = client_factory or spec.options.connector_class()
        self._worker: Worker = worker or current_worker()
        self._identities = task_identities(spec, config, factory)
        self._identity = self._identities.local
        # the task's loop kind: its plugins' clients (a shared tier's store, a coordinator)
        # are kept on the same loop as its own
        preferred = getattr(factory, "preferred_loop", "asyncio")
        self._loop_kind = loop_kind(spec.options.loop, preferred)
        self._lease: Lease = self._worker.lease_client(
            factory,
            config,
            identity=self._identity,
            max_idle_s=spec.options.connection_max_idle_s,
            max_age_s=spec.options.connection_max_age_s,
            keep=keep_client,
            loop_kind=self._loop_kind,
            loop_factory=loop_factory,
        )
        self._loop = self._lease.loop
        try:
            self._gc_held = self._worker.gc.hold(spec.options.gc_threshold)
            self._telemetry = (
                self._worker.telemetry() if spec.options.metrics_opentelemetry else None
            )
            self._cache_budget = int(spec.options.cache.worker_max_mb * 2**20)
            self._worker.caches.hold_budget(self._cache_budget)
            cache = self._worker.task_cache(
                spec.options.cache,
                config,
                self._lease.client,
                self._loop,
                factory,
                spec.value_fields,
                self._identity,
                self._pins,
            )
            hedging = self._hedging()
            metrics = LookupMetrics(tasks=1)
            self._engine = LookupEngine(
                self._lease.client,
                spec,
                cache=cache,
                hedging=hedging,
                shared=self._shared_tier(metrics),
                metrics=metrics,
                budget=self._budget(metrics),
            )
        except BaseException:
            self.close(failed=True)
            raise

    def _hedging(self) -> Hedging | None:
        """This worker's hedging of the lookup (its recent latencies, its budget), if asked."""
        settings = self._spec.options.hedge
        if settings.after is None:
            return None
        return self._worker.hedging(self._identity, settings, self._pins)

    def _shared_tier(self, metrics: LookupMetrics) -> SharedTier | None:
        """The shared cache tier's store, kept by the worker like a client, if asked."""
        settings = self._spec.options.cache.shared
        if settings.url is None:
            return None
        lease = self._kept_plugin(settings.store_class(), settings.url)
        assert self._identities.shared is not None
        return SharedTier(
            lease.client,  # type: ignore[arg-type]
            self._identities.shared,
            self._spec.value_fields,
            metrics,
            ttl_s=settings.ttl_s,
            timeout_s=settings.timeout_s,
            cache_missing=settings.missing_keys,
            max_value_bytes=settings.max_value_bytes,
            health=lease.beside.setdefault("health", StoreHealth()),  # the store's, kept with it
            clock=self._worker.clock,
        )

    def _budget(self, metrics: LookupMetrics) -> TaskBudget | None:
        """This task's part of the lookup's cluster budget, if one is set: its coordinator
        kept by the worker like a client (none: the static split)."""
        settings = self._spec.options.budget
        if not settings.active:
            return None
        coordinator = None
        if settings.url is not None:
            coordinator = self._kept_plugin(settings.coordinator_class(), settings.url).client
        name = settings.name or self._identity.digest("budget")[:32]
        return TaskBudget.of(settings, coordinator, name, metrics)  # type: ignore[arg-type]

    def _kept_plugin(self, plugin_class: Any, url: str) -> Lease:
        """A plugin's client for ``url`` (the shared tier's store, a budget's coordinator),
        kept by the worker like the lookup's own client, handed back when the task closes."""
        options = self._spec.options
        config = plugin_class.config_for(url)
        lease = self._worker.lease_client(
            plugin_class,
            config,  # its identity: its URL, options and what its library reads on its own
            max_idle_s=options.connection_max_idle_s,
            max_age_s=options.connection_max_age_s,
            keep=self._lease.kept,
            loop_kind=self._loop_kind,
            loop=self._loop,
        )
        self._plugin_leases.append(lease)
        return lease

    @property
    def metrics(self) -> LookupMetrics | None:
        return self._engine.metrics if self._engine is not None else None

    def submit(self, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        """Look up ``batch``; the output that is ready, made batch by batch as it is read."""
        assert self._engine is not None
        ready = self._loop.run(self._engine.submit(batch))
        return (out for output in ready for out in output)

    def finish(self) -> Iterator[pa.RecordBatch]:
        """The output of what is still in flight, as it becomes ready."""
        assert self._engine is not None
        while True:
            ready, done = self._loop.run(self._engine.drain())
            for output in ready:
                yield from output
            if done:
                return

    def close(self, *, failed: bool = False) -> None:
        """Cancel what is in flight and hand the client back: kept for the next task unless
        the task ``failed`` or left a request behind. Safe to call twice. Called from another
        thread than the task's (an abandoned task's generator collected elsewhere), on the
        worker's loop: done by the task's thread when it next asks for its loop (that loop
        may be running there now)."""
        if self._closed:
            return
        if threading.get_ident() != self._thread and self._lease.shares_loop:
            self._worker.defer(self._thread, lambda: self._close(failed))
            return
        self._close(failed)

    def _close(self, failed: bool) -> None:
        if self._closed:
            return
        self._closed = True
        sound = not failed
        try:
            if self._engine is not None:
                sound = self._loop.run(self._engine.aclose()) and sound
        except Exception:  # never mask the task's own error with a failure to clean up
            sound = False
            log.warning(
                "asynclookup: stopping the %s lookups failed", self.config.connector, exc_info=True
            )
        finally:
            for lease in self._plugin_leases:  # a failing cache or coordinator is not the task's
                lease.release(reusable=True)
            self._lease.release(reusable=sound)
            if self._gc_held:
                self._gc_held = False
                self._worker.gc.release()
            if self._cache_budget:
                self._worker.caches.release_budget(self._cache_budget)
                self._cache_budget = 0
            if self._pins:
                self._worker.caches.unpin(self._pins)
                self._pins = []
        if self._engine is not None:
            metrics = self._engine.metrics
            metrics.peak_rss_mb = _peak_rss_mb()
            metrics.name = self._spec.name
            if self._on_metrics is not None:
                self._on_metrics(metrics)
            if self._telemetry is not None:
                telemetry.record(
                    self._telemetry,
                    metrics,
                    lookup=self._spec.name,
                    connector=self.config.connector,
                )
            log.debug("asynclookup task metrics: %s", metrics)


@dataclass(frozen=True)
class TaskIdentities:
    """A lookup's identities, computed once per task, in one place (:func:`task_identities`).

    ``local`` keys what the worker keeps for this job's tasks — the kept client, the caches,
    the hedging window — and the budget's default name: the connector's configuration, what
    its library reads on its own, and a ``fetch=`` function by its token (``function.id``, one
    per job: two function objects never share what a worker keeps, and a function whose state
    changes as it runs keeps its worker's cache and its budget's name). ``shared`` names the
    shared tier's keys, which serve several jobs: there the function is known by its state, with
    the tier's secret and namespace (None without a tier)."""

    local: LookupIdentity
    shared: LookupIdentity | None


def task_identities(
    spec: EngineSpec, config: ConnectorConfig, factory: ClientFactory
) -> TaskIdentities:
    """The lookup's identities for one task (see :class:`TaskIdentities`)."""
    implicit = implicit_inputs(factory, config)
    local = LookupIdentity.of(config, implicit=implicit)
    settings = spec.options.cache.shared
    if settings.url is None:
        return TaskIdentities(local, None)
    secret = (
        secret_from_env("cache.shared.secret.env", settings.secret_env)
        if settings.secret_env
        else None
    )
    shared = LookupIdentity.of(
        config,
        function=getattr(factory, "function", None),
        secret=secret,
        scope=settings.namespace,
        implicit=implicit,
    )
    return TaskIdentities(local, shared)


def _peak_rss_mb() -> float:
    """Peak resident memory of this worker process so far (Linux reports KiB)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Windows
        return 0.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def run_lookups(
    batches: Iterable[pa.RecordBatch],
    spec: EngineSpec,
    config: ConnectorConfig,
    *,
    client_factory: ClientFactory | None = None,
    on_metrics: Callable[[LookupMetrics], None] | None = None,
    keep_client: bool | None = None,
    loop_factory: LoopFactory | None = None,
    worker: Worker | None = None,
) -> Iterator[pa.RecordBatch]:
    """Look up the keys of ``batches``; yield them with the value columns appended.

    ``keep_client``: whether the loop and the client outlive the task (:mod:`.lifetime`); by
    default, when Spark reuses this worker. ``loop_factory``: the task's own event loop, and so
    the engine's clock (tests give :class:`~lookup_source.testing.clock.VirtualTimeLoop`).
    ``worker``: what outlives the task (this process's by default; tests give one on virtual
    time)."""
    task = LookupTask(
        spec,
        config,
        client_factory=client_factory,
        on_metrics=on_metrics,
        keep_client=keep_client,
        loop_factory=loop_factory,
        worker=worker,
    )
    failed = True
    try:
        for batch in batches:
            yield from task.submit(batch)
        yield from task.finish()
        failed = False
    except GeneratorExit:  # Spark stopped reading: not a failure of the client
        failed = False
        raise
    finally:
        task.close(failed=failed)
