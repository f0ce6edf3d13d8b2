"""What a task's budget spends and how its waiters wait: its even share of the budget without
a coordinator (:class:`StaticShare`), the request slots and cost units reserved from the
coordinator's paced meters (:class:`Reservation`), and the one wake-up of its waiters
(:class:`Wakeup`)."""

from __future__ import annotations

import asyncio
import bisect
import logging
import math
import os
import secrets
import socket
from collections import deque
from typing import TYPE_CHECKING

from lookup_source.connector_api import BudgetLimits
from lookup_source.engine.request.rate_limit import RateLimiter

if TYPE_CHECKING:
    from lookup_source.settings import BudgetSettings

log = logging.getLogger("lookup_source")

HORIZON_S = 0.05
"""The largest grant of request slots or cost units covers this much of the budget's time."""

LATE_S = 0.02
"""A reserved slot not taken within this long of its time is dropped (never used late)."""


def limits_of(settings: BudgetSettings) -> BudgetLimits:
    """The limits ``budget.*`` set (the cost per second, from per minute)."""
    return BudgetLimits(
        max_in_flight=settings.max_in_flight,
        rate=settings.rate,
        cost_rate=settings.cost_per_minute / 60.0,
        lease_s=settings.lease_s,
    )


def holder_id() -> str:
    """A holder name unique to one task's budget: host, process and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(6)}"


class Wakeup:
    """Coroutines that wait for a wake-up or a time limit, whichever comes first — without
    ``asyncio.wait_for``, which on Python 3.10 may swallow a cancellation that comes as the
    awaited event fires (a task closing would then go on waiting). A wake-up reaches those
    waiting at that moment."""

    def __init__(self) -> None:
        self._waiting: set[asyncio.Future[None]] = set()

    def wake(self) -> None:
        for future in self._waiting:
            if not future.done():
                future.set_result(None)

    async def wait(self, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._waiting.add(future)
        timer = loop.call_later(max(0.0, timeout_s), _wake_one, future)
        try:
            await future
        finally:
            timer.cancel()
            self._waiting.discard(future)


def _wake_one(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def log_fallback(name: str, error: BaseException, tasks: int, cool_off_s: float) -> None:
    """Log once per worker and budget that its coordinator failed (a static share now)."""
    log.warning(
        "asynclookup: the coordinator of budget %s did not answer (%s: %s); each task "
        "keeps its static share (1/%d of the budget) and asks it again in %.0f s",
        name,
        type(error).__name__,
        str(error)[:200] or "no answer within budget.timeout.ms",
        tasks,
        cool_off_s,
    )


class StaticShare:
    """An even share of a budget over ``tasks`` tasks: at most ``max_in_flight / tasks``
    requests in flight (at least one), ``rate / tasks`` requests and ``cost_rate / tasks``
    cost units per second."""

    def __init__(self, limits: BudgetLimits, tasks: int) -> None:
        tasks = max(1, tasks)
        self.tasks = tasks
        self.in_flight = max(1, limits.max_in_flight // tasks) if limits.max_in_flight else 0
        self.rate = RateLimiter(limits.rate / tasks) if limits.rate else None
        self.cost = RateLimiter(limits.cost_rate / tasks) if limits.cost_rate else None

    async def pace(self, cost: float) -> bool:
        """Wait for this share's next request slot and ``cost`` units; whether it waited."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        if self.rate is not None:
            await self.rate.acquire()
        if self.cost is not None and cost > 0:
            await self.cost.acquire(cost)
        return loop.time() > started


class Reservation:
    """Units reserved from a paced meter, one every ``interval`` seconds: the grants held, in
    time order (``left`` units in all, the next due at ``due``, loop time), and the units
    taken lately (what the task uses)."""

    def __init__(self, per_s: float) -> None:
        self.per_s = per_s
        self.interval = 1.0 / per_s
        self.size = 1.0
        """How many units the next grant asks for (adapted to what the task uses)."""
        self.cap = max(1.0, per_s * HORIZON_S)
        self._grants: list[list[float]] = []  # [due, units], by due
        self._next = 0.0  # where the next unit would be, with no grant held
        self._dropped = False  # units reserved for this task went unused since its last ask
        self._taken: deque[tuple[float, float]] = deque()  # (when, units), the last second

    @property
    def left(self) -> float:
        return sum(units for _, units in self._grants)

    @property
    def due(self) -> float:
        return self._grants[0][0] if self._grants else self._next

    def drop_late(self, now: float, *, unused: bool = True) -> None:
        """Drop the units whose time passed more than :data:`LATE_S` ago (``unused``: the
        task could have taken them, so its grants shrink)."""
        grants = self._grants
        while grants and grants[0][0] < now - LATE_S:
            grant = grants[0]
            late = min(grant[1], float(math.ceil((now - LATE_S - grant[0]) / self.interval)))
            grant[0] += late * self.interval
            grant[1] -= late
            self._dropped = self._dropped or unused
            if grant[1] > 1e-9:
                return
            self._next = grant[0]
            grants.pop(0)

    def has(self, units: float) -> bool:
        return self.left + 1e-9 >= units

    def take(self, units: float) -> float:
        """Take ``units`` (from the earliest grants); when they are due (loop time): the first
        one's time."""
        at = self.due
        self._taken.append((at, units))
        grants = self._grants
        while units > 1e-9 and grants:
            grant = grants[0]
            part = min(units, grant[1])
            grant[0] += part * self.interval
            grant[1] -= part
            units -= part
            if grant[1] <= 1e-9:
                self._next = grant[0]
                grants.pop(0)
        self._next += units * self.interval  # beyond what is held: never below zero
        return at

    def taken_since(self, since: float) -> float:
        """The units taken (due) since ``since``, within the last second."""
        taken = self._taken
        while taken and (taken[0][0] < since - 1.0 or len(taken) > 100_000):
            taken.popleft()
        return sum(units for at, units in taken if at >= since)

    def ask(self, units: float, lag_s: float = 0.0) -> float:
        """How many units the next grant asks for, to have ``units`` at least: grows while the
        task uses its grants up, shrinks when some of them went unused. A grant covers at
        most :data:`HORIZON_S` of the budget's time, or more when the coordinator's answers
        take ``lag_s``: the task asks again once what it holds covers less than that, so each
        grant must cover one answer's time; and it grows as fast in time as a prompt task's
        (at most 16-fold an answer)."""
        cap = max(self.cap, self.per_s * (HORIZON_S + lag_s))
        if self._dropped:
            self.size = max(1.0, self.size / 2)
        else:
            self.size = min(cap, self.size * 2 ** min(4.0, max(1.0, lag_s / LATE_S)))
        self._dropped = False
        return max(units, math.floor(self.size))

    def fill(self, units: float, due: float, now: float | None = None) -> None:
        """Add a grant of ``units``, the first due at ``due``, in time order. Units whose time
        passed already at ``now`` (the answer came late) are dropped, without counting as
        unused."""
        if units > 0:
            bisect.insort(self._grants, [due, units])
        if now is not None:
            self.drop_late(now, unused=False)
