"""A task's part of a cluster budget (``budget.*``): requests in flight, per second and cost,
held across every task of every executor and job that names the budget.

Each request the executor sends (a retry, a hedge) is admitted first (:meth:`TaskBudget.admit`)
and reports its end (:meth:`TaskBudget.done`). With a coordinator (``budget.url``), a task is
one *holder* and spends grants locally, so most requests cost no round trip:

- **leases** (``budget.max-in-flight``): a request in flight holds one; the task keeps the
  leases it was granted and reuses them, asks for more only when its requests wait (for as many
  as wait), gives back those it no longer needs 50 ms after they fell idle, and renews the
  rest every third of ``budget.lease.ms`` (at most every 0.5 s) — a killed worker's leases
  lapse after that. When another holder was refused, it keeps at most its fair share (the
  budget over its holders);
- **request slots and cost units** (``budget.rate``, ``budget.cost-per-minute``): reserved
  from the coordinator in grants that grow while the task uses them up (doubling, up to what
  the budget allows in 50 ms) and shrink when it leaves some unused; each slot is due at its
  own time, one every ``1 / rate`` seconds, placed by the coordinator's clock, and a slot not
  taken within 20 ms of its time is dropped, never used late — so no window holds more than
  the budget and one request, also when answers come late (:mod:`.budget_meters`: a late
  task's grants cover its answers' time, asked ahead).

Without a coordinator, or while it does not answer (an error, or no answer within
``budget.timeout.ms``), each task keeps an even share of the budget over ``budget.tasks``
(:class:`StaticShare`; at least one request in flight) — never more than its share, nor,
while the coordinator still counts the task's leases, more than those — logs it once, counts
it (``budget_fallbacks``) and asks the coordinator again after 5 s. A budget kept with other
limits, or a request costing more than a minute of it, fails the task
(:class:`BudgetConflictError`, naming the options).

The caller's event loop is the clock (a virtual one in tests)::

    budget = TaskBudget.of(settings, coordinator, name, metrics)
    await budget.admit(cost=3.0)       # a request of three keys' cost
    try:
        ...                            # the request
    finally:
        budget.done()
    await budget.aclose()              # give every lease back
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
from typing import TYPE_CHECKING

from lookup_source.connector_api import (
    BudgetAsk,
    BudgetConflictError,
    BudgetCoordinator,
    BudgetGrant,
    BudgetLimits,
)
from lookup_source.engine.loop import time_paused
from lookup_source.engine.metrics import LookupMetrics
from lookup_source.engine.request.budget_meters import Meters
from lookup_source.engine.request.budget_share import (
    StaticShare,
    Wakeup,
    holder_id,
    limits_of,
    log_fallback,
)

if TYPE_CHECKING:
    from lookup_source.settings import BudgetSettings

log = logging.getLogger("lookup_source")

COOL_OFF_S = 5.0
"""How long a task keeps its static share after the coordinator failed, before asking again."""

LINGER_S = 0.05
"""Leases no longer needed are given back this long after they fell idle."""

RENEW_MAX_S = 0.5
"""A task holding leases tells the coordinator at least this often (renewing them, and
hearing whether others wait for leases, so it gives back what exceeds its fair share)."""

RETRY_MIN_S = 0.01
RETRY_MAX_S = 0.1
"""A task refused leases asks again after this long (doubling, with jitter), or sooner when
one of its own requests ends."""


class TaskBudget:
    """One task's admission to a budget (see the module)."""

    def __init__(
        self,
        name: str,
        limits: BudgetLimits,
        share: StaticShare,
        metrics: LookupMetrics,
        *,
        coordinator: BudgetCoordinator | None = None,
        timeout_s: float = 0.5,
        holder: str | None = None,
        rng: random.Random | None = None,
        warned: set[str] | None = None,
    ) -> None:
        self.name = name
        self.limits = limits
        self.share = share
        self.metrics = metrics
        self.coordinator = coordinator
        self.timeout_s = timeout_s
        self.holder = holder or holder_id()
        self._rng = rng or random.Random()
        self._warned = set() if warned is None else warned
        """The budgets whose fallback was logged: kept beside the coordinator by the worker,
        so that a worker logs a budget's fallback once, not once per task."""
        self._meters = Meters(limits)
        self._held = 0  # leases granted by the coordinator
        self._busy = 0  # requests in flight holding a lease (or a static slot)
        self._waiting = 0  # requests waiting for one
        self._polling = False  # one of them is asking the coordinator
        self._next_poll = 0.0  # after a refusal, no one asks again before this (loop time)
        self._retry_s = RETRY_MIN_S
        self._fair = 0
        self._contended = False
        self._static_until = 0.0 if coordinator is not None else math.inf
        self._live_until = -math.inf  # until when the coordinator counts our leases
        self._lock = asyncio.Lock()  # bound to the loop that first waits on it
        self._changed = Wakeup()  # a request ended, a grant came, the coordinator failed
        self._keeper: asyncio.Task[None] | None = None
        self._ahead: asyncio.Task[None] | None = None  # a call asking for slots ahead of need
        self._closed = False
        metrics.budget = (
            f"coordinated ({name})"
            if coordinator is not None
            else f"static split over {share.tasks} tasks ({name})"
        )

    @classmethod
    def of(
        cls,
        settings: BudgetSettings,
        coordinator: BudgetCoordinator | None,
        name: str,
        metrics: LookupMetrics,
        warned: set[str] | None = None,
    ) -> TaskBudget:
        """The budget ``settings`` name, for one task (``warned``: see :class:`TaskBudget`)."""
        limits = limits_of(settings)
        return cls(
            name,
            limits,
            StaticShare(limits, settings.tasks or 1),
            metrics,
            coordinator=coordinator,
            timeout_s=settings.timeout_s,
            warned=warned,
        )

    # -- the executor's side -----------------------------------------------------------------

    async def admit(self, cost: float = 1.0) -> None:
        """Wait until the budget lets one more request of ``cost`` go, and count it in."""
        if self.limits.cost_rate and cost > self.limits.cost_rate * 60:
            raise BudgetConflictError(
                f"budget {self.name!r}: a request of cost {cost:g} (budget.cost.column) is "
                f"more than budget.cost-per-minute ({self.limits.cost_rate * 60:g}): it could "
                "never be sent within the budget (fewer keys per request: batch.size)"
            )
        loop = asyncio.get_running_loop()
        started = loop.time()
        waited = False
        if self.limits.max_in_flight:
            waited = await self._lease()
        try:
            if self._meters.active:
                waited = await self._pace(cost) or waited
        except BaseException:
            self.done()
            raise
        if waited:
            self.metrics.budget_waits += 1
            self.metrics.budget_wait_ms += (loop.time() - started) * 1000.0

    def done(self) -> None:
        """A request admitted by :meth:`admit` ended: its lease is free."""
        if not self.limits.max_in_flight:
            return
        self._busy -= 1
        self._changed.wake()

    async def aclose(self) -> None:
        """Give every lease back (the task is over); never raises."""
        self._closed = True
        for running in (self._keeper, self._ahead):
            if running is not None:
                running.cancel()
                await asyncio.gather(running, return_exceptions=True)
        if self._held and self._coordinated():
            self._held = 0
            try:
                await asyncio.wait_for(self._ask(BudgetAsk(self.holder)), self.timeout_s)
            except Exception:  # its leases lapse by themselves
                log.debug("asynclookup: giving budget %s back failed", self.name, exc_info=True)

    # -- leases ------------------------------------------------------------------------------

    def _coordinated(self) -> bool:
        return asyncio.get_running_loop().time() >= self._static_until

    def _usable(self) -> int:
        """How many requests may hold a lease at once now: without the coordinator, the
        static share — no more than the leases the coordinator still counts as ours, while it
        does (others were granted the rest)."""
        if not self._coordinated():
            if asyncio.get_running_loop().time() < self._live_until:
                return max(1, min(self.share.in_flight, self._held))
            return self.share.in_flight
        if self._contended and self._fair:
            return min(self._held, max(self._fair, 1))
        return self._held

    async def _lease(self) -> bool:
        """Take a lease (or a static slot); whether it had to wait."""
        if self._busy < self._usable():
            self._busy += 1
            return False
        self._waiting += 1
        loop = asyncio.get_running_loop()
        try:
            while self._busy >= self._usable():
                now = loop.time()
                if self._coordinated() and not self._polling and now >= self._next_poll:
                    self._polling = True  # one waiter of the task asks at a time
                    try:
                        await self._sync(asking=True)
                    finally:
                        self._polling = False
                    if self._busy < self._usable():
                        self._retry_s = RETRY_MIN_S
                        self._changed.wake()  # the others may fit in the grant too
                        break
                    pause = self._retry_s * (0.5 + self._rng.random())  # refused: back off
                    self._retry_s = min(RETRY_MAX_S, self._retry_s * 2)
                    self._next_poll = loop.time() + pause
                elif self._polling or not self._coordinated():
                    pause = RETRY_MAX_S  # woken when a request ends or a grant comes
                else:  # its turn to ask comes at _next_poll (never a wait below 1 ms)
                    pause = min(RETRY_MAX_S, max(0.001, self._next_poll - now))
                await self._changed.wait(pause)
        finally:
            self._waiting -= 1
        self._busy += 1
        return True

    async def _sync(
        self,
        *,
        asking: bool = False,
        slot: bool = False,
        cost: float = 0.0,
        renew: bool = False,
        ahead: bool = False,
    ) -> None:
        """One call to the coordinator (one at a time): keep the leases needed (renewed when
        ``renew``), ask for more when ``asking``; reserve the slots (``slot``) and cost units
        (``cost``) still short at its turn — with ``ahead``, short before an answer can come."""
        async with self._lock:
            if not self._coordinated():
                return
            loop = asyncio.get_running_loop()
            now = loop.time()
            requests, cost_units = self._meters.asks(now, slot=slot, cost=cost, ahead=ahead)
            asking = asking and self._busy >= self._usable()  # not granted meanwhile
            if not (requests or cost_units or asking or renew):
                return
            need = self._busy + self._waiting
            cap = min(self._held, self._fair) if self._contended else self._held
            # the leases in use are always kept; beyond them, those needed, within the cap
            hold = max(self._busy, min(cap, need)) if self.limits.max_in_flight else 0
            want = max(0, need - hold) if asking else 0
            ahead_s = self._meters.ahead_s() if requests or cost_units else 0.0
            asked, paused = loop.time(), time_paused()
            try:
                grant = await asyncio.wait_for(
                    self._ask(BudgetAsk(self.holder, hold, want, requests, cost_units, ahead_s)),
                    self.timeout_s,
                )
                now, held = loop.time(), time_paused() - paused  # held: Spark held the loop
                self._meters.answered(grant, requests, cost_units, asked, now, held)
            except asyncio.CancelledError:
                raise
            except BudgetConflictError:
                raise  # the lookup's own mistake: fail the task, naming it
            except Exception as exc:
                self._fall_back(exc)
                return
            self._live_until = now + self.limits.lease_s
            if self.limits.max_in_flight:
                self._held = grant.held if grant.held >= 0 else hold + grant.leases
                if not grant.contended or grant.fair_share > self._fair:  # room again
                    self._next_poll, self._retry_s = 0.0, RETRY_MIN_S
                    self._changed.wake()
                self._fair, self._contended = grant.fair_share, grant.contended
                self._start_keeper()
            self.metrics.budget_grants += 1

    async def _ask(self, ask: BudgetAsk) -> BudgetGrant:
        assert self.coordinator is not None
        return await self.coordinator.ask(self.name, self.limits, ask)

    def _fall_back(self, error: BaseException) -> None:
        """The coordinator failed: keep the static share for a while."""
        self._static_until = asyncio.get_running_loop().time() + COOL_OFF_S
        self._contended = False  # no word from the others until it answers again
        self.metrics.budget_fallbacks += 1
        if self.name not in self._warned:
            self._warned.add(self.name)
            log_fallback(self.name, error, self.share.tasks, COOL_OFF_S)
        self._changed.wake()  # waiters go by the static share now

    # -- the keeper: renews the leases held, gives back the idle ones ------------------------

    def _surplus(self) -> int:
        return self._held - max(self._busy + self._waiting, 0)

    def _start_keeper(self) -> None:
        if self._keeper is None and not self._closed and self._held:
            self._keeper = asyncio.ensure_future(self._keep())

    async def _keep(self) -> None:
        renew_s = min(self.limits.lease_s / 3, RENEW_MAX_S)
        loop = asyncio.get_running_loop()
        while not self._closed:
            if not self._coordinated():  # its static share: nothing to renew until it answers
                await asyncio.sleep(max(0.01, min(renew_s, self._static_until - loop.time())))
                continue
            renew_at = loop.time() + renew_s
            while self._surplus() <= 0 and not self._over_share():
                left = renew_at - loop.time()
                if left < 0.001:
                    break
                await self._changed.wait(left)  # woken by a request's end: surplus now?
            if self._surplus() > 0 and not self._over_share():
                await asyncio.sleep(LINGER_S)  # idle: it may be needed again at once
            if self._held and self._coordinated():
                await self._sync(renew=True)
            else:
                await asyncio.sleep(LINGER_S)  # never round the loop without yielding

    def _over_share(self) -> bool:
        """Whether it holds more than its fair share while others wait."""
        return self._contended and self._held > max(self._busy, self._fair)

    # -- request slots and cost units --------------------------------------------------------

    async def _pace(self, cost: float) -> bool:
        """Wait for a request slot and ``cost`` units; whether it had to wait."""
        if not self._coordinated():
            return await self.share.pace(cost)
        loop = asyncio.get_running_loop()
        while True:
            slot_short, cost_short = self._meters.short(loop.time(), cost)
            if not slot_short and not cost_short:
                break
            await self._sync(slot=slot_short, cost=cost if cost_short else 0.0)
            if not self._coordinated():
                return await self.share.pace(cost)
        at = self._meters.take(cost)
        self._ask_ahead(cost)
        delay = at - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
            return True
        return False

    def _ask_ahead(self, cost: float) -> None:
        """Answers late: ask the next grant, in the background, before this one runs out."""
        if self._ahead is not None or self._closed:  # one at a time; the sum below only then
            return
        slot, units = self._meters.running_out(asyncio.get_running_loop().time(), cost)
        if slot or units:
            call = self._sync(slot=slot, cost=cost * units, ahead=True)
            self._ahead = asyncio.ensure_future(call)
            self._ahead.add_done_callback(self._asked_ahead)

    def _asked_ahead(self, call: asyncio.Task[None]) -> None:
        self._ahead = None  # a failure is raised by the next request's own call: retrieved
        _ = call.cancelled() or call.exception()


__all__ = ["COOL_OFF_S", "StaticShare", "TaskBudget", "Wakeup", "holder_id"]
