"""A task's request slots and cost units of a cluster budget (``engine/request/budget_meters``):
what a call asks for, where a grant's units fall, and when a late-answered task asks ahead."""

from __future__ import annotations

import pytest

from lookup_source.connector_api import BudgetGrant, BudgetLimits
from lookup_source.engine.request.budget_meters import Meters


def test_a_budget_without_rate_or_cost_limits_has_no_meters() -> None:
    meters = Meters(BudgetLimits(max_in_flight=3))
    assert not meters.active
    assert meters.short(0.0, 5.0) == (False, False)
    assert meters.asks(0.0, slot=True, cost=5.0, ahead=False) == (0, 0.0)
    assert meters.take(5.0) == 0.0


def test_a_grant_is_due_from_the_call_however_late_its_answer_came() -> None:
    meters = Meters(BudgetLimits(rate=100.0))  # a slot every 10 ms
    assert meters.short(1.0, 0.0) == (True, False)
    requests, units = meters.asks(1.0, slot=True, cost=0.0, ahead=False)
    assert (requests, units) == (2, 0.0)
    # reserved 5 ms after the call, the answer read 15 ms after it: the first slot is due
    # 5 ms after the call (as the coordinator reserved it), not 5 ms after the answer
    meters.answered(BudgetGrant(requests_delay_s=0.005), requests, units, 1.0, 1.015)
    assert meters.lag == pytest.approx(0.015)
    assert meters.take(0.0) == pytest.approx(1.005)
    assert meters.take(0.0) == pytest.approx(1.015)
    assert meters.short(1.02, 0.0) == (True, False)


def test_a_late_answered_task_asks_ahead_for_units_due_after_its_answers_time() -> None:
    meters = Meters(BudgetLimits(rate=1000.0, cost_rate=500.0))
    assert meters.ahead_s() == 0.0 and meters.running_out(0.0, 1.0) == (False, False)
    requests, units = meters.asks(0.0, slot=True, cost=2.0, ahead=False)
    assert (requests, units) == (2, 2.0)
    meters.answered(BudgetGrant(), requests, units, 0.0, 0.3)  # an answer 0.3 s late
    assert meters.lag == pytest.approx(0.3) and meters.ahead_s() == pytest.approx(0.3)
    assert meters.short(0.3, 2.0) == (True, True)  # what it got was due at 0: lost in transit
    requests, units = meters.asks(0.3, slot=True, cost=2.0, ahead=False)
    assert requests == 350  # 0.35 s of 1,000 a second: a grant covers an answer's time
    grant = BudgetGrant(requests_delay_s=0.31, cost_delay_s=0.31)  # after the next free slot
    meters.answered(grant, requests, units, 0.3, 0.6)
    assert meters.short(0.6, 2.0) == (False, False)
    assert meters.running_out(0.6, 2.0) == (False, False)  # both cover 0.36 s or more
    for _ in range(100):
        meters.take(0.0)
    assert meters.running_out(0.7, 0.0) == (True, False)  # 0.26 s left < 0.3 + 0.05
    requests, units = meters.asks(0.7, slot=True, cost=0.0, ahead=True)
    assert requests == 350  # asked while 250 are still held


def test_the_lag_rises_at_once_and_falls_slowly() -> None:
    meters = Meters(BudgetLimits(rate=10.0))
    meters.answered(BudgetGrant(), 0, 0.0, 0.0, 0.2)
    meters.answered(BudgetGrant(), 0, 0.0, 1.0, 1.0)
    assert meters.lag == pytest.approx(0.18)
    meters.answered(BudgetGrant(), 0, 0.0, 2.0, 2.5)
    assert meters.lag == pytest.approx(0.5)
