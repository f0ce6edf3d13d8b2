"""Virtual time for tests of the engine: an event loop whose clock moves only when nothing is
ready to run, straight to the next timer.

The engine keeps its time by its event loop — ``timeout.ms``, ``deadline.ms``, the backoff
between attempts, ``rate.limit``, adaptive concurrency — so a test that runs it on a
:class:`VirtualTimeLoop` sees a store that answers in 300 ms, a timeout of 100 ms or a backoff
of 5 s take the virtual time they take and no wall time at all, in the same order every run::

    from lookup_source.engine.runner import run_lookups
    from lookup_source.testing.clock import VirtualTimeLoop

    out = list(run_lookups(batches, spec, config, loop_factory=VirtualTimeLoop))

    loop = VirtualTimeLoop()
    loop.run_until_complete(scenario())   # asyncio.sleep(60) returns at once
    loop.time()                           # 60.0 (and some)
    loop.close()

Only for code that does no real I/O while it waits (a fake store): time jumps whenever the loop
would block, so a real socket's answer would always come "too late". Waiting on a thread is
fine when no timer is due meanwhile (the loop then blocks for real).
"""

from __future__ import annotations

import asyncio
import selectors
from typing import Any


class _VirtualSelector(selectors.DefaultSelector):
    """The loop's selector: polls without waiting, and moves the loop's clock to the next timer
    instead of sleeping until it."""

    def __init__(self) -> None:
        super().__init__()
        self.loop: VirtualTimeLoop | None = None

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:  # no timer at all: only a thread can wake the loop; wait for it
            return super().select(None)
        assert self.loop is not None
        self.loop.advance(timeout)
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An asyncio event loop on virtual time (see the module)."""

    def __init__(self, start: float = 0.0) -> None:
        selector = _VirtualSelector()
        super().__init__(selector)
        selector.loop = self
        self._virtual_now = start

    def time(self) -> float:
        return self._virtual_now

    def advance(self, seconds: float) -> None:
        """Move the clock on by ``seconds`` (the loop does this itself when it would wait)."""
        self._virtual_now += max(0.0, seconds)


def run(awaitable: Any, *, start: float = 0.0) -> Any:
    """``asyncio.run`` on a :class:`VirtualTimeLoop`: run ``awaitable`` to its end and close the
    loop."""
    loop = VirtualTimeLoop(start)
    try:
        return loop.run_until_complete(awaitable)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def virtual_worker() -> Any:
    """A :class:`~lookup_source.engine.kept.worker.Worker` whose thread loops run on virtual time
    and whose clock is that time (one clock for the engine, the kept clients and the caches;
    no sweeper thread: call ``sweep()``). For one thread's tests."""
    from lookup_source.engine.clock import Clocks
    from lookup_source.engine.kept.worker import Worker

    loops: list[VirtualTimeLoop] = []

    def make() -> VirtualTimeLoop:
        loops.append(VirtualTimeLoop())
        return loops[-1]

    clocks = Clocks(monotonic=lambda: loops[-1].time() if loops else 0.0)
    return Worker(clocks=clocks, loop_factory=make, sweep_every_s=0)
