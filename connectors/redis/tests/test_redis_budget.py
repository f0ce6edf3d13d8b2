"""The cluster budget's Redis coordinator (``budget.url``), against a real redis-server: many
holders (each one task's :class:`TaskBudget`) share one budget, on real time.

What each test counts is what the budget promises: requests in flight never above
``budget.max-in-flight``, requests in any one-second window never above ``budget.rate`` (and
one), cost units in any window never above the budget's (and one request's), leases of a
holder that stops calling returned after ``budget.lease.ms``, a coordinator that goes away
(down, silent, restarted) answered by the static split and never more than one grant of
over-admission.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from asynclookup_redis.budget import RedisBudgetCoordinator, budget_keys

from lookup_source.connector_api import BudgetAsk, BudgetLimits
from lookup_source.engine.metrics import LookupMetrics
from lookup_source.engine.request.budget import StaticShare, TaskBudget
from tests.servers import RedisServer, own_redis_server


@pytest.fixture
def budget_name(redis_db: Any) -> Iterator[str]:
    name = f"test-{uuid.uuid4().hex[:10]}"
    yield name
    for key in budget_keys(name):
        redis_db.delete(key)


class Counter:
    """Requests in flight now, the most at once, and when each was admitted."""

    def __init__(self) -> None:
        self.now = 0
        self.peak = 0
        self.admitted: list[tuple[float, float]] = []  # (loop time, cost)
        self.done = 0
        self.lag_max = 0.0
        """The loop's longest lateness in the run (a probe's 10 ms sleeps): an admission is
        seen when its holder wakes, up to this late after its grant."""
        self.lag_total = 0.0
        """The loop's lateness summed over the run: what a busy machine added to it."""

    def slack(self, rate: float) -> int:
        """Admissions a window may see beyond ``rate`` per second: those the loop's lateness
        bunched into it."""
        return int(rate * self.lag_max) + 1


