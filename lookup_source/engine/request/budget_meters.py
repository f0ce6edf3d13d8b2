"""The request slots and cost units one task holds of a cluster budget (``budget.rate``,
``budget.cost-per-minute``): what it is short of, how much its next call asks for, where a
grant's units fall in the task's time, and when to ask ahead of need.

A grant's units are due from the task's *call*, as the coordinator reserved them (it did so
between the call and its answer; an answer is late mostly on its way back, a busy worker
reading it late): placed from the answer, a late one would fall into the slots reserved for
other holders next. When the answers take longer than :data:`LATE_S` (``lag``), the task asks
for units due once its answer can be there (``ahead_s``) and for its next grant once what it
holds covers less than an answer's time (:meth:`Meters.running_out`), in grants covering that
time: none is lost while an answer travels, and none is used out of its time.
"""

from __future__ import annotations

from lookup_source.connector_api import BudgetGrant, BudgetLimits
from lookup_source.engine.request.budget_share import HORIZON_S, LATE_S, Reservation


class Meters:
    """A task's request slots (``slots``) and cost units (``cost``) of one budget; ``None``
    where the budget has no such limit."""

    def __init__(self, limits: BudgetLimits) -> None:
        self.slots = Reservation(limits.rate) if limits.rate else None
        self.cost = Reservation(limits.cost_rate) if limits.cost_rate else None
        self.lag = 0.0
        """How long the coordinator's answers take to reach the task (s): rises at once,
        falls slowly."""

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
        """Whether the slots, and the units, held run out before an answer could come — asked
        only of a task whose answers come late (else it asks when it is short)."""
        if self.lag <= LATE_S:
            return False, False
        return (
            self.slots is not None and self._covers_less(self.slots, now),
            self.cost is not None and cost > 0 and self._covers_less(self.cost, now),
        )

    def asks(self, now: float, *, slot: bool, cost: float, ahead: bool) -> tuple[int, float]:
        """The slots and cost units a call asks for: those still short now (``slot``, a
        request of ``cost``), or with ``ahead`` those that run out before its answer."""
        requests, units = 0, 0.0
        if slot and self.slots is not None:
            self.slots.drop_late(now)
            if not self.slots.has(1) or (ahead and self._covers_less(self.slots, now)):
                requests = int(self.slots.ask(1, self.lag))
        if cost and self.cost is not None:
            self.cost.drop_late(now)
            if not self.cost.has(cost) or (ahead and self._covers_less(self.cost, now)):
                units = self.cost.ask(cost, self.lag)
        return requests, units

    def ahead_s(self) -> float:
        """How long after a call its units should start: the answers' time, when late."""
        return self.lag if self.lag > LATE_S else 0.0

    def answered(
        self, grant: BudgetGrant, requests: int, units: float, asked: float, now: float
    ) -> None:
        """Take a grant of ``requests`` slots and ``units`` cost units, asked at ``asked`` and
        answered at ``now`` (loop time)."""
        lag = now - asked
        self.lag = lag if lag > self.lag else 0.9 * self.lag + 0.1 * lag
        if requests and self.slots is not None:
            self.slots.fill(requests, asked + grant.requests_delay_s, now)
        if units and self.cost is not None:
            self.cost.fill(units, asked + grant.cost_delay_s, now)

    def take(self, cost: float) -> float:
        """Take a slot and ``cost`` units; when the request may go (loop time)."""
        return max(
            self.slots.take(1) if self.slots is not None else 0.0,
            self.cost.take(cost) if self.cost is not None and cost > 0 else 0.0,
        )

    def _covers_less(self, reservation: Reservation, now: float) -> bool:
        return reservation.until() - now < self.lag + HORIZON_S


__all__ = ["Meters"]
