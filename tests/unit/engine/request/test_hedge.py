"""Hedged requests in the engine (``hedge.after.ms``, ``hedge.budget``), on virtual time: the
tail they cut, the budget they keep, the slot and rate limit they respect, the loser cancelled."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest

from lookup_source.engine.request import hedge as hedge_module
from lookup_source.engine.request.hedge import (
    MAX_TOKENS,
    MIN_SAMPLES,
    HedgeBudget,
    Hedging,
    LatencyWindow,
    Unlimited,
    race,
    saved_hedges,
)
from lookup_source.engine.runner import run_lookups
from lookup_source.errors import LookupFailedError, TransientError
from lookup_source.settings import HedgeAfter, HedgeSettings, parse_options
from lookup_source.testing.clock import VirtualTimeLoop
from tests.fakes import FakeClient, FakeStore, key_batch, make_config, make_options, make_spec

TABLE = {i: {"name": f"user-{i}", "n": i} for i in range(2000)}


class TailStore(FakeStore):
    """The first request for a key in ``slow`` takes ``tail_s``; every other one ``fast_s``."""

    def __init__(self, slow: set[int], *, fast_s: float = 0.005, tail_s: float = 0.5) -> None:
        super().__init__(TABLE)
        self.asked: Counter[int] = Counter()
        self.cancelled = 0
        self.slow = slow
        self.latency = self._latency
        self.fast_s, self.tail_s = fast_s, tail_s

    def _latency(self, keys: Sequence[Any]) -> float:
        first = any(self.asked[k] == 0 and k in self.slow for k in keys)
        for k in keys:
            self.asked[k] += 1
        return self.tail_s if first else self.fast_s


class CountingClient(FakeClient):
    async def lookup(self, keys: Sequence[Any]) -> Any:
        try:
            return await super().lookup(keys)
        except asyncio.CancelledError:
            self.store.cancelled += 1  # type: ignore[attr-defined]
            raise


def hedged(after: str | float, budget: float = 1.0, before_known: float = 0.2) -> HedgeSettings:
    if isinstance(after, str):
        quantile = HedgeAfter(seconds=before_known, quantile=float(after[1:]) / 100)
        return HedgeSettings(after=quantile, budget=budget)
    return HedgeSettings(after=HedgeAfter(seconds=after), budget=budget)


def run(
    store: FakeStore, keys: list[int], **options: Any
) -> tuple[list[dict[str, Any]], Any, float]:
    spec = make_spec(make_options(**{"batch_size": 1, "capacity": 8, **options}))
    metrics: list[Any] = []
    loop = VirtualTimeLoop()
    out = list(
        run_lookups(
            [key_batch(keys[i : i + 50]) for i in range(0, len(keys), 50)],
            spec,
            make_config(spec),
            client_factory=lambda c: CountingClient(c, store),
            on_metrics=metrics.append,
            loop_factory=lambda: loop,
        )
    )
    return [r for b in out for r in b.to_pylist()], metrics[0], loop.time()


def test_a_hedge_past_the_delay_cuts_the_tail_and_every_row_is_right() -> None:
    keys = list(range(200))
    slow = {7, 55, 123}
    plain_rows, plain, plain_time = run(TailStore(slow), keys)
    store = TailStore(slow)
    rows, metrics, took = run(store, keys, hedge=hedged(0.05))
    assert rows == plain_rows
    assert [(r["k"], r["name"]) for r in rows] == [(k, f"user-{k}") for k in keys]
    assert metrics.hedges == 3 and metrics.hedges_won == 3
    assert metrics.requests == 203 and plain.requests == 200 and plain.hedges == 0
    assert store.cancelled == 3  # each slow first request, cancelled when its hedge won
    assert store.in_flight == 0
    assert plain_time >= 0.5 and took < 0.2
    # a hedge waits for a free slot (8 busy), then answers in 5 ms: far below the 500 ms tail
    assert metrics.latency_max_ms < 150 and plain.latency_max_ms >= 500


def test_a_request_is_hedged_on_a_loop_that_wakes_late_every_time() -> None:
    """A busy machine wakes every wait late: the request gets one short wait to read what
    came meanwhile, then is hedged — not waited on until its timeout (every wait late by 8 ms
    was once credited in full, again and again, and the request timed out unhedged)."""

    def setup(loop: Any, answer: asyncio.Future[Any]) -> Any:
        async def busy() -> None:  # each turn of the loop takes 8 ms of its time
            while True:
                loop.advance(0.008)
                await asyncio.sleep(0)

        return asyncio.ensure_future(busy())

    outcome, hedge_at, won = hedged_race(setup, limit_s=1.0)
    assert outcome == "hedge" and won == 1
    # twice the delay, and three turns of the loop: the last wait's lateness, the hedge's start
    assert hedge_at is not None and 0.05 <= hedge_at <= 2 * 0.05 + 3 * 0.008


def hedged_race(scenario_setup: Any, *, delay_s: float = 0.05, limit_s: float = 2.0) -> Any:
    """``race`` of a request that never answers unless ``scenario_setup(loop, answer)`` makes
    it (``answer``: the request's future), on virtual time: (what it returned, or "timeout";
    when the hedge started, or None; how many times the hedge won)."""
    started: list[float] = []
    won: list[int] = []

    async def scenario() -> Any:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Any] = loop.create_future()
        background = scenario_setup(loop, answer)

        async def first() -> Any:
            return await answer

        async def second() -> Any:
            started.append(loop.time())
            return "hedge"

        try:
            return await race(
                first,
                limit_s=limit_s,
                delay_s=delay_s,
                gate=Unlimited(),
                start_hedge=second,
                hedge_won=lambda: won.append(1),
                abandoned=set(),
            )
        except TimeoutError:
            return "timeout"
        finally:
            if background is not None:
                background.cancel()

    outcome = VirtualTimeLoop().run_until_complete(scenario())
    return outcome, (started[0] if started else None), len(won)


def test_an_answer_that_came_while_the_loop_was_busy_is_read_not_hedged() -> None:
    """The answer comes at 30 ms while a callback holds the loop from 10 to 210 ms: the wait
    for the 50 ms delay ends 160 ms late, and the answer, unread, is read in one short wait —
    no hedge for an answer that came in time."""

    def setup(loop: Any, answer: asyncio.Future[Any]) -> None:
        loop.call_at(0.01, loop.advance, 0.2)  # a busy loop: nothing runs until 210 ms
        loop.call_at(0.03, answer.set_result, "answer")

    assert hedged_race(setup) == ("answer", None, 0)


def test_time_spark_held_the_task_is_owed_once_then_the_request_is_hedged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The loop runs 10 ms, then Spark holds the task 30 ms, again and again: the request is
    hedged once the loop has run about its delay (50 ms) — counted once, the held time made
    every wait late too, and the request, owed it twice, timed out unhedged."""
    paused = {"s": 0.0}
    monkeypatch.setattr(hedge_module, "time_paused", lambda: paused["s"])

    def setup(loop: Any, answer: asyncio.Future[Any]) -> Any:
        async def spark() -> None:
            while True:
                await asyncio.sleep(0.01)
                loop.advance(0.03)
                paused["s"] += 0.03

        return asyncio.ensure_future(spark())

    outcome, hedge_at, won = hedged_race(setup)
    assert outcome == "hedge" and won == 1
    # 50 ms of the loop's running time is about 200 ms with 30 of every 40 held
    assert hedge_at is not None and 0.15 <= hedge_at <= 0.35