async def probe_lag(counter: Counter, stop: asyncio.Event) -> None:
    """Measure how late the loop wakes a 10 ms sleep, until ``stop``."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        asked = loop.time() + 0.01
        await asyncio.sleep(0.01)
        late = max(0.0, loop.time() - asked)
        counter.lag_max = max(counter.lag_max, late)
        counter.lag_total += late


def window_peak(admitted: list[tuple[float, float]], window_s: float) -> float:
    """The most cost admitted in any window of ``window_s`` (starting at an admission)."""
    times = sorted(admitted)
    best = 0.0
    end = 0
    total = 0.0
    for start in range(len(times)):
        while end < len(times) and times[end][0] < times[start][0] + window_s:
            total += times[end][1]
            end += 1
        best = max(best, total)
        total -= times[start][1]
    return best


async def holder_work(
    budget: TaskBudget,
    counter: Counter,
    requests: int,
    *,
    capacity: int = 10,
    cost: float = 1.0,
    busy_s: float = 0.005,
) -> None:
    """One task: ``requests`` requests of ``busy_s``, at most ``capacity`` at once."""
    loop = asyncio.get_running_loop()
    slots = asyncio.Semaphore(capacity)

    async def one() -> None:
        async with slots:
            await budget.admit(cost)
            try:
                counter.now += 1
                counter.peak = max(counter.peak, counter.now)
                counter.admitted.append((loop.time(), cost))
                await asyncio.sleep(busy_s)
            finally:
                counter.now -= 1
                counter.done += 1
                budget.done()

    await asyncio.gather(*(one() for _ in range(requests)))


def coordinator(url: str) -> RedisBudgetCoordinator:
    return RedisBudgetCoordinator(RedisBudgetCoordinator.config_for(url))


def task_budget(
    name: str,
    store: RedisBudgetCoordinator | None,
    limits: BudgetLimits,
    *,
    tasks: int = 4,
    timeout_s: float = 5.0,  # not budget.timeout.ms's 0.5 s: a busy machine's late answer
    # would be a fallback to the static share, which the tests of the budget do not expect
    warned: set[str] | None = None,
) -> TaskBudget:
    return TaskBudget(
        name,
        limits,
        StaticShare(limits, tasks),
        LookupMetrics(tasks=1),
        coordinator=store,
        timeout_s=timeout_s,
        warned=warned,
    )


async def run_holders(
    url: str,
    name: str,
    limits: BudgetLimits,
    requests: list[int],
    **work: Any,
) -> tuple[Counter, list[TaskBudget], float]:
    store = coordinator(url)
    await store.open()
    try:
        warned: set[str] = set()  # kept beside the coordinator, as a worker keeps it
        budgets = [task_budget(name, store, limits, warned=warned) for _ in requests]
        counter = Counter()
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        probe = asyncio.ensure_future(probe_lag(counter, stop))
        started = loop.time()
        await asyncio.gather(
            *(holder_work(b, counter, n, **work) for b, n in zip(budgets, requests))
        )
        elapsed = loop.time() - started
        stop.set()
        await probe
        for budget in budgets:
            await budget.aclose()
        return counter, budgets, elapsed
    finally:
        await store.close()


def test_requests_in_flight_never_exceed_the_budget_across_holders(
    redis_srv: RedisServer, budget_name: str, redis_db: Any
) -> None:
    limits = BudgetLimits(max_in_flight=8, lease_s=5.0)
    counter, budgets, _ = asyncio.run(
        run_holders(redis_srv.url, budget_name, limits, [60] * 6, capacity=10)
    )
    assert counter.done == 360
    assert counter.peak == 8  # used to the full, never above
    assert all(b.metrics.budget_grants >= 1 for b in budgets)
    assert sum(b.metrics.budget_waits for b in budgets) > 0
    leases, expiry = budget_keys(budget_name)[:2]
    assert redis_db.hgetall(leases) == {} and redis_db.zcard(expiry) == 0  # all given back


def test_rate_across_holders_holds_in_every_second_and_is_used(
    redis_srv: RedisServer, budget_name: str
) -> None:
    limits = BudgetLimits(rate=200.0)
    counter, budgets, elapsed = asyncio.run(
        run_holders(redis_srv.url, budget_name, limits, [75, 75, 75, 75], capacity=20)
    )
    assert counter.done == 300
    # admissions are seen when their holder wakes, up to the loop's lateness after the grant
    # (measured in the run: tens of ms on a loaded machine, more beside another job): windows
    # a tenth shorter than the budget's own, and the admissions that lateness bunched
    slack = counter.slack(200.0)
    assert window_peak(counter.admitted, 0.9) <= 200 + slack, counter.lag_max
    assert window_peak(counter.admitted, 0.45) <= 100 + slack, counter.lag_max
    # 300 requests at 200/s: 1.5 s of slots; grants left unused at the end cost a little,
    # and the loop's lateness adds to it
    assert 1.4 <= elapsed <= 2.2 + counter.lag_total, (elapsed, counter.lag_total)
    calls = sum(b.metrics.budget_grants for b in budgets)
    assert calls < 300 / 3, calls  # grants, not a round trip per request


def test_cost_per_minute_counts_each_requests_cost(
    redis_srv: RedisServer, budget_name: str
) -> None:
    limits = BudgetLimits(cost_rate=6000 / 60)  # 6,000 units a minute: 100 a second
    counter, _, elapsed = asyncio.run(
        run_holders(redis_srv.url, budget_name, limits, [30, 30], cost=5.0, capacity=8)
    )
    assert counter.done == 60
    assert window_peak(counter.admitted, 1.0) <= 100 + 5 * counter.slack(100.0 / 5)
    assert 2.8 <= elapsed <= 4.0 + counter.lag_total, elapsed  # 300 units at 100/s


def test_a_holder_that_stops_calling_loses_its_leases_after_the_lease_time(
    redis_srv: RedisServer, budget_name: str
) -> None:
    limits = BudgetLimits(max_in_flight=3, lease_s=0.6)

    async def scenario() -> tuple[float, int]:
        store = coordinator(redis_srv.url)
        await store.open()
        try:
            dead = task_budget(budget_name, store, limits)
            for _ in range(3):
                await dead.admit()
            assert dead._keeper is not None
            dead._closed = True  # the worker is killed: it never calls again
            dead._keeper.cancel()
            alive = task_budget(budget_name, store, limits)
            loop = asyncio.get_running_loop()
            started = loop.time()
            await alive.admit()
            waited = loop.time() - started
            alive.done()
            await alive.aclose()
            return waited, alive.metrics.budget_waits
        finally:
            await store.close()

    waited, waits = asyncio.run(scenario())
    # it waited for the dead holder's leases to lapse (0.6 s), and not for ever: the upper
    # bound is loose, a busy machine wakes the waiter late
    assert 0.4 <= waited <= 5 * 0.6, waited
    assert waits == 1


def test_a_busy_holder_gives_back_what_exceeds_its_fair_share(
    redis_srv: RedisServer, budget_name: str
) -> None:
    limits = BudgetLimits(max_in_flight=10, lease_s=5.0)

    async def scenario() -> tuple[int, int, float]:
        store = coordinator(redis_srv.url)
        await store.open()
        try:
            greedy, late = (
                task_budget(budget_name, store, limits),
                task_budget(budget_name, store, limits),
            )
            counter = Counter()
            first = asyncio.ensure_future(
                holder_work(greedy, counter, 600, capacity=20, busy_s=0.01)
            )
            # the greedy one comes to hold all ten (waited for, not timed: a busy machine
            # may take longer than its 10 ms requests suggest)
            deadline = asyncio.get_running_loop().time() + 30.0
            while greedy._held < 10 and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.005)
            assert greedy._held == 10
            late_counter = Counter()
            await holder_work(late, late_counter, 100, capacity=20, busy_s=0.01)
            greedy_done_then = counter.done
            await first
            for budget in (greedy, late):
                await budget.aclose()
            return late_counter.peak, greedy_done_then, late_counter.done
        finally:
            await store.close()

    late_peak, greedy_done_then, late_done = asyncio.run(scenario())
    assert late_done == 100
    assert late_peak >= 4  # it got about half, not the scraps
    # and it got it while the greedy one still had work: 100 requests at half the budget end
    # well before the greedy one's 600 (at one or two at a time, after them). Counted in
    # requests, not seconds, so a busy machine slows both sides alike.
    assert greedy_done_then < 600, greedy_done_then


def test_the_coordinator_down_falls_back_to_the_static_share_and_logs_once(
    budget_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    from tests.servers import free_port

    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens
    limits = BudgetLimits(max_in_flight=8, rate=400.0)
    caplog.set_level(logging.WARNING, logger="lookup_source")
    counter, budgets, _ = asyncio.run(run_holders(url, budget_name, limits, [40, 40]))
    assert counter.done == 80
    assert counter.peak <= 2 * (8 // 4)  # two tasks, each its share of four
    assert window_peak(counter.admitted, 1.0) <= 2 * (400 / 4) + 1 + counter.slack(200.0)
    assert all(b.metrics.budget_fallbacks == 1 for b in budgets)
    warnings = [r for r in caplog.records if "did not answer" in r.getMessage()]
    assert len(warnings) == 1 and budget_name in warnings[0].getMessage()
    assert "static share (1/4" in warnings[0].getMessage()


def test_a_silent_coordinator_falls_back_within_its_time_limit(
    silent_port: int, budget_name: str
) -> None:
    url = f"redis://127.0.0.1:{silent_port}/0"
    limits = BudgetLimits(max_in_flight=4)

    async def scenario() -> tuple[float, LookupMetrics]:
        store = coordinator(url)
        await store.open()
        try:
            budget = task_budget(budget_name, store, limits, tasks=2, timeout_s=0.2)
            loop = asyncio.get_running_loop()
            started = loop.time()
            await budget.admit()
            waited = loop.time() - started
            budget.done()
            await budget.aclose()
            return waited, budget.metrics
        finally:
            await store.close()

    waited, metrics = asyncio.run(scenario())
    # its 0.2 s limit, then the static share; loose above, a busy machine wakes it late
    assert 0.15 <= waited <= 3.0, waited
    assert metrics.budget_fallbacks == 1 and metrics.budget_waits == 1


def test_a_redis_restart_mid_run_never_admits_more_than_one_grant_too_many() -> None:
    with own_redis_server() as server:
        _restart_scenario(server)


def _restart_scenario(server: RedisServer) -> None:
    limits = BudgetLimits(max_in_flight=6, lease_s=1.5)
    name = "restart"

    async def scenario() -> tuple[Counter, list[TaskBudget]]:
        store = coordinator(server.url)
        await store.open()
        try:
            budgets = [task_budget(name, store, limits, tasks=3) for _ in range(3)]
            counter = Counter()
            work = asyncio.gather(
                *(holder_work(b, counter, 400, capacity=6, busy_s=0.01) for b in budgets)
            )
            # the run at its peak (a busy machine may take a while to get there), then the
            # store goes away mid-run
            deadline = asyncio.get_running_loop().time() + 30.0
            while counter.peak < 6 and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.01)
            peak_before = counter.peak
            assert peak_before >= 6, "the run never reached its peak"
            # a coordinator that does not answer in time (a busy machine) is a fallback to
            # the static share already, with the same allowance as the restart's below
            if sum(b.metrics.budget_fallbacks for b in budgets) == 0:
                assert peak_before == 6, peak_before
            else:
                assert peak_before <= 6 + 3, peak_before
            assert counter.done < 600, "the run was mostly over before the restart"
            server.kill()
            await asyncio.sleep(0.3)
            server.start()  # empty: every lease count is gone
            await work
            for budget in budgets:
                await budget.aclose()
            return counter, budgets
        finally:
            await store.close()

    counter, budgets = asyncio.run(scenario())
    assert counter.done == 1200
    fallbacks = sum(b.metrics.budget_fallbacks for b in budgets)
    assert fallbacks >= 1  # the restart was seen
    # the static share is 2 each; after the restart each holder says what it holds: at most
    # one grant per holder beyond the budget, for a moment
    assert counter.peak <= 6 + 3, counter.peak


def test_budget_keys_share_one_hash_tag_and_expire(
    redis_srv: RedisServer, budget_name: str, redis_db: Any
) -> None:
    keys = budget_keys(budget_name)
    tags = {key[key.index("{") : key.index("}") + 1] for key in keys}
    assert tags == {"{" + budget_name.encode().hex() + "}"}
    assert budget_keys("a{b}")[0] != budget_keys("a(b)")[0]  # any name is its own keys
    assert budget_keys("ü:\n")[0] == "asynclookup:budget:{c3bc3a0a}:leases"

    async def ask() -> None:
        store = coordinator(redis_srv.url)
        await store.open()
        try:
            limits = BudgetLimits(max_in_flight=2, rate=10.0, lease_s=1.0)
            loop = asyncio.get_running_loop()
            asked = loop.time()
            grant = await store.ask(budget_name, limits, BudgetAsk("h1", 0, 5, 3, 0.0))
            assert grant.leases == 2 and grant.fair_share == 2 and not grant.contended
            assert grant.requests_delay_s == 0.0
            refused = await store.ask(budget_name, limits, BudgetAsk("h2", 0, 1, 1, 0.0))
            between = loop.time() - asked
            assert refused.leases == 0
            # after h1's three slots (0.3 s at 10 a second), less the time between the asks
            assert 0.3 - between - 0.01 <= refused.requests_delay_s <= 0.31, (
                refused.requests_delay_s,
                between,
            )
            again = await store.ask(budget_name, limits, BudgetAsk("h1", 2, 0, 0, 0.0))
            assert again.contended and again.fair_share == 1  # h2 waits
        finally:
            await store.close()

    asyncio.run(ask())
    for key in keys[:2]:
        ttl = redis_db.pttl(key)
        assert 0 < ttl <= 2 * 1000 + 10_000


HOLDER = """
import asyncio, sys
from asynclookup_redis.budget import RedisBudgetCoordinator
from lookup_source.connector_api import BudgetLimits
from lookup_source.engine.request.budget import StaticShare, TaskBudget
from lookup_source.engine.metrics import LookupMetrics

