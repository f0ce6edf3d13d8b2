"""A budget shared across tasks, executors and jobs: :class:`BudgetSettings`, and what its
options say together (:func:`check_budget`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lookup_source.connector_api.budget import BudgetCoordinator
from lookup_source.connector_api.options import (
    int_between,
    parse_non_negative_int,
    parse_rate,
    parse_text,
)
from lookup_source.errors import OptionError
from lookup_source.redaction import redact_url
from lookup_source.registry import resolve_budget_coordinator
from lookup_source.settings.declare import BUDGET_TASKS, JOINS, duration_ms, option


@dataclass(frozen=True)
class BudgetSettings:
    """A budget shared by every task of every executor and job that names it: requests in
    flight, per second and cost per minute, kept by a coordinator (``budget.url``) or, without
    one, split statically over the lookup's tasks."""

    def coordinator_class(self) -> type[BudgetCoordinator]:
        """The class of the coordinator ``url`` names (by its scheme)."""
        assert self.url is not None
        return resolve_budget_coordinator(self.url)

    @property
    def active(self) -> bool:
        """Whether any limit is set."""
        return bool(self.max_in_flight or self.rate or self.cost_per_minute)

    def __repr__(self) -> str:  # the URL may hold a password
        url = redact_url(self.url) if self.url else None
        return (
            f"BudgetSettings(url={url!r}, name={self.name!r}, max_in_flight={self.max_in_flight}, "
            f"rate={self.rate}, cost_per_minute={self.cost_per_minute}, "
            f"cost_column={self.cost_column!r}, lease_s={self.lease_s}, "
            f"timeout_s={self.timeout_s}, tasks={self.tasks})"
        )

    url: str | None = option(
        "budget.url",
        parse_text,
        None,
        "The coordinator that keeps the budget across every task, executor and job: a Redis "
        "(`redis://`, `rediss://`; needs the `redis` connector installed), which grants "
        "leases and request slots in small batches by atomic scripts on its own clock. "
        "Without it (or while it does not answer) each task keeps an even share of the "
        "budget (split over budget.tasks), as the metrics say.",
        default_doc="(none: a static split)",
    )
    name: str = option(
        "budget.name",
        parse_text,
        "",
        "The budget's name: lookups, jobs and streams that name the same budget (with the same "
        "budget.url) share it. By default the lookup's own: a digest of its identity (connector, "
        "URL, options, secrets), shared by every job that runs the same lookup.",
        default_doc="(the lookup's own)",
    )
    max_in_flight: int = option(
        "budget.max-in-flight",
        parse_non_negative_int,
        0,
        "Most requests in flight at once across everything that shares the budget, hedges and "
        "retries included (0 = no limit). A task's `capacity` still bounds its own.",
    )
    rate: float = option(
        "budget.rate",
        parse_rate,
        0.0,
        "Most requests per second across everything that shares the budget, retries and "
        "hedges included (0 = no limit); paced evenly, a slot used within 20 ms of its time "
        "or dropped, so no one-second window holds 2% more than this and one request (set it "
        "2% under a quota counted strictly), also when the coordinator's answers come late "
        "(the README's budget section: what a task whose every call is late costs).",
        unit="requests/s",
        default_doc="0",
    )
    cost_per_minute: float = option(
        "budget.cost-per-minute",
        parse_rate,
        0.0,
        "Most cost units per minute across everything that shares the budget (0 = no limit): "
        "a request costs the sum of its keys' costs (budget.cost.column), or one per key; "
        "paced evenly, so no minute holds more than this and one request's cost.",
        unit="units/min",
        default_doc="0",
    )
    cost_column: str | None = option(
        "budget.cost.column",
        parse_text,
        None,
        "A numeric input column with the cost of each row's key (estimated tokens, credits); a "
        "key's cost is the largest of its rows'. Needs budget.cost-per-minute; a null, "
        "negative or NaN cost fails the task naming the column.",
        scope=JOINS,
        default_doc="(none: one per key)",
    )
    lease_s: float = duration_ms(
        "budget.lease.ms",
        10_000,
        "How long a task's in-flight leases outlive its last word with the coordinator (it "
        "renews them every third of this, at most every 0.5 s): a killed executor's leases "
        "return after this. At least 1000, and three times budget.timeout.ms.",
        positive=True,
        max_ms=3_600_000,
    )
    timeout_s: float = duration_ms(
        "budget.timeout.ms",
        500,
        "Time limit of a call to the coordinator; past it, or on any error, the task keeps "
        "its static share for 5 s, logs it once and counts it (`budget_fallbacks`), then asks "
        "the coordinator again.",
        positive=True,
        max_ms=60_000,
    )
    tasks: int = option(
        BUDGET_TASKS,
        int_between(1, 1_000_000),
        0,
        "How many tasks the budget is split over without a coordinator (each keeps an even "
        "share, at least one request in flight): count every task of every job sharing the "
        "budget. By default the most tasks of the lookup that can run at once, known on a "
        "classic SparkSession; over Spark Connect, set it when a budget is set.",
        default_doc="(the lookup's concurrent tasks)",
    )


MIN_BUDGET_RATE = 0.01
"""The smallest ``budget.rate`` (per second) and ``budget.cost-per-minute`` taken."""

MIN_LEASE_S = 1.0
"""The shortest ``budget.lease.ms``: the keeper renews leases every third of it."""


def check_budget(budget: BudgetSettings, given: Mapping[str, str]) -> None:
    """The budget's options, checked together (``given``: the options as given)."""
    if not budget.active:
        named = sorted(name for name in given if name.startswith("budget."))
        if named:
            raise OptionError(
                named[0],
                "is set without a limit to keep: set budget.max-in-flight, budget.rate or "
                "budget.cost-per-minute",
            )
        return
    if budget.url is not None:
        budget.coordinator_class()
    for name, value in (
        ("budget.rate", budget.rate),
        ("budget.cost-per-minute", budget.cost_per_minute),
    ):
        if 0 < value < MIN_BUDGET_RATE:
            raise OptionError(name, f"must be 0 (no limit) or at least {MIN_BUDGET_RATE}")
    if budget.cost_column is not None and not budget.cost_per_minute:
        raise OptionError(
            "budget.cost.column", "needs budget.cost-per-minute (the cost units a minute allows)"
        )
    shortest = max(MIN_LEASE_S, 3 * budget.timeout_s)
    if budget.lease_s < shortest:
        raise OptionError(
            "budget.lease.ms",
            f"({round(budget.lease_s * 1000)}) must be at least {round(shortest * 1000)}: "
            "1000, and three times budget.timeout.ms (a task renews its leases every third of "
            "it, each call taking up to budget.timeout.ms)",
        )
