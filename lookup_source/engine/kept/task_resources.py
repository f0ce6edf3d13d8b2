"""What a task borrows from its worker, opened in one place and released once.

A task needs a loop and an opened client, the worker's cache of its lookup (pinned while it
runs), its hedging window, the shared tier's store, its share of a cluster budget (its
coordinator's client), the collector's raised threshold and the OpenTelemetry instruments.
:meth:`TaskResources.open` takes them all from the :class:`~.worker.Worker`, in this order,
and :meth:`TaskResources.release` hands every one of them back, once, whatever failed
between::

    resources = TaskResources.open(worker, spec, config, factory)
    try:
        engine = LookupEngine(resources.client, spec, **resources.parts())
        ...
    finally:
        resources.release(sound=True)   # the client kept for the next task when sound
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lookup_source.connector_api import ConnectorConfig, LookupClient, secret_from_env
from lookup_source.connector_api.secrets import client_redactor
from lookup_source.engine.kept.cache_layer import CacheLayer
from lookup_source.engine.kept.clients import ClientFactory, Lease
from lookup_source.engine.kept.identity import (
    IdentityKeys,
    LookupIdentity,
    client_identity,
    task_client_identities,
)
from lookup_source.engine.kept.shared_cache import SharedTier, StoreHealth
from lookup_source.engine.loop import LoopFactory, TaskLoop, loop_kind
from lookup_source.engine.metrics import LookupMetrics
from lookup_source.engine.request.budget import TaskBudget
from lookup_source.engine.request.hedge import Hedging
from lookup_source.engine.spec import EngineSpec
from lookup_source.redaction import Redactor

if TYPE_CHECKING:
    from lookup_source.engine.kept.worker import Worker

log = logging.getLogger("lookup_source")


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
    spec: EngineSpec,
    config: ConnectorConfig,
    factory: ClientFactory,
    keys: IdentityKeys | None = None,
) -> TaskIdentities:
    """The lookup's identities for one task (see :class:`TaskIdentities`; ``keys``: the
    worker's derived identity keys)."""
    answers = _answers_scope(spec)
    settings = spec.options.cache.shared
    secret = (
        secret_from_env("cache.shared.secret.env", settings.secret_env)
        if settings.url is not None and settings.secret_env
        else None
    )
    local, shared = task_client_identities(
        factory,
        config,
        keys=keys,
        scope=answers,
        shared_scope=None if settings.url is None else settings.namespace + answers,
        secret=secret,
    )
    return TaskIdentities(local, shared)


def _answers_scope(spec: EngineSpec) -> str:
    """What narrows the identities of a lookup whose answers differ from the store's own:
    ``key.equality=spark`` drops the matches of other keys, ``on.unfit-key=miss`` makes a
    key the store cannot hold a miss (empty for the defaults)."""
    keys = spec.options.keys
    if keys.equality == "store" and keys.on_unfit == "error":
        return ""
    return f"\x00keys={keys.equality}/{keys.on_unfit}"


