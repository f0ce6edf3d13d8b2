"""A task's request slots and the engine's one wake-up (:class:`RequestSlots`).

At most the concurrency limit's value of requests are in flight (:mod:`.limit`: fixed
``capacity`` or adaptive); a hedge waiting for a slot goes before any new request; whoever
waits for a condition (a free slot, room for input, a batch's output) is woken whenever
anything changes, and re-checks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from lookup_source.engine.clock import SYSTEM_CLOCKS, Clock
from lookup_source.engine.metrics import LookupMetrics
from lookup_source.engine.request.limit import ConcurrencyLimit


class RequestSlots:
    """Counts the requests in flight against ``limit``; ``check`` raises the task's failure
    (called at every wake-up, so a failure ends every wait). The adaptive limit's moves are
    recorded in the metrics at ``wall_clock`` times (unix seconds: the history of tasks in
    different processes is compared)."""

    def __init__(
        self,
        limit: ConcurrencyLimit,
        metrics: LookupMetrics,
        check: Callable[[], None],
        *,
        wall_clock: Clock = SYSTEM_CLOCKS.wall,
    ) -> None:
        self.limit = limit
        self._wall_clock = wall_clock
        self.in_flight = 0
        self._metrics = metrics
        self._check = check
        self._hedges_waiting = 0
        self._changed: asyncio.Event | None = None
        if limit.adaptive:
            metrics.record_limit(wall_clock(), limit.value)

    def free(self) -> bool:
        """Whether a new request may start (a hedge waiting for a slot goes first)."""
        return self.in_flight + self._hedges_waiting < self.limit.value

    def occupy(self) -> None:
        """One more request in flight (a new one, or a hedge)."""
        self.in_flight += 1
        self._metrics.peak_in_flight = max(self._metrics.peak_in_flight, self.in_flight)

    def release(self) -> None:
        """A request ended: its slot is free."""
        self.in_flight -= 1
        self.notify()

    async def take_for_hedge(self) -> None:
        """Wait for a free slot and take it, before any new request."""
        self._hedges_waiting += 1
        try:
            await self.wait_until(lambda: self.in_flight < self.limit.value)
        finally:
            self._hedges_waiting -= 1
        self.occupy()

    def limit_changed(self, changed: bool) -> None:
        """The adaptive limit moved (recorded in the metrics; a higher one frees slots)."""
        if changed:
            self._metrics.record_limit(self._wall_clock(), self.limit.value)
            self.notify()

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        """Return once ``condition()`` holds; raise the task's failure if it comes first."""
        if self._changed is None:
            self._changed = asyncio.Event()
        while True:
            self._check()
            if condition():
                return
            self._changed.clear()
            await self._changed.wait()

    def notify(self) -> None:
        """Something changed: every waiter re-checks its condition."""
        if self._changed is not None:
            self._changed.set()
