"""Everything that outlives a task in a Python worker, and its one owner: :class:`Worker`.

Spark reuses a Python worker for task after task (``spark.python.worker.reuse``, on by default;
such a worker has ``SPARK_REUSE_WORKER=1`` in its environment). What a task leaves there for
the next ones is kept by the process's :class:`Worker` (:func:`current_worker`), and only there.
This is the one place that says what lives how long; the clients, the caches and hedging
windows and the identity keys are each held by a :class:`~.keeper.Keeper`, under its one
eviction policy:

- **the event loops**: one per thread (asyncio loops are per thread) and kind (option
  ``loop``: asyncio's, uvloop's), until the thread ends or :meth:`Worker.close`;
- **opened clients** (:mod:`.clients`): per thread and configuration, at most
  :data:`~.clients.MAX_KEPT_CLIENTS` (the least recently used one no task holds is closed;
  when every kept one is in use, a task gets a client of its own, closed when it ends); closed
  once idle ``connection.max-idle.ms`` — by the worker's sweeper, every :data:`SWEEP_EVERY_S`,
  even if no task comes —, replaced once ``connection.max-age.ms`` old, closed when a task
  fails with it or the thread ends;
- **caches and hedging windows** (:class:`~.cache.WorkerCaches`): per process, by the lookup's
  identity and settings, all of them together within ``cache.worker.max-mb`` (estimated) and
  :data:`~.cache.MAX_KEPT_LOOKUPS`, the least recently used lookups' dropped first;
- **full-cache reloads**: a thread each, tracked; :meth:`Worker.close` waits for them;
- **the collector's threshold** (:mod:`.gc_tuning`): raised while any task holds it;
- **the OpenTelemetry exporter**: per process, made by the first task that asks;
- **the shared tier's health** (:class:`~.shared_cache.StoreHealth`): per kept store client,
  beside it (:attr:`~.clients.Lease.beside`), dropped with it;
- **what stores said of their whole tables** (:mod:`.table_facts`, a SQL ``NOT IN``'s): per
  lookup and run (a Spark stage), the most recent runs only.

Every one of them reads the worker's one clock (:attr:`Worker.clock`; tests give a virtual
one). Spark ends a worker with ``os._exit`` or SIGKILL: nothing here runs then, and the
sockets close with the process. A forked child makes a :class:`Worker` of its own and never
touches its parent's clients (they share their sockets with the parent). Without worker reuse,
outside Spark, with ``connection.max-idle.ms=0``, for a connector class that sets
``reusable = False``, or for a client factory that cannot be told apart from another
(:func:`~.clients.factory_identity`), each task has a loop and a client of its own, closed
when it ends::

    worker = current_worker()
    lease = worker.lease_client(RedisLookupClient, config, identity=identity, max_idle_s=120.0)
    try:
        lease.loop.run(lease.client.lookup_arrow(keys))
    finally:
        lease.release(reusable=True)     # kept for the next task (closed when not reusable)
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lookup_source.connector_api import ConnectorConfig
from lookup_source.engine.clock import SYSTEM_CLOCKS, Clocks
from lookup_source.engine.kept.caches import KeptCaches
from lookup_source.engine.kept.clients import (
    ClientFactory,
    Lease,
    WorkerClients,
    client_key,
    factory_identity,
    task_lease,
    worker_reuse,
)
from lookup_source.engine.kept.gc_tuning import GcHold
from lookup_source.engine.kept.identity import IdentityKeys, LookupIdentity
from lookup_source.engine.kept.table_facts import KeptTableFacts
from lookup_source.engine.loop import LoopFactory, TaskLoop, loop_factory_of

if TYPE_CHECKING:
    pass

log = logging.getLogger("lookup_source")


SWEEP_EVERY_S = 1.0
"""How often the worker looks for kept clients idle past their limit."""

SWEEP_JOIN_S = 5.0
"""How long :meth:`Worker.close` waits for a sweep that is running (closing idle clients)."""

RELOAD_JOIN_S = 10.0
"""How long :meth:`Worker.close` waits for a full-cache reload that is running."""


class _ThreadEnd:
    """Held by a thread's local storage only: when the thread ends, its storage goes, and
    this closes the thread's clients and loop (:func:`weakref.finalize`)."""


