"""What a task's budget spends and how its waiters wait (engine.request.budget_share), on virtual
time: the limits ``budget.*`` set (cost per second from per minute), a holder name unique per
task, the even static share over ``budget.tasks`` (in flight, requests and cost per second), the
units reserved from a paced meter (late ones dropped, grants that grow and shrink), and the
wake-up that reaches the coroutines waiting at that moment or their time limit."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest

from lookup_source.connector_api import BudgetLimits
from lookup_source.engine.request.budget_share import (
    HORIZON_S,
    LATE_S,
    Reservation,
    StaticShare,
    Wakeup,
    holder_id,
    limits_of,
)
from lookup_source.settings import BudgetSettings
from lookup_source.testing import clock as virtual_time


def test_the_constants_are_the_documented_ones() -> None:
    assert HORIZON_S == 0.05
    assert LATE_S == 0.02


def test_limits_of_takes_the_cost_per_second_from_per_minute() -> None:
    settings = BudgetSettings(max_in_flight=40, rate=250.0, cost_per_minute=1200.0, lease_s=3.0)
    assert limits_of(settings) == BudgetLimits(
        max_in_flight=40, rate=250.0, cost_rate=20.0, lease_s=3.0
    )
    assert limits_of(BudgetSettings()) == BudgetLimits(
        max_in_flight=0, rate=0.0, cost_rate=0.0, lease_s=10.0
    )


def test_a_holder_id_names_the_host_the_process_and_is_unique() -> None:
    first, second = holder_id(), holder_id()
    host, pid, token = first.rsplit(":", 2)
    assert host == socket.gethostname()
    assert pid == str(os.getpid())
    assert len(token) == 12 and int(token, 16) >= 0
    assert first != second
    assert second.startswith(f"{host}:{pid}:")


def test_a_static_share_divides_the_budget_evenly_over_the_tasks() -> None:
    share = StaticShare(BudgetLimits(max_in_flight=10, rate=100.0, cost_rate=30.0), 4)
    assert share.tasks == 4
    assert share.in_flight == 2  # 10 // 4
    assert share.rate is not None and share.rate.interval == pytest.approx(1 / 25)
    assert share.cost is not None and share.cost.interval == pytest.approx(1 / 7.5)


def test_a_static_share_keeps_at_least_one_request_in_flight_and_one_task() -> None:
    share = StaticShare(BudgetLimits(max_in_flight=3), 8)
    assert share.in_flight == 1
    assert share.rate is None and share.cost is None
    none = StaticShare(BudgetLimits(max_in_flight=6), 0)  # no task count: one task
    assert none.tasks == 1 and none.in_flight == 6
    assert StaticShare(BudgetLimits(), 3).in_flight == 0  # no in-flight limit


def test_pacing_a_static_share_spaces_requests_and_says_whether_it_waited() -> None:
    async def scenario() -> list[tuple[bool, float]]:
        loop = asyncio.get_running_loop()
        share = StaticShare(BudgetLimits(rate=20.0), 2)  # 10 per second for this task
        out = []
        for _ in range(3):
            waited = await share.pace(1.0)
            out.append((waited, round(loop.time(), 6)))
        return out

    assert virtual_time.run(scenario()) == [(False, 0.0), (True, 0.1), (True, 0.2)]


def test_pacing_a_static_share_by_cost_takes_the_requests_cost() -> None:
    async def scenario() -> list[tuple[bool, float]]:
        loop = asyncio.get_running_loop()
        share = StaticShare(BudgetLimits(cost_rate=10.0), 1)  # 10 units per second
        out = []
        for cost in (5.0, 0.0, 2.0, 1.0):
            waited = await share.pace(cost)
            out.append((waited, round(loop.time(), 6)))
        return out

    # 5 units hold 0.5 s; a request of no cost does not wait; 2 units then hold 0.2 s more
    assert virtual_time.run(scenario()) == [(False, 0.0), (False, 0.0), (True, 0.5), (True, 0.7)]


def test_a_share_without_rates_never_waits() -> None:
    async def scenario() -> tuple[list[bool], float]:
        share = StaticShare(BudgetLimits(max_in_flight=4), 2)
        waited = [await share.pace(100.0) for _ in range(5)]
        return waited, asyncio.get_running_loop().time()

    assert virtual_time.run(scenario()) == ([False] * 5, 0.0)


def test_a_reservation_starts_empty_at_its_rate() -> None:
    slots = Reservation(100.0)
    assert slots.interval == pytest.approx(0.01)
    assert (slots.left, slots.due, slots.size) == (0.0, 0.0, 1.0)
    assert slots.cap == pytest.approx(5.0)  # 50 ms worth of 100 per second
    assert Reservation(4.0).cap == 1.0  # never below one unit


def test_taking_units_returns_when_they_are_due_and_moves_the_next_on() -> None:
    slots = Reservation(10.0)
    slots.fill(3.0, 2.0)
    assert slots.has(3.0) and not slots.has(3.5)
    assert slots.take(1.0) == 2.0
    assert slots.take(2.0) == pytest.approx(2.1)
    assert slots.due == pytest.approx(2.3)
    assert slots.left == 0.0
    assert slots.take(1.0) == pytest.approx(2.3)  # beyond the grant: never below zero
    assert slots.left == 0.0


def test_has_tolerates_rounding_of_fractional_units() -> None:
    slots = Reservation(10.0)
    slots.fill(0.3, 0.0)
    slots.take(0.1)
    slots.take(0.1)
    assert slots.left < 0.1  # 0.3 - 0.1 - 0.1 in floating point: 0.09999999999999998
    assert slots.has(0.1)  # still one tenth of a unit
    assert not slots.has(0.11)


def test_units_whose_time_passed_are_dropped_never_used_late() -> None:
    slots = Reservation(10.0)  # one every 100 ms
    slots.fill(5.0, 1.0)
    slots.drop_late(1.01)  # within LATE_S of the first one's time: kept
    assert (slots.left, slots.due) == (5.0, 1.0)
    slots.drop_late(1.27)  # 1.0, 1.1 and 1.2 are more than 20 ms late
    assert slots.left == 2.0
    assert slots.due == pytest.approx(1.3)
    slots.drop_late(9.0)  # all of them late: the rest dropped, no more
    assert slots.left == 0.0
    assert slots.due == pytest.approx(1.5)
    slots.drop_late(20.0)  # nothing left: nothing moves
    assert slots.due == pytest.approx(1.5)


def test_grants_grow_while_used_up_and_shrink_when_units_are_left() -> None:
    slots = Reservation(100.0)  # cap 5 units
    assert [slots.ask(1.0) for _ in range(4)] == [2.0, 4.0, 5.0, 5.0]
    slots.fill(3.0, 0.0)
    slots.drop_late(1.0)  # some went unused: halve
    assert slots.ask(1.0) == 2  # size 2.5, asked whole
    assert slots.size == 2.5
    assert slots.ask(1.0) == 5  # used up again: grows
    slots.fill(1.0, 0.0)
    slots.drop_late(1.0)
    assert slots.ask(4.0) == 4.0  # never less than what is needed now
    assert slots.size == 2.5
    for _ in range(3):
        slots.fill(1.0, 0.0)
        slots.drop_late(1.0)
        slots.ask(1.0)
    assert slots.size == 1.0  # and the size never below one


def test_units_lost_while_the_answer_travelled_do_not_shrink_the_grants() -> None:
    slots = Reservation(100.0)  # one every 10 ms
    assert slots.ask(1.0) == 2.0
    slots.fill(10.0, due=1.0, now=1.055)  # the answer came late: 1.0 to 1.03 are gone
    assert slots.left == 6.0 and slots.due == pytest.approx(1.04)
    assert slots.ask(1.0) == 4.0  # not counted as unused: still growing


def test_grants_asked_ahead_queue_behind_the_current_one_in_time_order() -> None:
    slots = Reservation(100.0)
    slots.fill(2.0, due=1.0)
    slots.fill(3.0, due=1.5)  # asked ahead, while two were left
    assert slots.has(5.0) and not slots.has(5.5)
    assert [slots.take(1.0) for _ in range(5)] == pytest.approx([1.0, 1.01, 1.5, 1.51, 1.52])
    assert slots.left == 0.0 and not slots.has(1.0)
    slots.fill(2.0, due=2.0)
    slots.fill(2.0, due=3.0)
    slots.drop_late(2.5)  # the first grant passed unused: the next one is current
    assert (slots.left, slots.due) == (2.0, 3.0)
    assert slots.ask(1.0) == 1.0  # some went unused: halved (from 1)


def test_a_late_answered_task_asks_for_grants_covering_its_answers_time() -> None:
    slots = Reservation(1000.0)  # 50 slots a grant when answers are prompt
    assert slots.cap == 50.0
    assert [slots.ask(1.0) for _ in range(3)] == [2.0, 4.0, 8.0]  # doubling per answer
    # answers 0.3 s late: a grant covers up to 0.35 s, and grows faster (16-fold an answer,
    # at most: a prompt task's grants double in about a millisecond)
    assert slots.ask(1.0, lag_s=0.3) == 128.0
    assert slots.ask(1.0, lag_s=0.3) == 350.0
    assert slots.ask(1.0, lag_s=30.0) == 16 * 350.0  # never an overflow


def test_the_units_taken_lately_are_what_the_task_uses() -> None:
    slots = Reservation(100.0)
    slots.fill(10.0, due=1.0)
    for _ in range(4):
        slots.take(1.0)  # due at 1.00, 1.01, 1.02, 1.03
    assert slots.taken_since(1.015) == 2.0
    assert slots.taken_since(0.0) == 4.0
    slots.fill(5.0, due=0.5)  # a grant due earlier than the one held: taken first
    assert slots.take(1.0) == 0.5 and slots.due == pytest.approx(0.51)
    slots.drop_late(1.2)  # every grant late: all dropped, the next unit would come after
    assert slots.left == 0.0 and slots.due == pytest.approx(1.10)


def test_a_wakeup_without_a_wake_ends_at_its_time_limit() -> None:
    async def scenario() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        wakeup = Wakeup()
        await wakeup.wait(0.25)
        first = round(loop.time(), 6)
        await wakeup.wait(-1.0)  # a limit already past: at once
        return first, round(loop.time(), 6)

    assert virtual_time.run(scenario()) == (0.25, 0.25)


def test_a_wake_reaches_every_coroutine_waiting_at_that_moment_only() -> None:
    async def scenario() -> tuple[list[tuple[str, float]], int]:
        loop = asyncio.get_running_loop()
        wakeup = Wakeup()
        ended: list[tuple[str, float]] = []

        async def waiter(name: str, start: float, limit: float) -> None:
            await asyncio.sleep(start)
            await wakeup.wait(limit)
            ended.append((name, round(loop.time(), 6)))

        async def waker() -> None:
            await asyncio.sleep(1.0)
            wakeup.wake()

        await asyncio.gather(
            waiter("a", 0.0, 10.0),
            waiter("b", 0.5, 10.0),
            waiter("late", 1.5, 2.0),  # starts after the wake: only its limit ends it
            waker(),
        )
        return ended, len(wakeup._waiting)

    ended, left = virtual_time.run(scenario())
    assert sorted(ended) == [("a", 1.0), ("b", 1.0), ("late", 3.5)]
    assert left == 0  # nothing kept once the waits ended


def test_a_cancelled_wait_is_a_cancellation_and_leaves_nothing_behind() -> None:
    async def scenario() -> tuple[str, int, float]:
        loop = asyncio.get_running_loop()
        wakeup = Wakeup()
        task = asyncio.ensure_future(wakeup.wait(60.0))
        await asyncio.sleep(0.5)
        task.cancel()
        try:
            await task
            outcome = "ended"
        except asyncio.CancelledError:
            outcome = "cancelled"
        wakeup.wake()  # nobody waiting: nothing to do
        return outcome, len(wakeup._waiting), round(loop.time(), 6)

    assert virtual_time.run(scenario()) == ("cancelled", 0, 0.5)
