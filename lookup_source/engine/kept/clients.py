"""The kept clients of a worker's thread (:class:`WorkerClients`) and a task's hold on one
(:class:`Lease`); what lives how long, and who decides it, is :mod:`.worker`'s docstring.

- A kept client's key (:func:`client_key`) is a keyed digest of how the client is made (the
  connector class, or the user's function: :func:`factory_identity`), of the lookup's identity
  (:mod:`.identity`: everything that decides its answers, secrets and certificates included)
  and of what sizes the client: two lookups that differ in any of them never share a client,
  and the key shows no secret.
- No event loop runs between tasks, so a server, proxy or firewall may have closed a
  connection meanwhile. A kept client is trusted again once the loop has taken in what its
  sockets received while nothing ran (a connection the server closed is then seen as closed,
  and the connector connects anew).
- A task that failed, or left a request behind that would not end, or was abandoned with
  requests in flight, hands its client back as not reusable: it is closed, and the next task
  opens a new one.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lookup_source.connector_api import ConnectorConfig, LookupClient
from lookup_source.engine.clock import SYSTEM_CLOCKS, Clock
from lookup_source.engine.kept.identity import LookupIdentity
from lookup_source.engine.kept.keeper import Keeper, Kept
from lookup_source.engine.loop import LoopFactory, TaskLoop

log = logging.getLogger("lookup_source")

ClientFactory = Callable[[ConnectorConfig], LookupClient]

REUSE_VARIABLE = "SPARK_REUSE_WORKER"
"""Set to ``1`` by Spark in a Python worker that serves task after task."""

MAX_KEPT_CLIENTS = 16
"""Most clients a worker keeps; beyond, the least recently used one that no task holds is
closed."""

CLOSE_TIMEOUT_S = 10.0
"""How long closing a kept client may take before it is abandoned."""

SWEEP_CLOSE_TIMEOUT_S = 2.0
"""How long closing an idle client may take when the worker's sweeper closes it (a task of
the thread waits for the sweeper meanwhile): past it, the close is abandoned."""


def worker_reuse() -> bool:
    """Whether this process serves task after task (Spark's ``spark.python.worker.reuse``)."""
    return os.environ.get(REUSE_VARIABLE) == "1"


def factory_identity(factory: ClientFactory) -> str | None:
    """What tells a client factory apart from another, or None when nothing does (a lambda,
    a closure: its clients are never kept). A connector class is known by its import path; an
    object (a user's function adapted to the connector API) by its ``identity`` attribute."""
    if isinstance(factory, type):
        return f"class:{factory.__module__}.{factory.__qualname__}"
    identity = getattr(factory, "identity", None)
    return f"object:{identity}" if isinstance(identity, str) and identity else None


def client_key(factory_id: str, config: ConnectorConfig, identity: LookupIdentity) -> str:
    """The key of a kept client: a keyed digest of the factory, of the lookup's identity
    (everything that decides the answers, secrets and certificates included) and of what
    sizes the client (capacity, batch size, timeout, the budget's requests in flight)."""
    return identity.digest(
        "client",
        factory_id,
        config.capacity,
        config.batch_size,
        config.timeout_s,
        config.budget_in_flight,
    )


@dataclass(eq=False)
class Lease:
    """A task's event loop and opened client; hand them back with :meth:`release`."""

    loop: TaskLoop
    client: LookupClient
    kept: bool
    """Whether the client is the worker's (kept for later tasks) rather than the task's own."""
    _release: Callable[[bool], None] = field(repr=False)
    _released: bool = field(default=False, repr=False)
    shares_loop: bool = False
    """Whether ``loop`` is a thread's loop that other tasks of the thread run on too (a kept
    client's, an overflow client's), rather than the task's own: work on it found in another
    thread waits for that thread (:meth:`~.worker.Worker.defer`)."""
    beside: dict[str, Any] = field(default_factory=dict, repr=False)
    """What the worker keeps beside the client (never on it), for as long as the client: the
    same dictionary for every task that leases a kept client, dropped with it (a shared tier's
    store health)."""

    def release(self, *, reusable: bool) -> None:
        """The task is done with the client: keep it for the next task if ``reusable`` (and
        kept), else close it. Safe to call twice."""
        if self._released:
            return
        self._released = True
        self._release(reusable)


def task_lease(
    factory: ClientFactory,
    config: ConnectorConfig,
    loop_factory: LoopFactory | None = None,
    given: TaskLoop | None = None,
) -> Lease:
    """A loop (``given``, left open; else a new one) and a client for this task alone, closed
    when it ends."""
    loop = given or TaskLoop(loop_factory)
    client: LookupClient | None = None
    try:
        client = factory(config)
        loop.run(client.open())
    except BaseException:
        if client is not None:
            close_quietly(loop, client, config)
        if given is None:
            loop.close()
        raise

    def release(reusable: bool) -> None:
        try:
            close_quietly(loop, client, config)
        finally:
            if given is None:
                loop.close()

    return Lease(loop, client, False, release, shares_loop=given is not None)


def close_quietly(
    loop: TaskLoop,
    client: LookupClient,
    config: ConnectorConfig,
    timeout_s: float | None = None,
) -> None:
    """Close ``client`` on ``loop`` within ``timeout_s`` (:data:`CLOSE_TIMEOUT_S` by default;
    past it, or if the close ignores its cancellation, it is abandoned: never waited for
    longer); a failure to close is logged, never raised (it must not mask the task's own
    outcome)."""
    try:
        loop.run(_close_within(client, CLOSE_TIMEOUT_S if timeout_s is None else timeout_s))
    except Exception:
        log.warning("asynclookup: closing the %s client failed", config.connector, exc_info=True)


async def _close_within(client: LookupClient, timeout_s: float) -> None:
    closing = asyncio.ensure_future(client.close())
    done, _ = await asyncio.wait({closing}, timeout=timeout_s)
    if not done:
        closing.cancel()  # not awaited: a close that ignores cancellation is left behind
        closing.add_done_callback(_consume)
        raise TimeoutError(f"closing took longer than {timeout_s:g} s")
    closing.result()


def _consume(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


@dataclass(eq=False)
class _Client:
    """A kept client, with what it was made from and what the worker keeps beside it."""

    client: LookupClient
    config: ConnectorConfig
    beside: dict[str, Any] = field(default_factory=dict)
    doomed: bool = False
    """Handed back as not reusable while another task still held it: closed when the last
    task hands it back."""


class WorkerClients:
    """The event loop and the kept clients of one thread of a worker (asyncio loops are per
    thread), kept by one :class:`~.keeper.Keeper` (at most :data:`MAX_KEPT_CLIENTS`, each
    pinned by the tasks that lease it, closed once idle past its limit);
    :class:`~.worker.Worker` holds one per thread and sweeps them."""

    def __init__(
        self, *, clock: Clock = SYSTEM_CLOCKS.monotonic, loop_factory: LoopFactory | None = None
    ) -> None:
        self.pid = os.getpid()
        self.thread = threading.get_ident()
        """The thread whose loop and clients these are."""
        self.loop = TaskLoop(loop_factory)
        self.opened = 0
        """Clients opened so far (for tests and the bench)."""
        self._clock = clock
        self._kept: Keeper[_Client] = Keeper(
            max_entries=MAX_KEPT_CLIENTS, clock=clock, on_drop=self._close
        )
        self._leases = 0
        """Leases not handed back: while any is out, a task may run the loop."""
        self._lock = threading.RLock()

    def __len__(self) -> int:
        return len(self._kept)

    def lease(
        self,
        key: str,
        factory: ClientFactory,
        config: ConnectorConfig,
        max_idle_s: float,
        max_age_s: float = 0.0,
    ) -> Lease:
        """The client kept under ``key`` (opened now if none is, or if the one kept idled or
        aged past its limits); a client of the task's own, on this loop, when
        :data:`MAX_KEPT_CLIENTS` are kept and every one is in use."""
        with self._lock:
            self._kept.expire()
            now = self._clock()
            kept = self._kept.get(key)
            if kept is not None and kept.users == 0 and now - kept.last_used > max_idle_s:
                self._kept.drop(key)  # idle too long to be trusted: replaced
                kept = None
            if kept is not None and max_age_s > 0 and now - kept.created_at > max_age_s:
                self._retire(key, kept)  # too old: replaced (closed once no task holds it)
                kept = None
            if kept is None and not self._make_room():
                return self._overflow(factory, config)
            if kept is None:
                self._open(key, factory, config, max_idle_s)
            else:
                kept.max_idle_s = max_idle_s
                # what the sockets received while no loop ran (a server that closed a
                # connection) is taken in before the client serves again
                self.loop.run(_settle())
            chosen = self._kept.use(key, pin=True)
            self._leases += 1
            return Lease(
                self.loop,
                chosen.value.client,
                True,
                lambda ok: self._back(key, chosen, ok),
                shares_loop=True,
                beside=chosen.value.beside,
            )

    def _open(
        self, key: str, factory: ClientFactory, config: ConnectorConfig, max_idle_s: float
    ) -> None:
        client = factory(config)
        try:
            self.loop.run(client.open())
        except BaseException:
            close_quietly(self.loop, client, config)
            raise
        self.opened += 1
        self._kept.put(key, _Client(client, config), max_idle_s=max_idle_s)
        log.debug(
            "asynclookup: opened a %s client for %s, kept by worker %d",
            config.connector,
            config.display_url,
            self.pid,
        )

    def _overflow(self, factory: ClientFactory, config: ConnectorConfig) -> Lease:
        """A client for one task, on the worker's loop (the task's other clients are on it),
        closed when the task hands it back: the cap on kept clients holds."""
        lease = task_lease(factory, config, given=self.loop)
        self._leases += 1

        def back(reusable: bool) -> None:
            with self._lock:
                self._leases -= 1
                lease.release(reusable=False)

        return Lease(self.loop, lease.client, False, back, shares_loop=True)

    def _back(self, key: str, kept: Kept[_Client], reusable: bool) -> None:
        with self._lock:
            self._leases -= 1
            self._kept.unpin(kept, key)
            if not reusable:
                kept.value.doomed = True
                if self._kept.get(key) is kept:
                    self._kept.pop(key)  # the next task makes a new one
            if kept.value.doomed and kept.users == 0:
                self._close(key, kept.value)

    def _retire(self, key: str, kept: Kept[_Client]) -> None:
        """No task gets ``kept`` any more; closed now, or when the last holder hands it back."""
        self._kept.pop(key)
        kept.value.doomed = True
        if kept.users == 0:
            self._close(key, kept.value)

    def _close(self, key: str, kept: _Client, timeout_s: float | None = None) -> None:
        close_quietly(self.loop, kept.client, kept.config, timeout_s)

    def sweep(self) -> int:
        """Close one client idle past its limit now (the least recently used), if no task of
        this thread holds a lease (then its loop is not running); called by the worker between
        tasks, from any thread. One at a time, each within :data:`SWEEP_CLOSE_TIMEOUT_S`: a
        task that comes meanwhile waits that long at most. Returns how many were closed."""
        if not self._lock.acquire(blocking=False):
            return 0
        try:
            if self._leases or self.loop.closed:
                return 0
            idle = self._kept.idle()
            if not idle:
                return 0
            kept = self._kept.pop(idle[0])
            assert kept is not None
            self._close(idle[0], kept.value, SWEEP_CLOSE_TIMEOUT_S)
            return 1
        finally:
            self._lock.release()

    def _make_room(self) -> bool:
        """Close the least recently used clients no task holds, down to one below the cap;
        False when every kept client is in use and the cap is reached."""
        self._kept.evict(room=1)
        return len(self._kept) < MAX_KEPT_CLIENTS

    def close(self, *, everything: bool = False) -> None:
        """Close every client no task holds (``everything``: held or not, as when the thread
        that keeps them ends), and the loop when none is left. While a task of the thread
        holds a lease (its loop may be running), nothing but ``everything`` closes."""
        with self._lock:
            if self._leases and not everything:
                return
            self._kept.clear(pinned=everything)
            if not len(self._kept):
                self.loop.close()


async def _settle() -> None:
    """Let the loop run its ready callbacks and poll its sockets (twice: events found by
    the first poll are handled in the next round)."""
    await asyncio.sleep(0)
    await asyncio.sleep(0)


__all__ = [
    "ClientFactory",
    "Lease",
    "WorkerClients",
    "client_key",
    "close_quietly",
    "factory_identity",
    "task_lease",
    "worker_reuse",
]