class Worker:
    """What one Python worker process keeps from task to task; see the module's docstring."""

    def __init__(
        self,
        *,
        clocks: Clocks = SYSTEM_CLOCKS,
        loop_factory: LoopFactory | None = None,
        sweep_every_s: float = SWEEP_EVERY_S,
    ) -> None:
        self.pid = os.getpid()
        self.clocks = clocks
        """The worker's clocks, handed to what it keeps (:mod:`lookup_source.engine.clock`)."""
        self.clock = clocks.monotonic
        """Its monotonic one: caches, kept clients, the shared tier and the sweeper."""
        self._loop_factory = loop_factory
        """How each thread's event loop is made (tests: a loop on virtual time, whose time is
        then the worker's ``clock`` too: :func:`~lookup_source.testing.clock.virtual_worker`)."""
        self.kept = KeptCaches(clocks.monotonic)
        """The caches and hedging windows kept for its tasks."""
        self.caches = self.kept.caches
        self.identity_keys = IdentityKeys(clock=clocks.monotonic)
        """The identity keys derived in this worker (one PBKDF2 per configuration)."""
        self.table_facts = KeptTableFacts(clock=clocks.monotonic)
        """What stores said of their whole tables, per lookup and run (a SQL NOT IN's)."""
        self.gc = GcHold()
        self._sweep_every_s = sweep_every_s
        self._lock = threading.Lock()
        self._local = threading.local()
        self._clients: weakref.WeakSet[WorkerClients] = weakref.WeakSet()
        self._ended: list[tuple[list[Callable[[], None]], list[WorkerClients]]] = []
        """What ended threads left to close (deferred work, then their clients), found while
        a loop ran: done by the next :meth:`clients` call."""
        self._deferred: dict[int, list[Callable[[], None]]] = {}
        self._exporter: Any = None
        self._sweeper: threading.Thread | None = None
        self._stop = threading.Event()
        self.closed = False

    # -- the loop and kept clients ------------------------------------------------------------

    def clients(self, kind: str = "asyncio") -> WorkerClients:
        """This thread's loop of ``kind`` (one of :data:`~lookup_source.engine.loop.LOOP_KINDS`) and
        the clients kept on it, made on first use; closed when the thread ends. What was deferred to
        this thread (:meth:`defer`) runs first."""
        while self._ended:
            self._end_thread(*self._ended.pop())
        self._run_deferred()
        kept: dict[str, WorkerClients] | None = getattr(self._local, "clients", None)
        if kept is None:
            kept = self._local.clients = {}
            self._local.end = end = _ThreadEnd()
            weakref.finalize(end, self._thread_ended, threading.get_ident(), kept)
        current = kept.get(kind)
        if current is None or current.loop.closed:
            current = kept[kind] = WorkerClients(
                clock=self.clock, loop_factory=self._loop_factory or loop_factory_of(kind)
            )
            with self._lock:
                self._clients.add(current)
        return current

    def defer(self, thread: int, work: Callable[[], None]) -> None:
        """Have thread ``thread`` run ``work`` when it next asks for its loop (work on a
        thread's loop found in another thread: a task's close run by the cyclic collector
        elsewhere, while that loop may be running)."""
        with self._lock:
            self._deferred.setdefault(thread, []).append(work)

    def _run_deferred(self) -> None:
        with self._lock:
            work = self._deferred.pop(threading.get_ident(), [])
        _run_quietly(work)

    def lease_client(
        self,
        factory: ClientFactory,
        config: ConnectorConfig,
        *,
        identity: LookupIdentity,
        max_idle_s: float,
        max_age_s: float = 0.0,
        keep: bool | None = None,
        loop_kind: str = "asyncio",
        loop_factory: LoopFactory | None = None,
        loop: TaskLoop | None = None,
    ) -> Lease:
        """A loop and an opened client for one task: this thread's kept ones, on its loop of
        ``loop_kind``, when the worker serves task after task (``keep``: whether it does; by
        default, what Spark says) and ``max_idle_s`` > 0, else a loop (``loop``, the task's own
        already; or one made by ``loop_factory``, else of ``loop_kind``) and a client of the
        task's own. A kept client older than ``max_age_s`` (0: no limit) is replaced.
        ``identity``: the client's, computed once by whoever leases it (a task's lookup:
        :func:`~.task_resources.task_identities`; a plugin's store or coordinator, a scan:
        :func:`~.identity.client_identity`); it keys the kept client."""
        if keep is None:
            keep = worker_reuse() and loop_factory is None
        reusable_class = bool(getattr(factory, "reusable", True))
        factory_id = factory_identity(factory)
        if keep and max_idle_s > 0 and reusable_class and factory_id is not None:
            key = client_key(factory_id, config, identity)
            lease = self.clients(loop_kind).lease(key, factory, config, max_idle_s, max_age_s)
            self._start_sweeper()
            return lease
        return task_lease(factory, config, loop_factory or loop_factory_of(loop_kind), loop)

    def sweep(self) -> int:
        """Close the kept clients idle past their limit, in every thread that runs no task
        now, one at a time; how many were closed. The worker's sweeper calls it every
        :data:`SWEEP_EVERY_S`."""
        with self._lock:
            kept = list(self._clients)
        closed = 0
        for clients in kept:
            if clients.pid != os.getpid():
                continue
            while clients.sweep():
                closed += 1
        return closed

    def _start_sweeper(self) -> None:
        if self._sweeper is not None or self._sweep_every_s <= 0:
            return
        with self._lock:
            if self._sweeper is None:
                self._sweeper = threading.Thread(
                    target=self._sweep_forever, name="asynclookup-sweeper", daemon=True
                )
                self._sweeper.start()

    def _sweep_forever(self) -> None:
        while not self._stop.wait(self._sweep_every_s):
            try:
                self.sweep()
            except Exception:  # the sweeper never dies of one client that fails to close
                log.warning("asynclookup: closing idle clients failed", exc_info=True)

    def _thread_ended(self, thread: int, kept: dict[str, WorkerClients]) -> None:
        """What a thread kept, closed as the thread ends (never in a forked child), after the
        work deferred to it (a task's close seen elsewhere: its caches unpinned, its metrics
        reported), which runs now that no loop of the thread can be running."""
        with self._lock:
            work = self._deferred.pop(thread, [])
        clients = [c for c in kept.values() if c.pid == os.getpid() and not c.loop.closed]
        if not clients and not work:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no loop runs here: now
            self._end_thread(work, clients)
        else:  # seen inside a running loop, which cannot run another: the next clients() call
            self._ended.append((work, clients))

    def _end_thread(self, work: list[Callable[[], None]], clients: list[WorkerClients]) -> None:
        _run_quietly(work)
        for each in clients:
            _close_quietly(each)

    # -- caches, hedging windows, reloads ------------------------------------------------------

    # -- the rest ----------------------------------------------------------------------------

    def telemetry(self) -> Any:
        """The process's OpenTelemetry instruments
        (:class:`~lookup_source.engine.telemetry.Exporter`), made on first use; fails naming
        ``metrics.opentelemetry`` when they cannot be made."""
        if self._exporter is None:
            from lookup_source.engine.telemetry import Exporter

            with self._lock:
                if self._exporter is None:
                    self._exporter = Exporter()
        return self._exporter

    def close(self) -> None:
        """Close what the worker keeps that no task holds (every thread's clients, its
        caches), stop its sweeper, wait for the reloads that run and flush its OpenTelemetry
        exporter; the next :func:`current_worker` makes a new worker."""
        self.closed = True
        self._stop.set()
        with self._lock:
            kept = list(self._clients)
            sweeper, self._sweeper = self._sweeper, None
            exporter, self._exporter = self._exporter, None
        if sweeper is not None and sweeper is not threading.current_thread():
            sweeper.join(SWEEP_JOIN_S)  # between two sweeps: at once; in one, when it ends
        for clients in kept:
            if clients.pid == os.getpid():
                _close_quietly(clients, everything=False)
        self.kept.close(RELOAD_JOIN_S)
        if exporter is not None:
            try:
                exporter.flush()
            except Exception:  # the metrics of a closing worker are not worth failing for
                log.warning("asynclookup: flushing the OpenTelemetry metrics failed", exc_info=True)


