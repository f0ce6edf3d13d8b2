"""A task's request slots (engine.request.slots.RequestSlots), on virtual time: requests in
flight counted against the concurrency limit, the peak in the metrics, a hedge waiting for a
slot served before any new request, waiters woken on every change to re-check their condition,
the task's failure (``check``) ending every wait, and the adaptive limit's moves recorded in the
metrics at the wall clock's times."""

from __future__ import annotations

import asyncio

import pytest

from lookup_source.engine.metrics import LookupMetrics
from lookup_source.engine.request.limit import AdaptiveLimit, FixedLimit
from lookup_source.engine.request.slots import RequestSlots
from lookup_source.testing import clock as virtual_time


def no_failure() -> None:
    pass


class Wall:
    """A wall clock that reads ``now`` (unix seconds)."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_occupy_and_release_count_requests_against_the_limit() -> None:
    metrics = LookupMetrics()
    slots = RequestSlots(FixedLimit(2), metrics, no_failure)
    assert (slots.in_flight, slots.free()) == (0, True)
    slots.occupy()
    assert (slots.in_flight, slots.free()) == (1, True)
    slots.occupy()
    assert (slots.in_flight, slots.free()) == (2, False)
    slots.release()
    assert (slots.in_flight, slots.free()) == (1, True)
    slots.release()
    assert slots.in_flight == 0


def test_the_peak_in_flight_is_kept_in_the_metrics() -> None:
    metrics = LookupMetrics()
    metrics.peak_in_flight = 2  # from earlier: never lowered
    slots = RequestSlots(FixedLimit(10), metrics, no_failure)
    slots.occupy()
    assert metrics.peak_in_flight == 2
    for _ in range(4):
        slots.occupy()
    assert metrics.peak_in_flight == 5
    for _ in range(5):
        slots.release()
    slots.occupy()
    assert metrics.peak_in_flight == 5


def test_a_fixed_limit_records_no_history_and_an_adaptive_one_its_start() -> None:
    fixed = LookupMetrics()
    RequestSlots(FixedLimit(8), fixed, no_failure, wall_clock=Wall(1.7e9))
    assert fixed.limit_history == []
    adaptive = LookupMetrics()
    RequestSlots(AdaptiveLimit(ceiling=50), adaptive, no_failure, wall_clock=Wall(1.7e9))
    assert adaptive.limit_history == [[(1.7e9, 10)]]


def test_limit_changed_records_the_new_limit_only_when_it_moved() -> None:
    metrics = LookupMetrics()
    wall = Wall(1000.0)
    limit = AdaptiveLimit(ceiling=50)
    slots = RequestSlots(limit, metrics, no_failure, wall_clock=wall)
    wall.now = 1001.5
    slots.limit_changed(limit.on_overload(0.0, 1.0))  # 10 * 0.75
    assert limit.value == 7
    wall.now = 1002.0
    slots.limit_changed(limit.on_overload(0.5, 1.2))  # started before the decrease: no move
    slots.limit_changed(False)
    assert metrics.limit_history == [[(1000.0, 10), (1001.5, 7)]]
    assert metrics.limit_range == (7, 10)


def test_a_higher_limit_wakes_a_request_waiting_for_a_slot() -> None:
    async def scenario() -> tuple[float, int, list[list[tuple[float, int]]]]:
        loop = asyncio.get_running_loop()
        metrics = LookupMetrics()
        limit = AdaptiveLimit(ceiling=20)
        slots = RequestSlots(limit, metrics, no_failure, wall_clock=Wall(5.0))
        for _ in range(10):
            slots.occupy()
        woke_at: list[float] = []

        async def new_request() -> None:
            await slots.wait_until(slots.free)
            woke_at.append(round(loop.time(), 6))
            slots.occupy()

        waiting = asyncio.ensure_future(new_request())
        await asyncio.sleep(0.3)
        assert not woke_at  # the limit is full
        slots.limit_changed(limit.on_success(0.0, 0.01, slots.in_flight))  # slow start: 11
        await waiting
        return woke_at[0], slots.in_flight, metrics.limit_history

    woke, in_flight, history = virtual_time.run(scenario())
    assert woke == 0.3
    assert in_flight == 11
    assert history == [[(5.0, 10), (5.0, 11)]]


def test_wait_until_returns_at_once_when_the_condition_holds() -> None:
    async def scenario() -> tuple[float, int]:
        calls = 0

        def check() -> None:
            nonlocal calls
            calls += 1

        slots = RequestSlots(FixedLimit(1), LookupMetrics(), check)
        await slots.wait_until(lambda: True)
        return asyncio.get_running_loop().time(), calls

    assert virtual_time.run(scenario()) == (0.0, 1)


def test_wait_until_rechecks_its_condition_at_every_change() -> None:
    async def scenario() -> tuple[list[int], float]:
        loop = asyncio.get_running_loop()
        slots = RequestSlots(FixedLimit(4), LookupMetrics(), no_failure)
        for _ in range(3):
            slots.occupy()
        looked: list[int] = []

        def all_done() -> bool:
            looked.append(slots.in_flight)
            return slots.in_flight == 0

        async def ends(after: float) -> None:
            await asyncio.sleep(after)
            slots.release()

        await asyncio.gather(slots.wait_until(all_done), ends(0.1), ends(0.2), ends(0.4))
        return looked, round(loop.time(), 6)

    looked, ended_at = virtual_time.run(scenario())
    assert looked == [3, 2, 1, 0]
    assert ended_at == 0.4


def test_every_waiter_is_woken_by_one_change() -> None:
    async def scenario() -> list[str]:
        slots = RequestSlots(FixedLimit(1), LookupMetrics(), no_failure)
        opened = False
        woke: list[str] = []

        async def waiter(name: str) -> None:
            await slots.wait_until(lambda: opened)
            woke.append(name)

        tasks = [asyncio.ensure_future(waiter(n)) for n in ("a", "b", "c")]
        await asyncio.sleep(1.0)
        opened = True
        slots.notify()
        await asyncio.gather(*tasks)
        return sorted(woke)

    assert virtual_time.run(scenario()) == ["a", "b", "c"]


def test_the_tasks_failure_ends_a_wait_that_would_never_return() -> None:
    class TaskFailed(Exception):
        pass

    async def scenario() -> tuple[str, float]:
        loop = asyncio.get_running_loop()
        failure: list[BaseException] = []

        def check() -> None:
            if failure:
                raise failure[0]

        slots = RequestSlots(FixedLimit(1), LookupMetrics(), check)

        async def fail_later() -> None:
            await asyncio.sleep(2.5)
            failure.append(TaskFailed("the output could not be written"))
            slots.notify()

        failing = asyncio.ensure_future(fail_later())
        with pytest.raises(TaskFailed, match="could not be written"):
            await slots.wait_until(lambda: False)
        await failing
        return "raised", round(loop.time(), 6)

    assert virtual_time.run(scenario()) == ("raised", 2.5)


def test_a_failure_already_there_comes_before_a_condition_that_holds() -> None:
    async def scenario() -> None:
        def check() -> None:
            raise RuntimeError("task failed")

        slots = RequestSlots(FixedLimit(1), LookupMetrics(), check)
        await slots.wait_until(lambda: True)

    with pytest.raises(RuntimeError, match="task failed"):
        virtual_time.run(scenario())


def test_notify_without_a_waiter_does_nothing() -> None:
    slots = RequestSlots(FixedLimit(1), LookupMetrics(), no_failure)
    slots.notify()
    slots.occupy()
    slots.release()  # notifies too
    assert slots.in_flight == 0


def test_a_hedge_waiting_for_a_slot_goes_before_a_new_request() -> None:
    async def scenario() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        metrics = LookupMetrics()
        slots = RequestSlots(FixedLimit(2), metrics, no_failure)
        slots.occupy()
        slots.occupy()
        order: list[tuple[str, float]] = []

        async def hedge() -> None:
            await slots.take_for_hedge()
            order.append(("hedge", round(loop.time(), 6)))

        async def new_request() -> None:
            await slots.wait_until(slots.free)
            slots.occupy()
            order.append(("new", round(loop.time(), 6)))

        hedging = asyncio.ensure_future(hedge())
        await asyncio.sleep(0)
        newcomer = asyncio.ensure_future(new_request())
        await asyncio.sleep(1.0)
        slots.release()  # one slot: the hedge's, though both wait
        assert not slots.free()  # not for a new request while the hedge waits
        await hedging
        assert slots.in_flight == 2 and not slots.free()
        await asyncio.sleep(1.0)
        assert order == [("hedge", 1.0)]
        slots.release()  # the next slot goes to the new request
        await newcomer
        assert metrics.peak_in_flight == 2
        return order

    assert virtual_time.run(scenario()) == [("hedge", 1.0), ("new", 2.0)]


def test_a_hedge_takes_a_free_slot_at_once() -> None:
    async def scenario() -> tuple[int, bool, float]:
        slots = RequestSlots(FixedLimit(2), LookupMetrics(), no_failure)
        slots.occupy()
        await slots.take_for_hedge()
        return slots.in_flight, slots.free(), asyncio.get_running_loop().time()

    assert virtual_time.run(scenario()) == (2, False, 0.0)


def test_a_hedge_whose_wait_fails_stops_counting_as_waiting() -> None:
    async def scenario() -> tuple[int, bool]:
        failure: list[BaseException] = []

        def check() -> None:
            if failure:
                raise failure[0]

        slots = RequestSlots(FixedLimit(1), LookupMetrics(), check)
        slots.occupy()
        hedging = asyncio.ensure_future(slots.take_for_hedge())
        await asyncio.sleep(0.5)
        failure.append(ValueError("task failed"))
        slots.notify()
        with pytest.raises(ValueError, match="task failed"):
            await hedging
        failure.clear()
        slots.release()
        return slots.in_flight, slots.free()  # the hedge no longer holds the slot back

    assert virtual_time.run(scenario()) == (0, True)


def test_a_cancelled_hedge_stops_counting_as_waiting() -> None:
    async def scenario() -> tuple[int, bool]:
        slots = RequestSlots(FixedLimit(1), LookupMetrics(), no_failure)
        slots.occupy()
        hedging = asyncio.ensure_future(slots.take_for_hedge())
        await asyncio.sleep(0.5)
        hedging.cancel()
        with pytest.raises(asyncio.CancelledError):
            await hedging
        slots.release()
        return slots.in_flight, slots.free()

    assert virtual_time.run(scenario()) == (0, True)
