"""capacity.adaptive: the concurrency limit, alone and in the engine against a fake store that
refuses requests above a concurrency it does not announce."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from lookup_source.engine.lookup_engine import LookupEngine
from lookup_source.engine.metrics import LIMIT_POINTS, LookupMetrics
from lookup_source.engine.request.limit import AdaptiveLimit, FixedLimit
from lookup_source.errors import OptionError, OverloadedError
from lookup_source.redaction import Redactor
from lookup_source.settings import parse_options
from lookup_source.testing import clock as virtual_time
from tests.fakes import FakeClient, FakeStore, flat, key_batch, make_config, make_options, make_spec


def answered(limit: AdaptiveLimit, n: int, *, latency: float = 0.01, start: float = 0.0) -> None:
    """``n`` answers of ``latency`` each, with the limit fully in use."""
    now = start
    for _ in range(n):
        limit.on_success(now, now + latency, limit.value)
        now += latency


def test_a_fixed_limit_is_the_capacity() -> None:
    limit = FixedLimit(50)
    assert not limit.on_overload(0.0, 1.0)
    assert not limit.on_success(0.0, 9.0, 50)
    assert limit.value == 50


def test_slow_start_grows_by_one_per_answer_up_to_the_ceiling() -> None:
    limit = AdaptiveLimit(ceiling=40)
    assert limit.value == 10
    answered(limit, 5)
    assert limit.value == 15
    answered(limit, 100)
    assert limit.value == 40  # never above capacity


def test_it_grows_only_while_the_limit_is_in_use() -> None:
    limit = AdaptiveLimit(ceiling=100)
    for _ in range(50):
        limit.on_success(0.0, 0.01, in_flight=2)  # 2 of 10 in use: the limit is not the bound
    assert limit.value == 10


def test_an_overload_cuts_a_quarter_once_per_round_trip() -> None:
    limit = AdaptiveLimit(ceiling=100, initial=40)
    assert limit.on_overload(started=1.0, now=1.5)
    assert limit.value == 30
    # the other requests that were in flight at the cut fail too: counted once
    for started in (1.1, 1.2, 1.49):
        assert not limit.on_overload(started=started, now=1.6)
    assert limit.value == 30
    assert limit.on_overload(started=1.7, now=1.8)  # started after the cut: a new signal
    assert limit.value == 22


def test_after_an_overload_it_grows_by_about_one_per_round_trip() -> None:
    limit = AdaptiveLimit(ceiling=100, initial=40)
    limit.on_overload(0.0, 0.0)
    assert limit.value == 30
    answered(limit, 31, start=1.0)  # a limit's worth of answers (and one): one more
    assert limit.value == 31


def test_rising_latency_shrinks_it_before_anything_fails() -> None:
    limit = AdaptiveLimit(ceiling=100, initial=20, tolerance=2.0)
    answered(limit, 20, latency=0.010)
    high = limit.value
    now = 10.0
    while limit.value >= high:  # the store slows down: 5x the lowest latency
        limit.on_success(now, now + 0.050, limit.value)
        now += 0.05
    assert limit.value == int(high * 0.9)  # a gentler cut than for a failure


def test_the_floor_holds() -> None:
    limit = AdaptiveLimit(ceiling=8, floor=2)
    for n in range(20):
        limit.on_overload(started=float(n), now=float(n) + 0.5)
    assert limit.value == 2


def test_the_history_is_bounded_and_merged_per_task() -> None:
    one, two = LookupMetrics(tasks=1), LookupMetrics(tasks=1)
    for n in range(5 * LIMIT_POINTS):
        one.record_limit(float(n), n % 7 + 1)
    two.record_limit(0.0, 10)
    assert len(one.limit_history[0]) <= 2 * LIMIT_POINTS
    assert one.limit_history[0][0] == (0.0, 1)  # the first point is kept
    merged = LookupMetrics().merge(one).merge(two)
    assert len(merged.limit_history) == 2
    assert merged.limit_range == (1, 10)
    assert "adaptive concurrency limit 1..10" in str(merged)
    assert LookupMetrics().limit_range is None


def test_options() -> None:
    options = parse_options({"connector": "redis", "capacity.adaptive": "true"})
    assert options.capacity_adaptive and options.capacity_latency_tolerance == 2.0
    with pytest.raises(OptionError, match="capacity.latency-tolerance.*above 1"):
        parse_options({"connector": "redis", "capacity.latency-tolerance": "1"})
    with pytest.raises(OptionError, match="capacity.adaptive"):
        parse_options({"connector": "redis", "capacity.adaptive": "sometimes"})


class Crowded(FakeStore):
    """Refuses a request (OverloadedError) when more than ``room`` are in flight."""

    def __init__(self, room: int) -> None:
        super().__init__({k: {"name": f"user-{k}", "n": k} for k in range(2000)})
        self.room = room
        self.active = 0
        self.refused = 0
        self.latency = lambda keys: 0.002


class CrowdedClient(FakeClient):
    async def lookup(self, keys: Sequence[Any]) -> Any:
        store = self.store
        assert isinstance(store, Crowded)
        store.active += 1
        try:
            if store.active > store.room:
                store.refused += 1
                await asyncio.sleep(0.001)
                raise OverloadedError("HTTP 503: too busy")
            return await super().lookup(keys)
        finally:
            store.active -= 1


async def _run(adaptive: bool, room: int) -> tuple[LookupEngine, Crowded, list[Any]]:
    options = make_options(
        capacity=64,
        batch_size=1,
        capacity_adaptive=adaptive,
        max_attempts=10_000,  # the fixed capacity must get through too, however slowly
        backoff="exponential",
        max_delay_ms=20,
    )
    spec = make_spec(options)
    store = Crowded(room)
    engine = LookupEngine(CrowdedClient(make_config(spec), store), spec, redact=Redactor())
    out = []
    for start in range(0, 2000, 500):
        out += flat(await engine.submit(key_batch(list(range(start, start + 500)))))
    out += flat(await engine.finish())
    return engine, store, [row for batch in out for row in batch.to_pylist()]


def test_the_engine_finds_the_room_the_store_has() -> None:
    _, fixed_store, fixed_rows = virtual_time.run(_run(adaptive=False, room=8))
    engine, store, rows = virtual_time.run(_run(adaptive=True, room=8))
    assert rows == fixed_rows and [r["name"] for r in rows] == [f"user-{k}" for k in range(2000)]
    assert store.refused < fixed_store.refused / 4  # far fewer failed attempts
    assert engine.metrics.retries == store.refused
    low, high = engine.metrics.limit_range or (0, 0)
    assert low <= 8 < high  # it started above the room, and came under it
    history = engine.metrics.limit_history[0]
    assert history[0][1] == 10 and all(1 <= limit <= 64 for _, limit in history)