def _run_quietly(work: list[Callable[[], None]]) -> None:
    for item in work:
        try:
            item()
        except Exception:  # one task's clean-up never fails the next task
            log.warning("asynclookup: a deferred clean-up failed", exc_info=True)


def _close_quietly(clients: WorkerClients, *, everything: bool = True) -> None:
    try:
        clients.close(everything=everything)
    except Exception:  # a thread's end must not fail on a client that fails to close
        log.warning("asynclookup: closing a thread's clients failed", exc_info=True)


_current: Worker | None = None
_current_lock = threading.Lock()


def current_worker() -> Worker:
    """This process's :class:`Worker`, made on first use (anew in a forked child)."""
    global _current
    worker = _current
    if worker is not None and worker.pid == os.getpid() and not worker.closed:
        return worker
    with _current_lock:
        if _current is None or _current.pid != os.getpid() or _current.closed:
            _current = Worker()
        return _current


def forget_worker() -> None:
    """Close this process's worker (for tests and the bench); the next task starts afresh."""
    global _current
    with _current_lock:
        worker, _current = _current, None
    if worker is not None and worker.pid == os.getpid():
        worker.close()


def lease_client(factory: ClientFactory, config: ConnectorConfig, **settings: Any) -> Lease:
    """:meth:`Worker.lease_client` of this process's worker."""
    return current_worker().lease_client(factory, config, **settings)


__all__ = [
    "Worker",
    "current_worker",
    "forget_worker",
    "lease_client",
]
