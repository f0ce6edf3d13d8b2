"""The event loop of one Spark task (or one background reload), owned from start to end.

Spark calls our code synchronously, from an iterator: a :class:`TaskLoop` runs coroutines on a
private event loop between those calls, turns an async iterator into a plain one, and closes
everything it started, however the task ends::

    with TaskLoop() as loop, loop.opened(make_client()) as client:
        for batch in loop.iterate(client.scan_arrow()):
            ...
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from types import TracebackType
from typing import Any, Protocol, TypeVar

from lookup_source.engine.clock import monotonic

T = TypeVar("T")


class _Closable(Protocol):
    async def open(self) -> None: ...

    async def close(self) -> None: ...


C = TypeVar("C", bound=_Closable)


LoopFactory = Callable[[], asyncio.AbstractEventLoop]
"""Makes an event loop: ``asyncio.new_event_loop`` by default; a test may give
:class:`~lookup_source.testing.clock.VirtualTimeLoop` (the engine keeps its time by its loop)."""

LOOP_KINDS = ("asyncio", "uvloop")
"""The event loops a task may run on (option ``loop``): the standard library's, or uvloop's
(libuv, in Cython), where it is installed."""


class LoopUnavailable(RuntimeError):
    """``loop=uvloop`` asked for on an executor without uvloop."""


def uvloop_installed() -> bool:
    """Whether uvloop can be imported here."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def loop_kind(setting: str, preferred: str) -> str:
    """The loop a task runs on: ``setting`` (option ``loop``) unless it is ``auto``, then the
    connector's ``preferred`` one (:attr:`~lookup_source.connector_api.LookupClient.preferred_loop`,
    what measured faster for its library) where it is installed, else asyncio's."""
    if setting != "auto":
        return setting
    if preferred == "uvloop" and uvloop_installed():
        return "uvloop"
    return "asyncio"


def loop_factory_of(kind: str) -> LoopFactory:
    """What makes a loop of ``kind`` (one of :data:`LOOP_KINDS`)."""
    if kind == "asyncio":
        return asyncio.new_event_loop
    if kind != "uvloop":
        raise ValueError(f"loop: expected one of auto, {', '.join(LOOP_KINDS)}, got {kind!r}")
    try:
        import uvloop
    except ImportError:
        raise LoopUnavailable(
            "loop=uvloop: uvloop is not installed on this executor "
            "(pip install 'asynclookup[uvloop]'; it has no Windows build), or use loop=auto"
        ) from None
    return _precise_uvloop_class(uvloop.Loop)


@functools.cache
def _precise_uvloop_class(base: type) -> type:
    """uvloop's loop with a clock of the system's monotonic resolution: its own ``time()``
    is libuv's, in whole milliseconds (and cached per iteration), which would read a Redis
    answer's 0.3 ms as 0 ms in the latencies, the hedging window and the adaptive limit. Its
    timers stay libuv's (``call_at`` waits ``when - time()``)."""

    class PreciseUvloop(base):
        time = staticmethod(monotonic)  # the builtin, called with no frame of ours

    return PreciseUvloop


class _Pauses:
    """A :class:`TaskLoop`'s time not running: when it last stopped, and in all so far."""

    __slots__ = ("stopped_at", "total")

    def __init__(self, now: float) -> None:
        self.stopped_at = now
        self.total = 0.0


_PAUSES: contextvars.ContextVar[_Pauses | None] = contextvars.ContextVar(
    "asynclookup_loop_pauses", default=None
)
"""The pauses of the :class:`TaskLoop` a coroutine runs on: set by :meth:`TaskLoop.run`, so
every task started on the loop sees its loop's (a context, not a process-wide table)."""


def time_paused() -> float:
    """How long the running :class:`TaskLoop` has not been running between its runs, in all
    (by its own clock): a task's loop runs only while Spark waits on it, so a request in flight
    may have been answered while nothing read the answer. 0.0 outside a TaskLoop."""
    state = _PAUSES.get()
    return state.total if state is not None else 0.0


class TaskLoop:
    """A private asyncio event loop, driven synchronously."""

    def __init__(self, loop_factory: LoopFactory | None = None) -> None:
        self._loop = (loop_factory or asyncio.new_event_loop)()
        self._pauses: _Pauses | None = None
        self.closed = False

    def time(self) -> float:
        """The loop's clock (the engine's)."""
        return self._loop.time()

    def run(self, awaitable: Awaitable[T]) -> T:
        """Run ``awaitable`` to completion on this loop and return its result."""
        loop = self._loop
        now = loop.time()
        state = self._pauses
        if state is None:
            state = self._pauses = _Pauses(now)
        state.total += now - state.stopped_at
        token = _PAUSES.set(state)  # the tasks this run starts copy it
        try:
            return loop.run_until_complete(awaitable)
        finally:
            _PAUSES.reset(token)
            state.stopped_at = loop.time()

    def iterate(self, items: AsyncIterator[T]) -> Iterator[T]:
        """The items of an async iterator, pulled one by one on this loop; the iterator is
        closed when the plain iterator is (also when it is abandoned early)."""
        try:
            while True:
                try:
                    yield self.run(items.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            close: Any = getattr(items, "aclose", None)
            if close is not None and not self.closed:
                with contextlib.suppress(Exception):
                    self.run(close())

    @contextlib.contextmanager
    def opened(self, client: C) -> Iterator[C]:
        """``client`` (anything with async ``open`` and ``close``), opened on this loop and
        closed when the block ends, however it ends."""
        self.run(client.open())
        try:
            yield client
        finally:
            self.run(client.close())

    def close(self) -> None:
        """Finish the loop's async generators and close it. Safe to call twice."""
        if self.closed:
            return
        self.closed = True
        try:
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        finally:
            self._loop.close()

    def __enter__(self) -> TaskLoop:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
