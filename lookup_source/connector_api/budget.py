"""The coordinator of a cluster budget (``budget.url``): what a plugin implements.

A budget bounds what every task of every executor and job that names it sends to a store
together: requests in flight (leases), requests per second and cost units per second. The
coordinator keeps the shared counts; each task asks it for small grants and spends them
locally (:mod:`lookup_source.engine.request.budget`), so most requests cost no round trip.

One call does everything, atomically, on the coordinator's own clock (never a worker's):
:meth:`BudgetCoordinator.ask` renews the leases a holder keeps (they expire ``lease_s`` after
its last call, so a killed worker's leases come back), grants it more if the budget has them,
and reserves request slots and cost units, paced evenly (a slot every ``1 / rate`` seconds):
a slot is never given twice, so the rate cannot be exceeded by more than one request's worth,
however many holders ask. A budget's limits are its first caller's: a call giving others is
refused (:class:`BudgetConflictError`), so no lookup widens a budget others rely on. A
distribution registers its class by URL scheme::

    [project.entry-points."asynclookup.budget_coordinators"]
    redis = "asynclookup_redis.budget:RedisBudgetCoordinator"

It is opened once per Python worker and kept, like a connector's client; :meth:`open` must not
fail for a coordinator that is down (connect lazily): the engine falls back to a static split.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from lookup_source.connector_api.client import ConnectorConfig, LookupClient
from lookup_source.errors import ConfigurationError

BUDGET_COORDINATOR_GROUP = "asynclookup.budget_coordinators"
"""The entry-point group of budget coordinators, by URL scheme."""


@dataclass(frozen=True)
class BudgetLimits:
    """What a budget allows, across everything that names it (0: no limit of that kind)."""

    max_in_flight: int = 0
    """Requests in flight (leases held) at once."""
    rate: float = 0.0
    """Requests per second."""
    cost_rate: float = 0.0
    """Cost units per second (``budget.cost-per-minute`` / 60)."""
    lease_s: float = 10.0
    """How long a holder's leases last after its last call."""


@dataclass(frozen=True)
class BudgetAsk:
    """One holder's call: what it keeps, and what more it wants."""

    holder: str
    """Who asks: one task's budget (unique per task attempt)."""
    hold: int = 0
    """Leases it keeps (all of its leases it does not give back); 0 gives all back."""
    want: int = 0
    """Leases it asks for beyond ``hold``."""
    requests: int = 0
    """Request slots to reserve (``rate``)."""
    cost: float = 0.0
    """Cost units to reserve (``cost_rate``)."""
    ahead_s: float = 0.0
    """The reserved slots and units start no earlier than this long after the call: the time
    its answer takes to reach the holder, so that none is due before it can be used (the
    budget's time before them, if free, goes to the next asks that fit in it)."""


@dataclass(frozen=True)
class BudgetGrant:
    """The coordinator's answer."""

    leases: int = 0
    """Leases granted beyond ``hold`` (at most ``want``)."""
    fair_share: int = 0
    """The budget's leases divided by its holders (the askers included): what one holder
    should keep while others wait."""
    contended: bool = False
    """Whether another holder was refused leases lately."""
    requests_delay_s: float = 0.0
    """When the first reserved request slot is due, after the coordinator's ``clock_s``; the
    next ones follow every ``1 / rate`` seconds."""
    cost_delay_s: float = 0.0
    """When the first reserved cost unit is due; the next ones every ``1 / cost_rate``."""
    held: int = -1
    """The leases the holder holds now (what it kept and was granted): less than ``hold``
    when the budget did not know it any more (its leases lapsed) and fewer were free. -1: not
    said (``hold`` + ``leases``)."""
    clock_s: float | None = None
    """The coordinator's clock when it reserved (seconds, from any start it keeps): the task
    places the units on its own clock by it. None: not given (they are placed from the call)."""


class BudgetConflictError(ConfigurationError):
    """A budget is kept with other limits than this lookup gives, or one request costs more
    than the budget allows in a minute: fails the task, naming the options to fix."""


class BudgetCoordinator(LookupClient):
    """Keeps the shared counts of budgets (see the module)."""

    name: ClassVar[str] = "budget-coordinator"
    honours_cancellation: ClassVar[bool] = True

    @staticmethod
    def config_for(url: str) -> ConnectorConfig:
        """The configuration a coordinator of ``url`` is made with."""
        return ConnectorConfig(
            connector="budget-coordinator",
            url=url,
            key_columns=(),
            value_columns=(),
            value_types=(),
        )

    async def ask(self, budget: str, limits: BudgetLimits, ask: BudgetAsk) -> BudgetGrant:
        """Renew ``ask.holder``'s leases of ``budget`` (or give them back), grant more and
        reserve request slots and cost units, in one atomic step."""
        raise NotImplementedError


__all__ = [
    "BUDGET_COORDINATOR_GROUP",
    "BudgetAsk",
    "BudgetConflictError",
    "BudgetCoordinator",
    "BudgetGrant",
    "BudgetLimits",
]
