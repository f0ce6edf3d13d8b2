"""The engine's clock is its event loop: on a VirtualTimeLoop, timeouts, backoff, deadlines and
rate limits take their virtual time exactly, in no wall time (lookup_source.testing.clock)."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import pytest

from lookup_source.engine.clock import SYSTEM_CLOCKS, Clocks, monotonic
from lookup_source.engine.request.rate_limit import RateLimiter
from lookup_source.engine.runner import run_lookups
from lookup_source.errors import LookupFailedError
from lookup_source.testing import clock as virtual_time
from lookup_source.testing.clock import VirtualTimeLoop
from tests.fakes import FakeClient, FakeStore, key_batch, make_config, make_options, make_spec

TABLE = {i: {"name": f"user-{i}", "n": i} for i in range(100)}


def test_time_jumps_to_the_next_timer_and_takes_no_wall_time() -> None:
    async def scenario() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        seen: list[tuple[str, float]] = []

        async def later(name: str, delay: float) -> None:
            await asyncio.sleep(delay)
            seen.append((name, loop.time()))

        await asyncio.gather(later("b", 3600.0), later("a", 0.25), later("c", 7200.0))
        with pytest.raises((TimeoutError, asyncio.TimeoutError)):
            await asyncio.wait_for(asyncio.sleep(10), 1.5)
        seen.append(("timed out", loop.time()))
        return seen

    started = time.perf_counter()
    seen = virtual_time.run(scenario())
    assert time.perf_counter() - started < 1.0
    assert [name for name, _ in seen] == ["a", "b", "c", "timed out"]
    assert [round(at, 6) for _, at in seen] == [0.25, 3600.0, 7200.0, 7201.5]


def test_a_thread_still_wakes_the_loop() -> None:
    async def scenario() -> int:
        return await asyncio.to_thread(lambda: 41 + 1)

    assert virtual_time.run(scenario()) == 42


def test_the_rate_limit_spaces_requests_on_the_loops_clock() -> None:
    async def scenario() -> list[float]:
        loop = asyncio.get_running_loop()
        limiter = RateLimiter(10.0)  # 100 ms apart
        times = []
        for _ in range(5):
            await limiter.acquire()
            times.append(round(loop.time(), 6))
        return times

    assert virtual_time.run(scenario(), start=50.0) == [50.0, 50.1, 50.2, 50.3, 50.4]


def timed(store: FakeStore, attempts: list[float]) -> Any:
    """A client factory of the fake store that notes the loop's time of every attempt."""

    class Timed(FakeClient):
        async def lookup(self, keys: Any) -> Any:
            attempts.append(round(asyncio.get_running_loop().time(), 6))
            return await super().lookup(keys)

    return lambda config: Timed(config, store)


def test_backoff_timeouts_and_the_deadline_run_to_the_millisecond() -> None:
    """An answer of 120 ms against timeout.ms=100, a fixed backoff of 50 ms and deadline.ms=250:
    attempts at 0 and 150 ms; the second is cut to end at 250 ms; no third."""
    store = FakeStore(TABLE)
    store.latency = lambda keys: 0.12
    attempts: list[float] = []
    options = make_options(
        timeout_ms=100, max_attempts=10, initial_delay_ms=50, max_delay_ms=50, deadline_ms=250
    )
    spec = make_spec(options)
    started = time.perf_counter()
    with pytest.raises(LookupFailedError, match=r"deadline.ms=250 \(2 attempts\)"):
        list(
            run_lookups(
                [key_batch([1])],
                spec,
                make_config(spec),
                client_factory=timed(store, attempts),
                loop_factory=VirtualTimeLoop,
            )
        )
    assert attempts == [0.0, 0.15]
    assert time.perf_counter() - started < 1.0


def test_exponential_backoff_doubles_on_the_clock() -> None:
    store = FakeStore(TABLE)
    store.failures = [ConnectionResetError("reset")] * 4
    attempts: list[float] = []

    options = make_options(
        max_attempts=5, backoff="exponential", initial_delay_ms=1000, max_delay_ms=60_000
    )
    spec = make_spec(options)
    out = list(
        run_lookups(
            [key_batch([3])],
            spec,
            make_config(spec),
            client_factory=timed(store, attempts),
            loop_factory=VirtualTimeLoop,
        )
    )
    assert out[0].column("name").to_pylist() == ["user-3"]
    waits = [b - a for a, b in itertools.pairwise(attempts)]
    for retry, wait in enumerate(waits, start=1):
        base = 1.0 * 2 ** (retry - 1)
        assert base / 2 <= wait <= base + 1e-6  # equal jitter: between half and all of it


def test_the_engines_clocks_are_the_systems_unless_handed_others() -> None:
    """lookup_source.engine.clock: one Clocks value carries the monotonic and the wall clock;
    the system's by default (what is made without a worker), a test's when given."""
    assert Clocks() == SYSTEM_CLOCKS and SYSTEM_CLOCKS.monotonic is time.monotonic
    assert SYSTEM_CLOCKS.wall is time.time
    before = time.monotonic()
    assert before <= monotonic() <= time.monotonic()  # the system's, read when called
    now = [5.0]
    virtual = Clocks(monotonic=lambda: now[0], wall=lambda: 1_700_000_000.0)
    assert (virtual.monotonic(), virtual.wall()) == (5.0, 1_700_000_000.0)
    now[0] = 7.5
    assert virtual.monotonic() == 7.5
    only_monotonic = Clocks(monotonic=lambda: now[0])
    assert only_monotonic.wall is time.time  # the other stays the system's
    with pytest.raises(AttributeError):
        virtual.monotonic = time.monotonic  # type: ignore[misc]  # frozen: handed over once