def test_hedges_stay_within_the_budget() -> None:
    rng = random.Random(3)
    keys = list(range(2000))
    slow = {k for k in keys if rng.random() < 0.10}
    store = TailStore(slow)
    rows, metrics, _ = run(store, keys, hedge=hedged(0.05, budget=0.05))
    assert len(rows) == 2000 and all(r["name"] == f"user-{r['k']}" for r in rows)
    primaries = metrics.requests - metrics.hedges
    assert primaries == 2000
    # it starts full, an advance the first requests repay: within the share over the job
    assert 0 < metrics.hedges <= max(saved_hedges(0.05), 0.05 * primaries)
    # a hedge waits for a free slot, while slow first requests hold most of them: most win
    assert 0.8 * metrics.hedges <= metrics.hedges_won <= metrics.hedges
    assert sum(store.asked.values()) == 2000 + metrics.hedges


def test_a_quantile_delay_waits_for_enough_answers_then_follows_the_latencies() -> None:
    keys = list(range(400))
    slow = {3} | {k for k in keys if k % 25 == 0 and k >= 100}

    def store_of() -> TailStore:
        store = TailStore(slow)
        rng = random.Random(5)
        fast = store._latency

        def latency(asked: Sequence[Any]) -> float:  # 2-10 ms, or the 500 ms tail
            return 0.5 if fast(asked) == 0.5 else 0.002 + 0.008 * rng.random()

        store.latency = latency
        return store

    rows, metrics, _ = run(store_of(), keys, hedge=hedged("p90"), capacity=1)
    # capacity 1: a hedge waits for the slot its own request holds: never sent
    assert metrics.hedges == 0 and metrics.peak_in_flight == 1 and len(rows) == 400
    store = store_of()
    rows, metrics, _ = run(store, keys, hedge=hedged("p90", budget=0.2), capacity=4)
    assert [r["name"] for r in rows] == [f"user-{k}" for k in keys]
    # key 3 comes before MIN_SAMPLES answers: hedged after the delay given for that stretch
    # (200 ms here); every later slow key past the quantile; each hedge wins
    assert all(store.asked[k] == 2 for k in slow)
    # past p90, about a tenth of the fast requests are hedged too (what a quantile means)
    assert len(slow) <= metrics.hedges <= max(saved_hedges(0.2), 0.2 * 400)
    assert metrics.peak_in_flight <= 4