@dataclass
class TaskResources:
    """Everything one task holds of its worker; see the module's docstring."""

    worker: Worker
    spec: EngineSpec
    identities: TaskIdentities
    loop_kind: str
    """The kind of the task's loop (option ``loop``): its plugins' clients live on it too."""
    lease: Lease
    redact: Redactor = field(default_factory=Redactor)
    """Every text of the task (an error, a message, a log line) with the lookup's secrets
    hidden: those of its client's configuration, as its connector declares them."""
    metrics: LookupMetrics = field(default_factory=lambda: LookupMetrics(tasks=1))
    cache: CacheLayer | None = None
    hedging: Hedging | None = None
    shared: SharedTier | None = None
    budget: TaskBudget | None = None
    telemetry: Any = None
    _plugins: list[Lease] = field(default_factory=list)
    _pins: list[str] = field(default_factory=list)
    _gc_held: bool = False
    _cache_budget: int = 0
    _released: bool = False

    @classmethod
    def open(
        cls,
        worker: Worker,
        spec: EngineSpec,
        config: ConnectorConfig,
        factory: ClientFactory,
        *,
        keep: bool | None = None,
        loop_factory: LoopFactory | None = None,
    ) -> TaskResources:
        """Take what a task needs from ``worker``; on a failure, hand back what was taken and
        raise."""
        options = spec.options
        identities = task_identities(spec, config, factory, worker.identity_keys)
        kind = loop_kind(options.loop, getattr(factory, "preferred_loop", "asyncio"))
        lease = worker.lease_client(
            factory,
            config,
            identity=identities.local,
            max_idle_s=options.connection_max_idle_s,
            max_age_s=options.connection_max_age_s,
            keep=keep,
            loop_kind=kind,
            loop_factory=loop_factory,
        )
        resources = cls(worker, spec, identities, kind, lease)
        try:
            resources._take(config, factory)
        except BaseException:
            resources.release(sound=False)
            raise
        return resources

    def _take(self, config: ConnectorConfig, factory: ClientFactory) -> None:
        worker, options = self.worker, self.spec.options
        self.redact = client_redactor(self.client)
        self._gc_held = worker.gc.hold(options.gc_threshold)
        self.telemetry = worker.telemetry() if options.metrics_opentelemetry else None
        self._cache_budget = int(options.cache.worker_max_mb * 2**20)
        worker.caches.hold_budget(self._cache_budget)
        self.cache = worker.kept.task_cache(
            options.cache,
            config,
            self.client,
            self.loop,
            factory,
            self.spec.value_fields,
            self.identities.local,
            self._pins,
        )
        if options.hedge.after is not None:
            self.hedging = worker.kept.hedging(self.identities.local, options.hedge, self._pins)
        self.shared = self._shared_tier()
        self.budget = self._task_budget()

    @property
    def client(self) -> LookupClient:
        return self.lease.client

    @property
    def loop(self) -> TaskLoop:
        return self.lease.loop

    def parts(self) -> dict[str, Any]:
        """The engine's parts, already built: ``LookupEngine(client, spec, **parts())``."""
        return {
            "cache": self.cache,
            "hedging": self.hedging,
            "shared": self.shared,
            "metrics": self.metrics,
            "budget": self.budget,
            "redact": self.redact,
        }

    def _shared_tier(self) -> SharedTier | None:
        """The shared cache tier's store, kept by the worker like a client, if asked."""
        settings = self.spec.options.cache.shared
        if settings.url is None:
            return None
        lease = self._plugin(settings.store_class(), settings.url)
        assert self.identities.shared is not None
        return SharedTier(
            lease.client,  # type: ignore[arg-type]
            self.identities.shared,
            self.spec.value_fields,
            self.metrics,
            ttl_s=settings.ttl_s,
            timeout_s=settings.timeout_s,
            cache_missing=settings.missing_keys,
            max_value_bytes=settings.max_value_bytes,
            health=lease.beside.setdefault("health", StoreHealth()),  # the store's, kept with it
            clocks=self.worker.clocks,
        )

    def _task_budget(self) -> TaskBudget | None:
        """This task's part of the lookup's cluster budget, if one is set: its coordinator
        kept by the worker like a client (none: the static split)."""
        settings = self.spec.options.budget
        if not settings.active:
            return None
        coordinator, warned = None, None
        if settings.url is not None:
            lease = self._plugin(settings.coordinator_class(), settings.url)
            coordinator = lease.client
            warned = lease.beside.setdefault("warned", set())  # kept with the coordinator
        name = settings.name or self.identities.local.digest("budget")[:32]
        return TaskBudget.of(
            settings,
            coordinator,  # type: ignore[arg-type]
            name,
            self.metrics,
            warned,
        )

    def _plugin(self, plugin_class: Any, url: str) -> Lease:
        """A plugin's client for ``url`` (the shared tier's store, a budget's coordinator),
        kept by the worker like the lookup's own client, on the same loop."""
        options = self.spec.options
        config = plugin_class.config_for(url)
        lease = self.worker.lease_client(
            plugin_class,
            config,
            # its identity: its URL, options, implicit inputs
            identity=client_identity(plugin_class, config, keys=self.worker.identity_keys),
            max_idle_s=options.connection_max_idle_s,
            max_age_s=options.connection_max_age_s,
            keep=self.lease.kept,
            loop_kind=self.loop_kind,
            loop=self.loop,
        )
        self._plugins.append(lease)
        return lease

    def release(self, *, sound: bool) -> None:
        """Hand everything back, once: the client kept for the next task when ``sound``
        (closed otherwise), the plugins' clients kept (a failing cache or coordinator is not
        the task's), the collector's threshold, the memory budget and the cache pins."""
        if self._released:
            return
        self._released = True
        worker = self.worker
        for lease in self._plugins:
            lease.release(reusable=True)
        self.lease.release(reusable=sound)
        if self._gc_held:
            self._gc_held = False
            worker.gc.release()
        if self._cache_budget:
            worker.caches.release_budget(self._cache_budget)
            self._cache_budget = 0
        if self._pins:
            worker.caches.unpin(self._pins)
            self._pins = []

    @property
    def released(self) -> bool:
        return self._released


__all__ = ["TaskIdentities", "TaskResources", "task_identities"]
