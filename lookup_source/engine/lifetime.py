"""How long a task's event loop and client live: the task, or the Python worker.

Spark reuses a Python worker for task after task (``spark.python.worker.reuse``, on by default;
such a worker has ``SPARK_REUSE_WORKER=1`` in its environment). There, :func:`lease_client`
hands every task the worker's one event loop and, per distinct client configuration, one opened
client — its pool, sessions and TLS context — made by the first task that needs it and kept for
the next ones: a stream opens its connections once, not once per micro-batch. This is Flink's
``RichAsyncFunction.open`` per parallel instance, for a runtime that has no per-worker hook::

    lease = lease_client(RedisLookupClient, config, max_idle_s=120.0)
    try:
        lease.loop.run(lease.client.lookup_arrow(keys))
    finally:
        lease.release(reusable=True)     # kept for the next task (closed when not reusable)

What is kept, and for how long:

- A kept client's key is the lookup's identity (:mod:`.identity`): how the client is made (the
  connector class, or the user's function), the URL (with any password), every connector
  option, the values its ``*.env`` options read and the content of the files its ``*-file``
  options name, the schema, capacity, batch size and timeout. Two lookups that differ in any of
  them never share a client, and a client whose secret or certificate changed on the executor
  is replaced at the next task. The key is a keyed digest: it holds no secret and shows none.
- A client older than ``connection.max-age.ms`` is replaced too (a credential that expires
  without any file or variable changing), when the next task asks for it.
- No event loop runs between tasks, so a server, proxy or firewall may have closed a connection
  meanwhile. A client idle longer than ``connection.max-idle.ms`` is closed and a new one opened
  before it serves again. One used more recently is trusted once the loop has taken in what its
  sockets received while nothing ran (a connection the server closed is then seen as closed,
  and the connector connects anew). The next task closes the clients idle past their limit,
  so a worker keeps only the clients of lookups in use, and at most :data:`MAX_KEPT_CLIENTS`.
- A task that failed, or that left a request behind that would not end, or that was abandoned
  with requests in flight, hands its client back as not reusable: it is closed, and the next
  task opens a new one.
- Spark ends a worker with ``os._exit`` or SIGKILL: no clean-up runs and the worker's sockets
  close with the process. A forked child never uses its parent's clients. The clients and the
  loop of a thread (each thread has its own) are closed when the thread ends.

Without worker reuse, outside Spark, with ``connection.max-idle.ms=0``, for a connector class
that sets ``reusable = False``, or for a client factory that cannot be told apart from another
(:func:`factory_identity`), each task has a loop and a client of its own, closed when it ends.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

from lookup_source.connector_api import ConnectorConfig, LookupClient
from lookup_source.engine.identity import LookupIdentity, implicit_inputs
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

Clock = Callable[[], float]


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


def client_key(
    factory_id: str, config: ConnectorConfig, identity: LookupIdentity | None = None
) -> str:
    """The key of a kept client: a keyed digest of the factory, of the lookup's identity
    (everything that decides the answers, secrets and certificates included) and of what
    sizes the client (capacity, batch size, timeout, the budget's requests in flight)."""
    identity = identity or LookupIdentity.of(config)
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

    def release(self, *, reusable: bool) -> None:
        """The task is done with the client: keep it for the next task if ``reusable`` (and
        kept), else close it. Safe to call twice."""
        if self._released:
            return
        self._released = True
        self._release(reusable)


def lease_client(
    factory: ClientFactory,
    config: ConnectorConfig,
    *,
    max_idle_s: float,
    max_age_s: float = 0.0,
    keep: bool | None = None,
    loop_factory: LoopFactory | None = None,
    loop: TaskLoop | None = None,
    identity: LookupIdentity | None = None,
) -> Lease:
    """A loop and an opened client for one task: the worker's kept ones when this worker
    serves task after task (``keep``: whether it does; by default, what Spark says) and
    ``max_idle_s`` > 0, else a loop (``loop``, the task's own already; or one made by
    ``loop_factory``) and a client of the task's own. A kept client older than ``max_age_s``
    (0: no limit) is replaced; ``identity``: the lookup's, if the caller has it already."""
    if keep is None:
        keep = worker_reuse() and loop_factory is None
    reusable_class = bool(getattr(factory, "reusable", True))
    factory_id = factory_identity(factory)
    if keep and max_idle_s > 0 and reusable_class and factory_id is not None:
        identity = identity or LookupIdentity.of(config, implicit=implicit_inputs(factory, config))
        key = client_key(factory_id, config, identity)
        return worker_clients().lease(key, factory, config, max_idle_s, max_age_s)
    return _task_lease(factory, config, loop_factory, loop)


def _task_lease(
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
            _close_quietly(loop, client, config)
        if given is None:
            loop.close()
        raise

    def release(reusable: bool) -> None:
        try:
            _close_quietly(loop, client, config)
        finally:
            if given is None:
                loop.close()

    return Lease(loop, client, False, release)


def _close_quietly(loop: TaskLoop, client: LookupClient, config: ConnectorConfig) -> None:
    """Close ``client`` on ``loop``; a failure to close is logged, never raised (it must not
    mask the task's own outcome)."""
    try:
        loop.run(asyncio.wait_for(client.close(), CLOSE_TIMEOUT_S))
    except Exception:
        log.warning("asynclookup: closing the %s client failed", config.connector, exc_info=True)


@dataclass(eq=False)
class _Kept:
    client: LookupClient
    config: ConnectorConfig
    max_idle_s: float
    last_used: float
    opened_at: float
    users: int = 0
    doomed: bool = False
    """Handed back as not reusable while another task still held it: closed when the last
    task hands it back."""


class WorkerClients:
    """The event loop and the kept clients of one process (and thread)."""

    def __init__(self, *, clock: Clock = time.monotonic) -> None:
        self.pid = os.getpid()
        self.loop = TaskLoop()
        self.opened = 0
        """Clients opened so far (for tests and the bench)."""
        self._clock = clock
        self._clients: dict[str, _Kept] = {}

    def __len__(self) -> int:
        return len(self._clients)

    def lease(
        self,
        key: str,
        factory: ClientFactory,
        config: ConnectorConfig,
        max_idle_s: float,
        max_age_s: float = 0.0,
    ) -> Lease:
        now = self._clock()
        self._close_idle(now)
        kept = self._clients.get(key)
        if kept is not None and kept.users == 0 and now - kept.last_used > max_idle_s:
            self._forget(key, kept)  # idle too long to be trusted: replaced
            kept = None
        if kept is not None and max_age_s > 0 and now - kept.opened_at > max_age_s:
            self._retire(key, kept)  # too old: replaced (closed once no task holds it)
            kept = None
        if kept is None:
            self._make_room()
            client = factory(config)
            try:
                self.loop.run(client.open())
            except BaseException:
                _close_quietly(self.loop, client, config)
                raise
            self.opened += 1
            kept = self._clients[key] = _Kept(client, config, max_idle_s, now, now)
            log.debug(
                "asynclookup: opened a %s client for %s, kept by worker %d",
                config.connector,
                config.display_url,
                self.pid,
            )
        else:
            kept.max_idle_s = max_idle_s
            # what the sockets received while no loop ran (a server that closed a connection)
            # is taken in before the client serves again
            self.loop.run(_settle())
        kept.users += 1
        return Lease(self.loop, kept.client, True, lambda reusable: self._back(key, kept, reusable))

    def _back(self, key: str, kept: _Kept, reusable: bool) -> None:
        kept.users -= 1
        kept.last_used = self._clock()
        if not reusable:
            kept.doomed = True
            if self._clients.get(key) is kept:
                del self._clients[key]  # the next task makes a new one
        if kept.doomed and kept.users == 0:
            _close_quietly(self.loop, kept.client, kept.config)

    def _retire(self, key: str, kept: _Kept) -> None:
        """No task gets ``kept`` any more; closed now, or when the last holder hands it back."""
        del self._clients[key]
        kept.doomed = True
        if kept.users == 0:
            _close_quietly(self.loop, kept.client, kept.config)

    def _forget(self, key: str, kept: _Kept) -> None:
        del self._clients[key]
        _close_quietly(self.loop, kept.client, kept.config)

    def _close_idle(self, now: float) -> None:
        """Close the clients that no task holds and that have idled past their limit."""
        for key, kept in list(self._clients.items()):
            if kept.users == 0 and now - kept.last_used > kept.max_idle_s:
                self._forget(key, kept)

    def _make_room(self) -> None:
        """Close the least recently used clients no task holds, down to one below the cap."""
        idle = sorted(
            ((kept.last_used, key) for key, kept in self._clients.items() if kept.users == 0)
        )
        for _, key in idle[: max(0, len(self._clients) - MAX_KEPT_CLIENTS + 1)]:
            self._forget(key, self._clients[key])

    def close(self, *, everything: bool = False) -> None:
        """Close every client no task holds (``everything``: held or not, as when the thread
        that keeps them ends), and the loop when none is left."""
        for key, kept in list(self._clients.items()):
            if kept.users == 0 or everything:
                self._forget(key, kept)
        if not self._clients:
            self.loop.close()


async def _settle() -> None:
    """Let the loop run its ready callbacks and poll its sockets (twice: events found by
    the first poll are handled in the next round)."""
    await asyncio.sleep(0)
    await asyncio.sleep(0)


class _ThreadEnd:
    """Held by a thread's local storage only: when the thread ends, its storage goes, and
    this closes the thread's clients and loop (:func:`weakref.finalize`)."""


_local = threading.local()


def worker_clients() -> WorkerClients:
    """This process's (and thread's) loop and kept clients, made on first use; closed when the
    thread ends. A forked child starts afresh: its parent's clients share their sockets with
    the parent, so they are forgotten, never closed, by the child."""
    while _ended:
        _close_ended(_ended.pop())
    current: WorkerClients | None = getattr(_local, "clients", None)
    if current is None or current.pid != os.getpid() or current.loop.closed:
        current = _local.clients = WorkerClients()
        _local.end = end = _ThreadEnd()
        weakref.finalize(end, _close_at_thread_end, current)
    return current


_ended: list[WorkerClients] = []
"""What ended threads kept, when their end was seen where a loop was running: closed by the
next :func:`worker_clients` call, in any thread."""


def _close_at_thread_end(clients: WorkerClients) -> None:
    """What a thread kept, closed as the thread ends (never in a forked child)."""
    if clients.pid != os.getpid() or clients.loop.closed:
        return
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # no loop runs here: close now
        _close_ended(clients)
    else:  # the end was seen inside a running loop, which cannot run another: later
        _ended.append(clients)


def _close_ended(clients: WorkerClients) -> None:
    try:
        clients.close(everything=True)
    except Exception:  # a thread's end must not fail on a client that fails to close
        log.warning("asynclookup: closing a thread's clients failed", exc_info=True)


def forget_worker_clients() -> None:
    """Close what this process keeps (for tests); the next lease starts afresh."""
    current: WorkerClients | None = getattr(_local, "clients", None)
    _local.clients = None
    _local.end = None
    if current is not None and current.pid == os.getpid():
        current.close()


__all__ = [
    "ClientFactory",
    "Lease",
    "WorkerClients",
    "factory_identity",
    "forget_worker_clients",
    "lease_client",
    "worker_clients",
    "worker_reuse",
]
