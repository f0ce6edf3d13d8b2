"""What a request waits for before it is sent (engine.request.pacing), on virtual time: the
task's rate limiter, then the cluster budget's admission at the cost of the keys asked (all of
them, or those at the given rows), and the Admission whose lease goes back exactly once — when
the call ends however it ends, or at once when the call never started."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from lookup_source.connector_api import BudgetLimits
from lookup_source.engine.metrics import LookupMetrics
from lookup_source.engine.request.budget import StaticShare, TaskBudget
from lookup_source.engine.request.pacing import Admission, Pacing
from lookup_source.engine.request.rate_limit import RateLimiter
from lookup_source.testing import clock as virtual_time
from tests.fakes import AskedKeys


class Budget:
    """A budget that notes what it admits (with the loop's time) and its leases given back."""

    def __init__(self, log: list[tuple[str, float, float]]) -> None:
        self.log = log
        self.returned = 0

    async def admit(self, cost: float = 1.0) -> None:
        self.log.append(("budget", cost, asyncio.get_running_loop().time()))

    def done(self) -> None:
        self.returned += 1


def static_budget(**limits: Any) -> tuple[TaskBudget, LookupMetrics]:
    metrics = LookupMetrics()
    budget_limits = BudgetLimits(**limits)
    return TaskBudget("b", budget_limits, StaticShare(budget_limits, 1), metrics), metrics


def test_nothing_to_wait_for_admits_at_once_without_an_admission() -> None:
    async def scenario() -> tuple[Any, float, list[Any]]:
        asked = AskedKeys([1, 2, 3])
        admission = await Pacing(None, None).admit(asked, None)
        return admission, asyncio.get_running_loop().time(), asked.costed

    assert virtual_time.run(scenario()) == (None, 0.0, [])  # no cost asked without a budget


def test_the_rate_limiter_spaces_attempts() -> None:
    async def scenario() -> list[tuple[Any, float]]:
        loop = asyncio.get_running_loop()
        pacing = Pacing(RateLimiter(5.0), None)  # 200 ms apart
        out = []
        for _ in range(3):
            admission = await pacing.admit(AskedKeys([1]), None)
            out.append((admission, round(loop.time(), 6)))
        return out

    assert virtual_time.run(scenario()) == [(None, 0.0), (None, 0.2), (None, 0.4)]


def test_the_budget_admits_at_the_cost_of_the_keys_asked() -> None:
    async def scenario() -> tuple[list[Any], list[Any], bool]:
        log: list[tuple[str, float, float]] = []
        budget = Budget(log)
        pacing = Pacing(None, budget)  # type: ignore[arg-type]
        asked = AskedKeys([10, 11, 12, 13], per_key=2.5)
        first = await pacing.admit(asked, None)
        second = await pacing.admit(asked, np.array([1, 3]))
        return log, asked.costed, isinstance(first, Admission) and isinstance(second, Admission)

    log, costed, admissions = virtual_time.run(scenario())
    assert log == [("budget", 10.0, 0.0), ("budget", 5.0, 0.0)]
    assert costed == [None, [1, 3]]
    assert admissions


def test_the_rate_limiter_comes_before_the_budget() -> None:
    async def scenario() -> list[tuple[str, float, float]]:
        log: list[tuple[str, float, float]] = []
        pacing = Pacing(RateLimiter(2.0), Budget(log))  # type: ignore[arg-type]
        await pacing.admit(AskedKeys([1]), None)
        await pacing.admit(AskedKeys([1, 2]), None)
        return log

    # the second attempt is admitted by the budget only after its rate limiter's 0.5 s
    assert virtual_time.run(scenario()) == [("budget", 1.0, 0.0), ("budget", 2.0, 0.5)]


def test_a_budget_of_one_in_flight_holds_the_next_attempt_until_the_lease_goes_back() -> None:
    async def scenario() -> tuple[list[tuple[str, float]], int]:
        loop = asyncio.get_running_loop()
        budget, metrics = static_budget(max_in_flight=1)
        pacing = Pacing(None, budget)
        seen: list[tuple[str, float]] = []

        async def attempt(name: str, takes: float) -> None:
            admission = await pacing.admit(AskedKeys([1]), None)
            assert admission is not None
            seen.append((name, round(loop.time(), 6)))
            await admission.holding(asyncio.sleep(takes))

        await asyncio.gather(attempt("first", 0.3), attempt("second", 0.1))
        await budget.aclose()
        return seen, metrics.budget_waits

    seen, waits = virtual_time.run(scenario())
    assert seen == [("first", 0.0), ("second", 0.3)]
    assert waits == 1


def test_a_budget_by_cost_paces_attempts_by_the_cost_of_their_keys() -> None:
    async def scenario() -> list[float]:
        loop = asyncio.get_running_loop()
        budget, _ = static_budget(cost_rate=10.0)  # 10 units a second
        pacing = Pacing(None, budget)
        times = []
        for keys in ([1, 2, 3, 4, 5], [6, 7], [8]):
            admission = await pacing.admit(AskedKeys(keys), None)
            assert admission is not None
            times.append(round(loop.time(), 6))
            await admission.holding(asyncio.sleep(0))
        await budget.aclose()
        return times

    assert virtual_time.run(scenario()) == [0.0, 0.5, 0.7]


def test_holding_returns_the_calls_answer_and_gives_the_lease_back_once() -> None:
    async def scenario() -> tuple[str, int]:
        budget = Budget([])
        admission = Admission(budget)  # type: ignore[arg-type]

        async def call() -> str:
            await asyncio.sleep(0.2)
            return "answer"

        answer = await admission.holding(call())
        admission.release()  # again: nothing more
        admission.release_unless_started()
        return answer, budget.returned

    assert virtual_time.run(scenario()) == ("answer", 1)


def test_a_failed_call_gives_the_lease_back_and_its_error_passes_through() -> None:
    async def scenario() -> int:
        budget = Budget([])
        admission = Admission(budget)  # type: ignore[arg-type]

        async def call() -> None:
            raise ConnectionResetError("peer")

        with pytest.raises(ConnectionResetError, match="peer"):
            await admission.holding(call())
        admission.release_unless_started()
        return budget.returned

    assert virtual_time.run(scenario()) == 1


def test_a_cancelled_call_gives_the_lease_back_when_it_ends() -> None:
    async def scenario() -> tuple[int, int]:
        budget = Budget([])
        admission = Admission(budget)  # type: ignore[arg-type]
        task = asyncio.ensure_future(admission.holding(asyncio.sleep(10)))
        await asyncio.sleep(1.0)
        before = budget.returned
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return before, budget.returned

    assert virtual_time.run(scenario()) == (0, 1)


def test_a_started_call_keeps_its_lease_until_it_ends() -> None:
    async def scenario() -> list[int]:
        budget = Budget([])
        admission = Admission(budget)  # type: ignore[arg-type]
        task = asyncio.ensure_future(admission.holding(asyncio.sleep(1.0)))
        await asyncio.sleep(0.5)
        seen = [budget.returned]
        admission.release_unless_started()  # the caller gave up: the call still runs
        seen.append(budget.returned)
        await task
        seen.append(budget.returned)
        return seen

    assert virtual_time.run(scenario()) == [0, 0, 1]


def test_a_call_that_never_started_gives_its_lease_back_at_once() -> None:
    budget = Budget([])
    admission = Admission(budget)  # type: ignore[arg-type]
    admission.release_unless_started()
    admission.release_unless_started()
    admission.release()
    assert budget.returned == 1