def test_a_hedge_answers_when_the_first_request_fails_and_the_first_error_when_both_fail() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        abandoned: set[asyncio.Future[Any]] = set()
        calls: list[str] = []

        async def slow_then_fail() -> str:
            calls.append("first")
            await asyncio.sleep(0.2)
            raise TransientError("first failed")

        async def fast() -> str:
            calls.append("hedge")
            await asyncio.sleep(0.3)
            return "hedge answer"

        won: list[int] = []
        answer = await race(
            slow_then_fail,
            limit_s=1.0,
            delay_s=0.1,
            gate=Unlimited(),
            start_hedge=fast,
            hedge_won=lambda: won.append(1),
            abandoned=abandoned,
        )
        assert answer == "hedge answer" and won == [1] and calls == ["first", "hedge"]
        assert abs(loop.time() - 0.4) < 1e-6

        async def failing(message: str, after: float) -> str:
            await asyncio.sleep(after)
            raise TransientError(message)

        with pytest.raises(TransientError, match="first request"):
            await race(
                lambda: failing("first request", 0.3),
                limit_s=1.0,
                delay_s=0.1,
                gate=Unlimited(),
                start_hedge=lambda: failing("the hedge", 0.05),
                hedge_won=lambda: None,
                abandoned=abandoned,
            )
        # no answer within the attempt's limit: a timeout; both requests cancelled
        with pytest.raises(TimeoutError):
            await race(
                lambda: asyncio.sleep(5),
                limit_s=0.5,
                delay_s=0.1,
                gate=Unlimited(),
                start_hedge=lambda: asyncio.sleep(5),
                hedge_won=lambda: None,
                abandoned=abandoned,
            )
        await asyncio.sleep(0.01)
        assert not abandoned

    VirtualTimeLoop().run_until_complete(scenario())


def test_hedged_timeouts_are_retried_and_counted() -> None:
    store = TailStore(set())

    def latency(keys: Sequence[Any]) -> float:  # keys 1 and 2: their first two asks hang
        store.asked.update(keys)
        return 5.0 if keys[0] in (1, 2) and store.asked[keys[0]] <= 2 else 0.001

    store.latency = latency
    rows, metrics, _ = run(store, [1, 2, 3], hedge=hedged(0.05), timeout_ms=200)
    assert [r["name"] for r in rows] == ["user-1", "user-2", "user-3"]
    assert metrics.timeouts == 2 and metrics.retries == 2 and metrics.hedges == 2
    assert metrics.hedges_won == 0 and store.in_flight == 0


def test_a_hedge_waits_for_the_rate_limit() -> None:
    keys = list(range(40))
    store = TailStore(set(keys), tail_s=0.5, fast_s=0.001)
    _, metrics, took = run(store, keys, hedge=hedged(0.01), rate_limit=100.0, capacity=40)
    # every request is slow, and hedged (a budget of 100%) unless its answer comes before its
    # hedge's turn at the rate limit: at 100 requests per second, the last request starts
    # (requests - 1) / 100 s in (the requests alone: 0.39 s)
    assert 30 <= metrics.hedges <= 40 and metrics.requests == 40 + metrics.hedges
    assert took >= (metrics.requests - 1) / 100
    assert took >= (metrics.requests - 1) / 100


