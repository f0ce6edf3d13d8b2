"""The attempts' time limits, kept by one timer per engine (engine.deadline.AttemptTimer), on
the loop's virtual clock: each attempt past its limit ends in TimeoutError at its limit to the
millisecond, in or out of order; a cancellation from elsewhere stays one; a client that
swallows its cancellation is abandoned after the grace; nothing is kept once attempts end."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest

from lookup_source.engine.request.deadline import GRACE_S, AttemptTimer
from lookup_source.testing import clock as virtual_time

one_timer = pytest.mark.skipif(
    sys.version_info < (3, 11),
    reason="the one timer needs Task.uncancel() (3.11+): Python 3.10 bounds each attempt with "
    "asyncio.wait_for, whose behaviour the other tests check",
)


async def answer_after(seconds: float, value: Any) -> Any:
    await asyncio.sleep(seconds)
    return value


def test_attempts_past_their_limit_time_out_at_their_limit_and_the_rest_answer() -> None:
    async def scenario() -> list[tuple[int, str, float]]:
        loop = asyncio.get_running_loop()
        timer = AttemptTimer()
        ended: list[tuple[int, str, float]] = []

        async def attempt(number: int, start: float, takes: float) -> None:
            await asyncio.sleep(start)
            try:
                result = await timer.within(answer_after(takes, number), 1.0)
                ended.append((number, f"answer {result}", round(loop.time(), 6)))
            except TimeoutError:
                ended.append((number, "timeout", round(loop.time(), 6)))

        # 0 and 2 overstay their 1 s; 1 and 3 answer in time; they start in order
        await asyncio.gather(
            attempt(0, 0.0, 5.0), attempt(1, 0.1, 0.5), attempt(2, 0.2, 3.0), attempt(3, 0.3, 0.9)
        )
        assert not timer._watches  # every ended attempt left the queue
        return sorted(ended)

    assert virtual_time.run(scenario()) == [
        (0, "timeout", 1.0),
        (1, "answer 1", 0.6),
        (2, "timeout", 1.2),
        (3, "answer 3", 1.2),
    ]


def test_a_shorter_limit_out_of_order_is_kept_to_the_millisecond() -> None:
    """``deadline.ms`` shortens an attempt's limit below the ones started before it."""

    async def scenario() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        timer = AttemptTimer()
        ended: list[tuple[str, float]] = []

        async def attempt(name: str, limit: float) -> None:
            try:
                await timer.within(asyncio.sleep(10), limit)
            except TimeoutError:
                ended.append((name, round(loop.time(), 6)))

        await asyncio.gather(attempt("long", 2.0), attempt("short", 0.25))
        return ended

    assert virtual_time.run(scenario()) == [("short", 0.25), ("long", 2.0)]


@one_timer
def test_one_timer_serves_thousands_of_attempts_and_nothing_is_kept() -> None:
    async def scenario() -> tuple[int, int, int]:
        loop: Any = asyncio.get_running_loop()
        timer = AttemptTimer()
        most_timers = 0

        async def attempt(number: int) -> int:
            nonlocal most_timers
            result = await timer.within(answer_after(0.001 * (number % 7), number), 5.0)
            ours = [h for h in loop._scheduled if h._callback == timer._expire]
            most_timers = max(most_timers, sum(not h.cancelled() for h in ours))
            return int(result)

        results = await asyncio.gather(*(attempt(n) for n in range(5_000)))
        return sum(results), len(timer._watches), most_timers

    total, kept, most_timers = virtual_time.run(scenario())
    assert total == sum(range(5_000))
    assert kept == 0
    assert most_timers == 1  # one timer for 5,000 time limits


def test_a_cancellation_from_elsewhere_stays_a_cancellation() -> None:
    async def scenario() -> str:
        timer = AttemptTimer()
        task = asyncio.ensure_future(timer.within(asyncio.sleep(10), 5.0))
        await asyncio.sleep(1.0)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return "cancelled"
        except TimeoutError:
            return "timeout"
        return "answered"

    assert virtual_time.run(scenario()) == "cancelled"


def test_an_answer_racing_its_limit_and_errors_pass_through() -> None:
    async def scenario() -> tuple[Any, str, float]:
        loop = asyncio.get_running_loop()
        timer = AttemptTimer()
        on_time = await timer.within(answer_after(0.999, "just in time"), 1.0)

        async def fails() -> None:
            await asyncio.sleep(0.1)
            raise ValueError("the store said no")

        try:
            await timer.within(fails(), 1.0)
        except ValueError as exc:
            error = str(exc)
        # the task goes on normally after an attempt that timed out
        with pytest.raises(TimeoutError):
            await timer.within(asyncio.sleep(5), 0.5)
        await asyncio.sleep(0.25)
        return on_time, error, round(loop.time(), 6)

    assert virtual_time.run(scenario()) == ("just in time", "the store said no", 1.849)


@one_timer
def test_a_client_whose_own_timer_fires_with_the_limit_leaves_no_cancellation_behind() -> None:
    """A client with a timer of its own (pyreqwest's, aiohttp's) may end in its own error just
    as the attempt's limit cancels it: the attempt times out, and the task's next await is
    not cancelled (its keys would be lost silently)."""

    async def own_timer() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:  # told to stop: ends in an error of its own instead
            raise ConnectionError("the client's own timeout") from None

    async def scenario() -> tuple[str, int, str]:
        timer = AttemptTimer()
        task = asyncio.current_task()
        assert task is not None
        try:
            await timer.within(own_timer(), 1.0)
            outcome = "answered"
        except TimeoutError as exc:
            outcome = f"timeout from {type(exc.__cause__).__name__}"
        await asyncio.sleep(0.5)  # the next await: not cancelled
        retried = await timer.within(answer_after(0.1, "the retry answered"), 1.0)
        return outcome, task.cancelling(), retried

    assert virtual_time.run(scenario()) == ("timeout from ConnectionError", 0, "the retry answered")


def test_a_client_that_swallows_cancellation_is_abandoned_after_the_grace() -> None:
    async def scenario() -> tuple[float, int, bool, Any]:
        loop = asyncio.get_running_loop()
        timer = AttemptTimer()
        abandoned: set[asyncio.Future[Any]] = set()
        release = asyncio.Event()

        async def stubborn() -> str:
            while True:
                try:
                    await release.wait()
                    return "late"
                except asyncio.CancelledError:
                    continue  # a driver stuck on a dead connection

        with pytest.raises(TimeoutError):
            await timer.abandoning(stubborn(), 2.0, abandoned)
        gave_up_at = round(loop.time(), 6)
        left = len(abandoned)
        release.set()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        answered = await timer.abandoning(answer_after(0.5, "fine"), 2.0, abandoned)
        return gave_up_at, left, not abandoned, answered

    gave_up_at, left, released, answered = virtual_time.run(scenario())
    assert gave_up_at == 2.0 + GRACE_S  # its limit, then the grace
    assert left == 1 and released  # kept among the abandoned until it ended
    assert answered == "fine"


@one_timer
def test_a_closed_timer_has_no_timer_left_on_the_loop() -> None:
    async def scenario() -> int:
        loop: Any = asyncio.get_running_loop()
        timer = AttemptTimer()
        await timer.within(answer_after(0.01, 1), 60.0)
        timer.close()
        return sum(not h.cancelled() for h in loop._scheduled)

    assert virtual_time.run(scenario()) == 0