async def main():
    store = RedisBudgetCoordinator(RedisBudgetCoordinator.config_for(sys.argv[1]))
    await store.open()
    limits = BudgetLimits(max_in_flight=3, lease_s=1.0)
    budget = TaskBudget(sys.argv[2], limits, StaticShare(limits, 1), LookupMetrics(),
                        coordinator=store)
    for _ in range(3):
        await budget.admit()
    print("held", flush=True)
    await asyncio.sleep(3600)  # requests that never end, until the worker is killed

asyncio.run(main())
"""


def test_a_killed_worker_process_leases_return_within_the_lease_time(
    redis_srv: RedisServer, budget_name: str
) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    worker = subprocess.Popen(
        [sys.executable, "-c", HOLDER, redis_srv.url, budget_name],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert worker.stdout is not None and worker.stdout.readline().strip() == "held"
        time.sleep(0.5)  # it renews its leases meanwhile (every third of the lease time)
        os.kill(worker.pid, signal.SIGKILL)  # as Spark ends a Python worker
        killed = time.monotonic()
    finally:
        worker.kill()
        worker.wait(10)
    limits = BudgetLimits(max_in_flight=3, lease_s=1.0)

    async def admitted() -> float:
        store = coordinator(redis_srv.url)
        await store.open()
        try:
            budget = task_budget(budget_name, store, limits)
            await budget.admit()
            waited = time.monotonic() - killed
            budget.done()
            await budget.aclose()
            return waited
        finally:
            await store.close()

    waited = asyncio.run(admitted())
    # its last renewal + the lease time (1.5 s at most), with room for a busy machine: far
    # below a lease that never lapses
    assert 0.5 <= waited <= 1.0 + 0.5 + 2.0, waited


def ask_once(url: str, name: str, limits: BudgetLimits, ask: BudgetAsk) -> Any:
    async def call() -> Any:
        store = coordinator(url)
        await store.open()
        try:
            return await store.ask(name, limits, ask)
        finally:
            await store.close()

    return asyncio.run(call())


def test_a_budget_keeps_its_first_limits_and_names_them_to_a_lookup_giving_others(
    redis_srv: RedisServer, budget_name: str
) -> None:
    from lookup_source.connector_api import BudgetConflictError

    mine = BudgetLimits(max_in_flight=8, rate=100.0, lease_s=1.0)
    assert ask_once(redis_srv.url, budget_name, mine, BudgetAsk("a", 0, 8)).leases == 8
    wider = BudgetLimits(max_in_flight=1000, rate=100.0, lease_s=1.0)
    with pytest.raises(BudgetConflictError) as info:
        ask_once(redis_srv.url, budget_name, wider, BudgetAsk("b", 0, 500))
    message = str(info.value)
    assert "budget.max-in-flight=8" in message and "budget.rate=100" in message
    assert "this one gives 1000" in message and "another budget.name" in message
    slower = BudgetLimits(max_in_flight=8, rate=0.01, lease_s=1.0)  # would push A's slots out
    with pytest.raises(BudgetConflictError):
        ask_once(redis_srv.url, budget_name, slower, BudgetAsk("b", 0, 0, 1))


def test_one_call_reserves_at_most_a_minute_of_budget(
    redis_srv: RedisServer, budget_name: str, redis_db: Any
) -> None:
    from lookup_source.connector_api import BudgetConflictError

    limits = BudgetLimits(cost_rate=10.0, lease_s=1.0)  # 600 a minute
    with pytest.raises(BudgetConflictError, match="more than a minute of the budget"):
        ask_once(redis_srv.url, budget_name, limits, BudgetAsk("a", cost=1e9))
    assert redis_db.get(budget_keys(budget_name)[4]) is None  # nothing reserved
    assert ask_once(redis_srv.url, budget_name, limits, BudgetAsk("a", cost=600)).cost_delay_s == 0


def test_a_holder_whose_leases_lapsed_keeps_only_what_is_free(
    redis_srv: RedisServer, budget_name: str
) -> None:
    import time

    limits = BudgetLimits(max_in_flight=4, lease_s=0.3)
    url = redis_srv.url
    assert ask_once(url, budget_name, limits, BudgetAsk("a", 0, 4)).held == 4
    time.sleep(0.4)  # a's worker stood still past the lease time
    assert ask_once(url, budget_name, limits, BudgetAsk("b", 0, 4)).held == 4
    back = ask_once(url, budget_name, limits, BudgetAsk("a", 4, 0))  # it says it holds 4
    assert back.held == 0  # none is free: it is told it holds none
    stranger = ask_once(url, budget_name, limits, BudgetAsk("c", 9, 0))
    assert stranger.held == 0  # nobody can claim leases it was never granted


def test_values_written_by_others_never_widen_the_budget(
    redis_srv: RedisServer, budget_name: str, redis_db: Any
) -> None:
    leases, expiry, _, rate_key, _, _, rate_gap, _ = budget_keys(budget_name)
    limits = BudgetLimits(max_in_flight=4, rate=10.0, lease_s=5.0)
    redis_db.hset(leases, mapping={"x": "-100", "y": "garbage", "z": "3"})
    redis_db.zadd(expiry, {"x": 1e15, "y": 1e15, "z": 1e15})
    redis_db.set(rate_key, "not a number")
    redis_db.set(rate_gap, "0 1e15")  # a gap beyond the next free slot: never given
    grant = ask_once(redis_srv.url, budget_name, limits, BudgetAsk("a", 0, 10, 1))
    assert grant.leases == 1  # 4 - 3 (z); x and y count as 0, never as room
    assert grant.requests_delay_s == 0.0


def test_slots_asked_ahead_start_after_the_answers_time_and_never_overlap(
    redis_srv: RedisServer, budget_name: str
) -> None:
    """A holder whose answers come late asks for slots due once the answer can be there
    (``ahead_s``); a budget already reserved further than that goes on from where it is; the
    time an ask ahead passed over is given to the next reservations that fit in it."""
    limits = BudgetLimits(rate=100.0, lease_s=5.0)  # a slot every 10 ms

    async def asks() -> list[float]:
        store = coordinator(redis_srv.url)
        await store.open()
        try:
            first = await store.ask(budget_name, limits, BudgetAsk("late", requests=5, ahead_s=0.3))
            # the next free slot is now 350 ms away: a second ahead ask starts there
            second = await store.ask(
                budget_name, limits, BudgetAsk("late", requests=5, ahead_s=0.3)
            )
            prompt = await store.ask(budget_name, limits, BudgetAsk("prompt", requests=1))
            garbage = await store.ask(
                budget_name, limits, BudgetAsk("odd", requests=1, ahead_s=float("nan"))
            )
            # the server's clock the delays count from (here the same host's wall clock)
            assert first.clock_s is not None and abs(first.clock_s - time.time()) < 5.0
            assert second.clock_s is not None and second.clock_s >= first.clock_s
            return [
                first.requests_delay_s,
                second.requests_delay_s,
                prompt.requests_delay_s,
                garbage.requests_delay_s,
                second.clock_s - first.clock_s,  # the server's time between the two asks
            ]
        finally:
            await store.close()

    first, second, prompt, garbage, between = asyncio.run(asks())
    assert 0.299 <= first <= 0.3
    # after the first five (50 ms from the first's 300), none skipped: 350 ms after the first
    # ask, however long the second took to come (on a busy machine, more than a slot)
    assert 0.349 <= second + between <= 0.351, (second, between)
    assert 0.0 <= prompt <= 0.01  # in the time the first ask ahead passed over, not lost
    assert 0.0 <= garbage <= 0.02  # an odd ahead_s counts as none: next in that time