def test_a_failing_request_before_the_delay_is_retried_as_without_hedging() -> None:
    store = TailStore(set())
    store.failures = [TransientError("boom")]
    rows, metrics, _ = run(store, [5], hedge=hedged(0.05))
    assert rows[0]["name"] == "user-5" and metrics.retries == 1 and metrics.hedges == 0
    store = TailStore(set())
    store.failures = [TransientError("boom")] * 5
    with pytest.raises(LookupFailedError):
        run(store, [5], hedge=hedged(0.05), max_attempts=2)


def test_budget_window_and_options() -> None:
    budget = HedgeBudget(0.25, tokens=0)
    spent = 0
    for _ in range(100):
        budget.earn()
        spent += budget.spend()
    assert spent == 25
    fresh = HedgeBudget(0.05)  # starts full: a job's first slow requests are hedged too
    assert saved_hedges(0.05) == 50 and saved_hedges(0.001) == MAX_TOKENS
    assert fresh.has() and sum(fresh.spend() for _ in range(60)) == 50
    for _ in range(999):  # the first 1,000 requests repay the advance: 50 over 1,000 requests
        fresh.earn()
    assert not fresh.has()
    for _ in range(21):  # then one hedge per 20 requests
        fresh.earn()
    assert fresh.spend() and not fresh.spend()
    repaid = HedgeBudget(0.05)  # an advance unspent is repaid all the same: then it saves up
    for _ in range(1000 + 20 * 60):
        repaid.earn()
    assert sum(repaid.spend() for _ in range(60)) == 50
    window = LatencyWindow(size=100)
    for i in range(MIN_SAMPLES - 1):
        window.add(i / 1000)
    assert window.quantile(0.9) is None
    for i in range(200):
        window.add(i / 1000)
    assert window.quantile(0.5) == pytest.approx(0.1495, abs=0.002)
    assert Hedging(after_s=0.02, budget=0.1).delay_s() == 0.02
    before = Hedging(after_s=0.05, quantile=0.9, budget=0.1)
    assert before.delay_s() == 0.05  # too few answers yet: the delay given for that stretch
    for i in range(MIN_SAMPLES):
        before.answered(i / 1000)
    assert before.delay_s() == pytest.approx(0.0171, abs=0.001)
    with pytest.raises(ValueError):
        Hedging(after_s=0, budget=0.1)
    base = {"connector": "redis", "url": "redis://h"}
    assert parse_options({**base, "hedge.after.ms": "40"}).hedge.after == HedgeAfter(seconds=0.04)
    assert parse_options({**base, "hedge.after.ms": "p99.9"}).hedge.after == HedgeAfter(
        seconds=0.2, quantile=0.999
    )
    assert parse_options({**base, "hedge.after.ms": "p95, 50"}).hedge.after == HedgeAfter(
        seconds=0.05, quantile=0.95
    )
    assert parse_options({**base, "hedge.after.ms": "0"}).hedge.after is None
    assert parse_options({**base, "hedge.budget": "10%"}).hedge.budget == 0.1
    bad_values = (("p30", "p50"), ("-3", "positive"), ("soon", "milliseconds"))
    for bad, word in (*bad_values, ("p95,0", "positive"), ("p95,x", "milliseconds")):
        with pytest.raises(Exception, match=f"hedge.after.ms.*{word}"):
            parse_options({**base, "hedge.after.ms": bad})
    with pytest.raises(Exception, match="hedge.budget"):
        parse_options({**base, "hedge.budget": "0"})


def test_a_workers_hedging_is_never_shared_across_settings_or_lookups() -> None:
    from dataclasses import replace

    from lookup_source.engine.kept.identity import LookupIdentity
    from lookup_source.engine.kept.worker import current_worker, forget_worker

    forget_worker()
    config = make_config(make_spec(make_options()))
    other_table = replace(config, options={"fake.table": "b"})

    def worker_hedging(config: Any, settings: Any) -> Any:
        return current_worker().kept.hedging(LookupIdentity.of(config), settings, [])

    fixed, p95 = hedged(0.05), hedged("p95")
    first = worker_hedging(config, fixed)
    assert worker_hedging(config, fixed) is first  # the next task of the same lookup
    assert worker_hedging(config, p95) is not first
    assert worker_hedging(config, hedged(0.05, budget=0.2)) is not first
    assert worker_hedging(other_table, fixed) is not first
    first.answered(0.5)
    first.budget.earn()
    assert len(worker_hedging(other_table, fixed).window._values.nonzero()[0]) == 0
    forget_worker()
