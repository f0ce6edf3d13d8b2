"""A task's request slots and cost units of a cluster budget (``engine/request/budget_meters``):
what a call asks for, where a grant's units fall, and when a late-answered task asks ahead."""

from __future__ import annotations

import pytest

from lookup_source.connector_api import BudgetGrant, BudgetLimits
from lookup_source.engine.request.budget_meters import AHEAD_MAX_S, ClockOffset, Meters


def test_a_budget_without_rate_or_cost_limits_has_no_meters() -> None:
    meters = Meters(BudgetLimits(max_in_flight=3))
    assert not meters.active
    assert meters.short(0.0, 5.0) == (False, False)
    assert meters.asks(0.0, slot=True, cost=5.0, ahead=False) == (0, 0.0)
    assert meters.take(5.0) == 0.0


def test_without_the_coordinators_clock_a_grant_is_due_from_the_call() -> None:
    meters = Meters(BudgetLimits(rate=100.0))  # a slot every 10 ms
    assert meters.short(1.0, 0.0) == (True, False)
    requests, units = meters.asks(1.0, slot=True, cost=0.0, ahead=False)
    assert (requests, units) == (2, 0.0)
    # reserved 5 ms after the coordinator's now, the answer read 15 ms after the call: due
    # 5 ms after the call, not 5 ms after the answer
    meters.answered(BudgetGrant(requests_delay_s=0.005), requests, units, 1.0, 1.015)
    assert meters.lag == pytest.approx(0.015)
    assert meters.take(0.0) == pytest.approx(1.005)
    assert meters.take(0.0) == pytest.approx(1.015)
    assert meters.short(1.02, 0.0) == (True, False)


def test_the_coordinators_clock_places_a_grant_however_late_the_call_was_either_way() -> None:
    meters = Meters(BudgetLimits(rate=100.0))
    # the coordinator's clock runs 1,000 s ahead of the task's; a quick call (2 ms) fixes it
    meters.answered(BudgetGrant(clock_s=1001.001), 0, 0.0, 1.0, 1.002)
    # a call late on its way out (0.3 s: a busy loop) and one late on its way back
    for clock, asked, answered in ((1002.3, 2.0, 2.301), (1003.001, 3.0, 3.3)):
        requests, _ = meters.asks(answered, slot=True, cost=0.0, ahead=False)
        grant = BudgetGrant(requests_delay_s=0.35, clock_s=clock)  # due after the answer
        meters.answered(grant, requests, 0.0, asked, answered)
        due = meters.take(0.0)
        assert due == pytest.approx(clock - 1000.0 + 0.35, abs=0.0011)  # as reserved
        meters.short(answered + 1.0, 0.0)  # the rest dropped


def test_the_clock_offset_is_the_middle_of_the_quickest_calls_bounds_and_follows_a_step() -> None:
    offset = ClockOffset()
    offset.add(clock=50.2, asked=0.0, answered=0.4)  # slow: the offset is in [49.8, 50.2]
    assert offset.local(50.2) == pytest.approx(0.2)  # its middle (as far out as back)
    offset.add(clock=51.005, asked=1.0, answered=1.01)  # quick: in [49.995, 50.005]
    assert offset.local(60.0) == pytest.approx(10.0)
    offset.add(clock=52.006, asked=2.0, answered=2.3)  # read late: it narrows nothing
    assert offset.local(60.0) == pytest.approx(10.0)
    offset.add(clock=90.0, asked=2.0, answered=2.01)  # the coordinator's clock stepped on
    assert offset.local(90.0) == pytest.approx(2.005)


def test_a_late_answered_task_asks_ahead_while_it_uses_more_than_it_holds() -> None:
    meters = Meters(BudgetLimits(rate=1000.0, cost_rate=500.0))
    assert meters.ahead_s() == 0.0 and meters.running_out(0.0, 1.0) == (False, False)
    requests, units = meters.asks(0.0, slot=True, cost=2.0, ahead=False)
    assert (requests, units) == (2, 2.0)
    meters.answered(BudgetGrant(clock_s=0.0), requests, units, 0.0, 0.3)  # 0.3 s late
    assert meters.lag == pytest.approx(0.3) and meters.ahead_s() == pytest.approx(0.3)
    assert meters.short(0.3, 2.0) == (True, True)  # what it got was due at 0: lost in transit
    requests, units = meters.asks(0.3, slot=True, cost=2.0, ahead=False)
    assert requests == 32  # 16-fold: a late task's grants grow as fast in time as others'
    grant = BudgetGrant(requests_delay_s=0.3, cost_delay_s=0.3, clock_s=0.3)
    meters.answered(grant, requests, units, 0.3, 0.6)
    assert meters.short(0.6, 2.0) == (False, False)
    assert meters.running_out(0.6, 2.0) == (False, False)  # nothing used lately
    for _ in range(40):
        meters.take(0.0)  # 40 slots taken, due 0.6 to 0.639
    assert meters.running_out(0.64, 0.0) == (True, False)  # 24 held, 40 used lately
    requests, _ = meters.asks(0.64, slot=True, cost=0.0, ahead=True)
    assert requests == 350  # asked while some are still held: 0.35 s of the rate at most


def test_one_late_answer_neither_moves_the_lag_nor_makes_huge_grants() -> None:
    meters = Meters(BudgetLimits(rate=10.0))
    for at, took in ((0.0, 0.2), (1.0, 0.001), (2.0, 0.002), (3.0, 2.0), (6.0, 0.002)):
        meters.answered(BudgetGrant(), 0, 0.0, at, at + took)
    assert meters.lag == pytest.approx(0.002)  # the median of the last five
    for at in (10.0, 20.0, 30.0, 40.0, 50.0):
        meters.answered(BudgetGrant(), 0, 0.0, at, at + 30.0)  # answers later than ever
    assert meters.lag == AHEAD_MAX_S


@pytest.mark.parametrize(
    "grant",
    [
        BudgetGrant(requests_delay_s=float("nan")),
        BudgetGrant(requests_delay_s=-0.5),
        BudgetGrant(cost_delay_s=3600.0),
        BudgetGrant(clock_s=float("inf")),
    ],
)
def test_a_grant_no_coordinator_gives_is_refused_naming_it(grant: BudgetGrant) -> None:
    meters = Meters(BudgetLimits(rate=10.0, cost_rate=10.0))
    with pytest.raises(ValueError, match="the coordinator's"):
        meters.answered(grant, 1, 1.0, 0.0, 0.001)
    assert meters.short(0.0, 1.0) == (True, True)  # nothing taken from it


def test_an_answer_that_waited_for_spark_to_run_the_loop_is_placed_exactly() -> None:
    """Every call's answer read 0.3 s late because Spark held the task's loop (no call quick):
    the time held is known to be on the way back, so the offset is still exact."""
    meters = Meters(BudgetLimits(rate=100.0))
    for at in (0.0, 1.0, 2.0):
        requests, _ = meters.asks(at + 0.3, slot=True, cost=0.0, ahead=False)
        grant = BudgetGrant(requests_delay_s=0.5, clock_s=at + 7.0)  # 7 s ahead of the task
        meters.answered(grant, requests, 0.0, at, at + 0.3, held=0.3)
        assert meters.take(0.0) == pytest.approx(at + 0.5)  # as reserved, not 0.15 off
        meters.short(at + 0.9, 0.0)  # the rest dropped
