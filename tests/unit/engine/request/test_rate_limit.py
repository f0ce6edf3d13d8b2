"""The task's rate limiter (engine.request.rate_limit.RateLimiter), on virtual time: requests
spaced ``1 / rate`` apart, callers waiting at once served in order, a request's cost taking
that many slots, no burst saved up while idle, an injected clock and sleep, and a rate that is
not positive refused."""

from __future__ import annotations

import asyncio

import pytest

from lookup_source.engine.request.rate_limit import RateLimiter
from lookup_source.testing import clock as virtual_time


@pytest.mark.parametrize("rate", [0.0, -1.0])
def test_a_rate_that_is_not_positive_is_refused(rate: float) -> None:
    with pytest.raises(ValueError, match="rate must be positive"):
        RateLimiter(rate)


def test_the_interval_is_one_over_the_rate() -> None:
    assert RateLimiter(4.0).interval == 0.25
    assert RateLimiter(0.5).interval == 2.0


def test_the_first_request_goes_at_once_and_the_next_ones_one_interval_apart() -> None:
    async def scenario() -> list[float]:
        loop = asyncio.get_running_loop()
        limiter = RateLimiter(20.0)  # 50 ms apart
        times = []
        for _ in range(4):
            await limiter.acquire()
            times.append(round(loop.time(), 6))
        return times

    assert virtual_time.run(scenario(), start=10.0) == [10.0, 10.05, 10.1, 10.15]


def test_callers_waiting_at_once_are_served_in_order() -> None:
    async def scenario() -> list[tuple[int, float]]:
        loop = asyncio.get_running_loop()
        limiter = RateLimiter(10.0)
        seen: list[tuple[int, float]] = []

        async def caller(number: int) -> None:
            await limiter.acquire()
            seen.append((number, round(loop.time(), 6)))

        await asyncio.gather(*(caller(n) for n in range(5)))
        return seen

    assert virtual_time.run(scenario()) == [(0, 0.0), (1, 0.1), (2, 0.2), (3, 0.3), (4, 0.4)]


def test_a_request_of_several_units_takes_that_many_slots() -> None:
    async def scenario() -> list[float]:
        loop = asyncio.get_running_loop()
        limiter = RateLimiter(10.0)
        times = []
        for units in (3.0, 1.0, 0.5, 1.0):
            await limiter.acquire(units)
            times.append(round(loop.time(), 6))
        return times

    # 3 units hold the next 0.3 s; then 1 unit (0.1 s); then half a unit (0.05 s)
    assert virtual_time.run(scenario()) == [0.0, 0.3, 0.4, 0.45]


def test_no_burst_is_saved_up_while_idle() -> None:
    async def scenario() -> list[float]:
        loop = asyncio.get_running_loop()
        limiter = RateLimiter(10.0)
        await limiter.acquire()
        await asyncio.sleep(5.0)  # idle for 50 intervals
        times = []
        for _ in range(3):
            await limiter.acquire()
            times.append(round(loop.time(), 6))
        return times

    assert virtual_time.run(scenario()) == [5.0, 5.1, 5.2]


def test_the_limiter_keeps_the_loops_time() -> None:
    async def scenario() -> list[float]:
        loop = asyncio.get_running_loop()
        limiter = RateLimiter(2.0)
        times = []
        await limiter.acquire()  # at 100.0: no wait
        times.append(loop.time())
        await limiter.acquire()  # due at 100.5
        times.append(loop.time())
        await asyncio.sleep(2.0)  # 102.5: past the next slot
        await limiter.acquire()
        times.append(loop.time())
        await limiter.acquire(2.0)  # due at 103.0, holds until 104.0
        times.append(loop.time())
        await limiter.acquire()
        times.append(loop.time())
        return times

    assert virtual_time.run(scenario(), start=100.0) == [100.0, 100.5, 102.5, 103.0, 104.0]
