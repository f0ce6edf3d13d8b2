"""The request slots and cost units one task holds of a cluster budget (``budget.rate``,
``budget.cost-per-minute``): what it is short of, how much its next call asks for, where a
grant's units fall in the task's time, and when to ask ahead of need.

A grant's units are due at the times the coordinator reserved them, on its own clock; the
task places them on its clock through the offset between the two (:class:`ClockOffset`),
known to within half of what its recent calls leave open (at most the quickest one's round
trip): an answer late on its way out (a busy loop) or back (a worker reading it late, a loop
Spark held) moves no unit into those reserved for other holders, as long as some call of the
last 10 s was quick, or the lateness was the loop held by Spark, or as long out as back. A
coordinator that does not give its clock has its units placed from the call (exact when the
lateness is on the way back).

When the answers take longer than :data:`LATE_S` (``lag``: the median of the last few, at
most :data:`AHEAD_MAX_S`), the task asks for units due once its answer can be there
(``ahead_s``) and, while it uses more than it holds within an answer's time, for its next
grant before the one it holds runs out, in grants covering that time: none is lost while an
answer travels.
"""

from __future__ import annotations

import math
import statistics
from collections import deque

from lookup_source.connector_api import BudgetGrant, BudgetLimits
from lookup_source.engine.request.budget_share import HORIZON_S, LATE_S, Reservation

AHEAD_MAX_S = 0.5
"""The most a task asks ahead of the coordinator's time (and sizes its grants for)."""

LAGS = 5
"""The answers' times the lag is the median of (one late answer does not make it)."""

MOST_DELAY_S = 60.0
"""The latest a grant's first unit may be due (one call reserves at most a minute)."""


class ClockOffset:
    """The coordinator's clock less the task's, as the calls bound it: a call asked at
    ``asked`` and answered at ``answered`` (task time) read ``clock`` between the two, so the
    offset lies in ``[clock - answered, clock - asked]`` (``answered`` less the time Spark held
    the task's loop: the answer waited for it); the calls of the last :data:`WINDOW_S`
    narrow it, at least to the quickest one's round trip, and it takes the middle of what is
    left (a network's way out and back take about as long). Its error is at most half that:
    a task whose every call of 10 s is late one way more than the other by ``d`` places its
    units up to ``d / 2`` off."""

    WINDOW_S = 10.0
    """Calls older than this no longer bound it (the two clocks drift apart, a little)."""

    def __init__(self) -> None:
        self._calls: deque[tuple[float, float, float]] = deque()  # (answered, low, high)

    def add(self, clock: float, asked: float, answered: float) -> None:
        calls = self._calls
        while calls and (calls[0][0] < answered - self.WINDOW_S or len(calls) >= 64):
            calls.popleft()
        calls.append((answered, clock - answered, clock - asked))
        if max(low for _, low, _ in calls) > min(high for _, _, high in calls):
            calls.clear()  # the coordinator's clock stepped: only this call's bounds hold
            calls.append((answered, clock - answered, clock - asked))

    def local(self, clock: float) -> float:
        """The task's time of the coordinator's ``clock`` (after at least one :meth:`add`)."""
        low = max(low for _, low, _ in self._calls)
        high = min(high for _, _, high in self._calls)
        return clock - (low + high) / 2


class Meters:
    """A task's request slots (``slots``) and cost units (``cost``) of one budget; ``None``
    where the budget has no such limit."""

    def __init__(self, limits: BudgetLimits) -> None:
        self.slots = Reservation(limits.rate) if limits.rate else None
        self.cost = Reservation(limits.cost_rate) if limits.cost_rate else None
        self.lag = 0.0
        """How long the coordinator's answers take (s): the median of the last :data:`LAGS`,
        at most :data:`AHEAD_MAX_S`."""
        self._lags: deque[float] = deque(maxlen=LAGS)
        self._offset = ClockOffset()

    @property
    def active(self) -> bool:
        return self.slots is not None or self.cost is not None

    def short(self, now: float, cost: float) -> tuple[bool, bool]:
        """Whether a request of ``cost`` lacks a slot, and its units, now (late units
        dropped first)."""
        for reservation in (self.slots, self.cost):
            if reservation is not None:
                reservation.drop_late(now)
        slot = self.slots is not None and not self.slots.has(1)
        units = self.cost is not None and cost > 0 and not self.cost.has(cost)
        return slot, units

    def running_out(self, now: float, cost: float) -> tuple[bool, bool]:
        """Whether the slots, and the units, held run out before an answer could come: the
        task used more within an answer's time than it holds — asked only of a task whose
        answers come late (else it asks when it is short)."""
        if self.lag <= LATE_S:
            return False, False
        return (
            self.slots is not None and self._runs_out(self.slots, now, 1.0),
            self.cost is not None and cost > 0 and self._runs_out(self.cost, now, cost),
        )

    def asks(self, now: float, *, slot: bool, cost: float, ahead: bool) -> tuple[int, float]:
        """The slots and cost units a call asks for: those still short now (``slot``, a
        request of ``cost``), or with ``ahead`` those that run out before its answer."""
        requests, units = 0, 0.0
        if slot and self.slots is not None:
            self.slots.drop_late(now)
            if not self.slots.has(1) or (ahead and self._runs_out(self.slots, now, 1.0)):
                requests = int(self.slots.ask(1, self.lag))
        if cost and self.cost is not None:
            self.cost.drop_late(now)
            if not self.cost.has(cost) or (ahead and self._runs_out(self.cost, now, cost)):
                units = self.cost.ask(cost, self.lag)
        return requests, units

    def ahead_s(self) -> float:
        """How long after a call its units should start: the answers' time, when late."""
        return self.lag if self.lag > LATE_S else 0.0

    def answered(
        self,
        grant: BudgetGrant,
        requests: int,
        units: float,
        asked: float,
        now: float,
        held: float = 0.0,
    ) -> None:
        """Take a grant of ``requests`` slots and ``units`` cost units, asked at ``asked`` and
        answered at ``now`` (task time), the task's loop held by Spark ``held`` of it (the
        answer waited, so that much of its lateness was on its way back); a ValueError,
        naming it, for a grant no coordinator gives (a delay not a number, below zero or
        beyond a minute; a clock not a number)."""
        for name, delay in (("requests", grant.requests_delay_s), ("cost", grant.cost_delay_s)):
            if not 0.0 <= delay <= MOST_DELAY_S:  # NaN too
                raise ValueError(f"the coordinator's {name} delay is {delay!r} s")
        clock = grant.clock_s
        if clock is not None and not math.isfinite(clock):
            raise ValueError(f"the coordinator's clock is {clock!r}")
        self._lags.append(now - asked)
        self.lag = min(AHEAD_MAX_S, statistics.median(self._lags))
        start = asked  # the coordinator's time, as far as the task can tell
        if clock is not None:
            self._offset.add(clock, asked, max(asked, now - max(0.0, held)))
            start = self._offset.local(clock)
        if requests and self.slots is not None:
            self.slots.fill(requests, start + grant.requests_delay_s, now)
        if units and self.cost is not None:
            self.cost.fill(units, start + grant.cost_delay_s, now)

    def take(self, cost: float) -> float:
        """Take a slot and ``cost`` units; when the request may go (loop time)."""
        return max(
            self.slots.take(1) if self.slots is not None else 0.0,
            self.cost.take(cost) if self.cost is not None and cost > 0 else 0.0,
        )

    def _runs_out(self, reservation: Reservation, now: float, need: float) -> bool:
        used = reservation.taken_since(now - self.lag - HORIZON_S)
        return reservation.left < max(need, used)


__all__ = ["AHEAD_MAX_S", "ClockOffset", "Meters"]
