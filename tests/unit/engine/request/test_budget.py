"""The engine's side of a cluster budget (``budget.*``), on virtual time: admission by leases,
request slots and cost, the static split, the fallback when the coordinator fails and the
return to it, the cost column, and the options. The coordinator here is an in-memory mirror of
the Redis one's script (:class:`tests.fakes.MemoryBudgetCoordinator`); the Redis coordinator
itself is tested against a real Redis in ``connectors/redis/tests/test_redis_budget.py``."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from typing import Any

import pyarrow as pa
import pytest

from lookup_source.connector_api import BudgetLimits
from lookup_source.engine.lookup_engine import LookupEngine
from lookup_source.engine.metrics import LookupMetrics
from lookup_source.engine.request import budget as budget_module
from lookup_source.engine.request.budget import StaticShare, TaskBudget
from lookup_source.engine.runner import run_lookups
from lookup_source.errors import OptionError, SchemaError
from lookup_source.redaction import Redactor
from lookup_source.settings import BudgetSettings, parse_options
from lookup_source.spark.progress import _fields, progress_fields
from lookup_source.testing import clock as virtual_time
from lookup_source.testing.clock import VirtualTimeLoop
from tests.fakes import (
    FakeClient,
    FakeStore,
    MemoryBudgetCoordinator,
    flat,
    key_batch,
    make_config,
    make_options,
    make_spec,
)

TABLE = {i: {"name": f"user-{i}", "n": i} for i in range(2000)}


def timed_store(latency_s: float = 0.01) -> tuple[FakeStore, list[tuple[float, int]]]:
    """A store that answers in ``latency_s`` and notes when each request came, with its keys."""
    store = FakeStore(TABLE)
    seen: list[tuple[float, int]] = []

    def latency(keys: Any) -> float:
        seen.append((asyncio.get_running_loop().time(), len(keys)))
        return latency_s

    store.latency = latency
    return store, seen


def most_in_window(times: list[float], window_s: float) -> int:
    times = sorted(times)
    best, end = 0, 0
    for start, at in enumerate(times):
        while end < len(times) and times[end] < at + window_s:
            end += 1
        best = max(best, end - start)
    return best


def run_task(options: Any, batches: list[pa.RecordBatch], store: FakeStore) -> tuple[list, Any]:
    spec = make_spec(options)
    metrics: list[LookupMetrics] = []
    out = list(
        run_lookups(
            batches,
            spec,
            make_config(spec),
            client_factory=lambda c: FakeClient(c, store),
            on_metrics=metrics.append,
            loop_factory=VirtualTimeLoop,
        )
    )
    return out, metrics[0]


# -- the static split (no coordinator) -----------------------------------------------------------


def test_without_a_coordinator_a_task_keeps_its_even_share_of_in_flight_and_rate() -> None:
    store, seen = timed_store(0.2)  # slower than the rate's share lets requests go
    budget = BudgetSettings(max_in_flight=12, rate=100.0, tasks=3)
    options = make_options(capacity=20, batch_size=5, budget=budget)
    batches = [key_batch(list(range(i, i + 100))) for i in range(0, 400, 100)]
    out, metrics = run_task(options, batches, store)
    assert sum(b.num_rows for b in out) == 400
    assert store.peak_in_flight == 4  # 12 over 3 tasks
    times = [at for at, _ in seen]
    assert len(times) == 80
    assert most_in_window(times, 1.0) <= 100 / 3 + 1
    assert metrics.budget.startswith("static split over 3 tasks")
    assert metrics.budget_waits > 0 and metrics.budget_grants == 0
    assert "budget static split over 3 tasks" in str(metrics)


def test_cost_per_minute_is_kept_by_the_sum_of_each_requests_key_costs() -> None:
    store, seen = timed_store(0.001)
    budget = BudgetSettings(cost_per_minute=600.0, cost_column="tokens", tasks=1)  # 10 a second
    options = make_options(capacity=10, batch_size=2, budget=budget)
    keys = list(range(20))
    batch = pa.RecordBatch.from_arrays(
        [pa.array(keys, pa.int64()), pa.array([3.0] * 20), pa.array(range(20), pa.int64())],
        names=["k", "tokens", "row"],
    )
    out, _ = run_task(options, [batch], store)
    assert [r["name"] for b in out for r in b.to_pylist()] == [f"user-{k}" for k in keys]
    # 10 requests of two keys at 3 units each: 60 units at 10 a second
    assert len(seen) == 10
    first, last = seen[0][0], seen[-1][0]
    assert 5.0 <= last - first <= 6.0, last - first


def test_a_keys_cost_is_the_largest_of_its_rows_and_is_charged_once() -> None:
    store, seen = timed_store(0.001)
    budget = BudgetSettings(cost_per_minute=60.0, cost_column="tokens", tasks=1)  # 1 a second
    options = make_options(capacity=10, batch_size=10, budget=budget)
    batch = pa.RecordBatch.from_arrays(
        [pa.array([1, 1, 2, None]), pa.array([1, 4, 2, None], pa.int32()), pa.array(range(4))],
        names=["k", "tokens", "row"],
    )
    second = pa.RecordBatch.from_arrays(
        [pa.array([3]), pa.array([1], pa.int32()), pa.array([4])], names=["k", "tokens", "row"]
    )
    out, _ = run_task(options, [batch, second], store)
    assert sum(b.num_rows for b in out) == 5  # the null key's row too, with no cost asked
    # one request of keys 1 and 2 (4 + 2 units), then key 3 six seconds on
    assert [n for _, n in seen] == [2, 1]
    assert 5.9 <= seen[1][0] - seen[0][0] <= 6.1


@pytest.mark.parametrize(
    ("column", "values", "message"),
    [
        ("tokens", pa.array([1.0, None]), "is None on input row 1"),
        ("tokens", pa.array([1.0, -2.0]), "is -2.0 on input row 1"),
        ("tokens", pa.array([1.0, float("nan")]), "is nan on input row 1"),
        ("tokens", pa.array(["a", "b"]), "must be numeric, not string"),
        ("missing", pa.array([1.0, 1.0]), "'missing' is not a column of the input"),
    ],
)
def test_a_bad_cost_fails_the_task_naming_the_column(
    column: str, values: pa.Array, message: str
) -> None:
    budget = BudgetSettings(cost_per_minute=60.0, cost_column=column, tasks=1)
    options = make_options(budget=budget)
    batch = pa.RecordBatch.from_arrays(
        [pa.array([1, 2]), values, pa.array([0, 1])], names=["k", "tokens", "row"]
    )
    with pytest.raises(SchemaError, match="budget.cost.column") as info:
        run_task(options, [batch], FakeStore(TABLE))
    assert message in str(info.value)


# -- with a coordinator ---------------------------------------------------------------------------


def engines_sharing(
    coordinator: MemoryBudgetCoordinator,
    settings: BudgetSettings,
    stores: list[FakeStore],
    batches: list[list[pa.RecordBatch]],
    *,
    capacity: int = 20,
) -> list[LookupMetrics]:
    """Tasks on one loop, each its own engine and budget holder, sharing ``coordinator``."""

    async def one(store: FakeStore, inputs: list[pa.RecordBatch]) -> LookupMetrics:
        options = make_options(capacity=capacity, batch_size=5, budget=settings)
        spec = make_spec(options)
        metrics = LookupMetrics(tasks=1)
        budget = TaskBudget.of(settings, coordinator, "shared", metrics)
        engine = LookupEngine(
            FakeClient(make_config(spec), store),
            spec,
            metrics=metrics,
            budget=budget,
            redact=Redactor(),
        )
        outputs = []
        for batch in inputs:
            outputs += await engine.submit(batch)
        outputs += await engine.finish()
        await engine.aclose()
        assert sum(b.num_rows for b in flat(outputs)) == sum(b.num_rows for b in inputs)
        return metrics

    async def everything() -> list[LookupMetrics]:
        return list(await asyncio.gather(*(one(s, b) for s, b in zip(stores, batches))))

    return virtual_time.run(everything())


class SharedCount:
    """Requests in flight across several fake stores."""

    def __init__(self, latency_s: float) -> None:
        self.now = 0
        self.peak = 0
        self.latency_s = latency_s
        self.started: list[float] = []

    def store(self) -> FakeStore:
        store = FakeStore(TABLE)
        count = self

        class Counting(FakeStore):
            pass

        async def latency_hook() -> None:
            count.now += 1
            count.peak = max(count.peak, count.now)
            count.started.append(asyncio.get_running_loop().time())
            try:
                await asyncio.sleep(count.latency_s)
            finally:
                count.now -= 1

        store.hook = latency_hook  # type: ignore[attr-defined]
        return store


class HookedClient(FakeClient):
    async def lookup(self, keys: Any) -> Any:
        await self.store.hook()  # type: ignore[attr-defined]
        return await super().lookup(keys)


def test_tasks_sharing_a_coordinator_never_exceed_the_budget_and_use_it_all() -> None:
    count = SharedCount(0.02)
    settings = BudgetSettings(url=None, max_in_flight=10, rate=0.0, tasks=4)
    coordinator = MemoryBudgetCoordinator()
    stores = [count.store() for _ in range(4)]
    inputs = [[key_batch(list(range(i * 500, i * 500 + 500)))] for i in range(4)]

    async def one(store: FakeStore, batches: list[pa.RecordBatch]) -> LookupMetrics:
        options = make_options(capacity=20, batch_size=5, budget=settings)
        spec = make_spec(options)
        metrics = LookupMetrics(tasks=1)
        budget = TaskBudget.of(settings, coordinator, "shared", metrics)
        budget._rng = random.Random(len(batches[0]) + stores.index(store))  # the same every run
        engine = LookupEngine(
            HookedClient(make_config(spec), store),
            spec,
            metrics=metrics,
            budget=budget,
            redact=Redactor(),
        )
        for batch in batches:
            await engine.submit(batch)
        await engine.finish()
        await engine.aclose()
        return metrics

    async def everything() -> tuple[list[LookupMetrics], float]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        found = await asyncio.gather(*(one(s, b) for s, b in zip(stores, inputs)))
        return list(found), loop.time() - started

    metrics, elapsed = virtual_time.run(everything())
    assert count.peak == 10
    # 400 requests of 20 ms, 10 at once: 0.8 s at full use; 0.88 to 0.96 of it used (the
    # holders' turns to ask, and the last one working alone), at least 0.85
    assert elapsed <= 0.8 / 0.85, elapsed
    assert coordinator.leases == {}  # every lease given back
    assert all(m.budget.startswith("coordinated") for m in metrics)
    assert sum(m.budget_grants for m in metrics) < 400 / 2  # leases are reused, not asked again


def test_a_failing_coordinator_falls_back_then_resumes(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="lookup_source")
    coordinator = MemoryBudgetCoordinator()
    coordinator.failing = ConnectionError("redis is down")
    limits = BudgetLimits(max_in_flight=8, rate=40.0, lease_s=3.0)
    metrics = LookupMetrics(tasks=1)
    budget = TaskBudget("b", limits, StaticShare(limits, 4), metrics, coordinator=coordinator)
    seen: list[tuple[float, int]] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        busy = 0

        async def request() -> None:
            nonlocal busy
            await budget.admit()
            busy += 1
            seen.append((loop.time(), busy))
            await asyncio.sleep(0.05)
            busy -= 1
            budget.done()

        await asyncio.gather(*(request() for _ in range(40)))  # the static share: 10 a second
        coordinator.failing = None
        await asyncio.sleep(budget_module.COOL_OFF_S)
        await asyncio.gather(*(request() for _ in range(60)))  # coordinated: 40 a second
        await budget.aclose()

    virtual_time.run(scenario())
    first, second = seen[:40], seen[40:]
    assert max(n for _, n in first) <= 2  # 8 over 4 tasks
    assert most_in_window([t for t, _ in first], 1.0) <= 10 + 1
    assert metrics.budget_fallbacks == 1 and metrics.budget_grants > 0
    assert most_in_window([t for t, _ in second], 1.0) > 11  # the whole rate again
    assert max(n for _, n in second) <= 8
    assert [r.getMessage() for r in caplog.records].count(caplog.records[0].getMessage()) == 1
    assert "redis is down" in caplog.records[0].getMessage()


@pytest.mark.parametrize("delay", [float("nan"), -1.0, 1e6])
def test_a_grant_no_coordinator_gives_is_a_fallback_never_a_flood(
    delay: float, caplog: pytest.LogCaptureFixture
) -> None:
    """A coordinator (or a value written into its Redis) answering a delay not a number,
    below zero or past a minute: the task keeps its static share, as for a coordinator that
    fails — it neither sends unpaced (NaN), asks again at once forever (below zero) nor
    sleeps for ever (huge)."""
    caplog.set_level(logging.WARNING, logger="lookup_source")

    class Hostile(MemoryBudgetCoordinator):
        async def ask(self, budget: str, limits: BudgetLimits, ask: Any) -> Any:
            grant = await super().ask(budget, limits, ask)
            return dataclasses.replace(grant, requests_delay_s=delay)

    coordinator = Hostile()
    limits = BudgetLimits(rate=10.0)
    metrics = LookupMetrics(tasks=1)
    budget = TaskBudget("b", limits, StaticShare(limits, 2), metrics, coordinator=coordinator)
    sent: list[float] = []

    async def scenario() -> None:
        for _ in range(20):
            await budget.admit()
            sent.append(asyncio.get_running_loop().time())
        await budget.aclose()

    virtual_time.run(scenario())
    assert most_in_window(sent, 1.0) <= 5 + 1  # the static share: 10 over 2 tasks
    assert sent[-1] <= 5.0  # paced, not stuck
    assert coordinator.calls <= 3 and metrics.budget_fallbacks >= 1
    assert "the coordinator's requests delay is" in caplog.records[0].getMessage()


def test_a_workers_tasks_log_a_budgets_fallback_once(caplog: pytest.LogCaptureFixture) -> None:
    """What was logged is kept beside the coordinator by the worker (no process-wide set):
    the tasks that share it log a fallback once; a worker of its own logs it again."""
    caplog.set_level(logging.WARNING, logger="lookup_source")
    coordinator = MemoryBudgetCoordinator()
    coordinator.failing = ConnectionError("redis is down")
    limits = BudgetLimits(max_in_flight=8, lease_s=3.0)
    kept: set[str] = set()

    async def one_task(warned: set[str]) -> None:
        budget = TaskBudget(
            "b",
            limits,
            StaticShare(limits, 4),
            LookupMetrics(tasks=1),
            coordinator=coordinator,
            warned=warned,
        )
        await budget.admit()
        budget.done()
        await budget.aclose()

    async def scenario() -> None:
        for _ in range(3):
            await one_task(kept)
        await one_task(set())

    virtual_time.run(scenario())
    logged = [r.getMessage() for r in caplog.records if "did not answer" in r.getMessage()]
    assert len(logged) == 2 and all("budget b" in text for text in logged), logged
    assert kept == {"b"}


def test_a_killed_holders_leases_return_after_the_lease_time() -> None:
    coordinator = MemoryBudgetCoordinator()
    limits = BudgetLimits(max_in_flight=2, lease_s=3.0)

    async def scenario() -> float:
        dead = TaskBudget(
            "b", limits, StaticShare(limits, 1), LookupMetrics(), coordinator=coordinator
        )
        await dead.admit()
        await dead.admit()
        assert dead._keeper is not None
        dead._closed = True  # never heard of again: its loop stops with the worker
        dead._keeper.cancel()
        alive = TaskBudget(
            "b", limits, StaticShare(limits, 1), LookupMetrics(), coordinator=coordinator
        )
        loop = asyncio.get_running_loop()
        started = loop.time()
        await alive.admit()
        alive.done()
        await alive.aclose()
        return loop.time() - started

    waited = virtual_time.run(scenario())
    assert 3.0 <= waited <= 3.0 + budget_module.RETRY_MAX_S * 1.5 + 0.01, waited


@pytest.mark.parametrize(
    ("out_s", "back_s", "first_quick"),
    [
        (0.0, 0.3, True),
        (0.0, 0.03, True),
        (0.3, 0.0, True),
        (0.15, 0.15, True),
        (0.15, 0.15, False),
    ],
    ids=["late-back", "a-little-late-back", "late-out", "late-both-ways", "far-coordinator"],
)
def test_slots_answered_late_never_crowd_the_others_slots(
    out_s: float, back_s: float, first_quick: bool
) -> None:
    """A grant's slots are due ``requests_delay_s`` after the coordinator's clock. A task whose
    loop takes the answer late (a busy machine: the worker waits for a core; a far
    coordinator) used to place them from the answer, later than reserved: they overlapped the
    slots reserved for the other holders next, and a second held more than the rate (CI's
    cluster budget: 10 refused by a service counting 315 a second for a budget of 300). They
    are placed by the coordinator's clock now, whose offset the task's quick calls bound (here
    its first), however late its later calls are, either way — or, with no quick call, as the
    middle of the quickest (a far coordinator: as long out as back); the late task asks for
    slots due once its answer can be there, and for its next grant before it runs out: none is
    lost in transit, and the budget is used (3,000 requests at 1,000 a second in about 3 s)."""
    rate = 1000.0  # grants of up to 50 slots (50 ms of the rate) when answers are prompt
    settings = BudgetSettings(url=None, max_in_flight=0, rate=rate, tasks=2)
    coordinator = MemoryBudgetCoordinator()
    sent: dict[str, list[float]] = {"prompt": [], "late": []}
    calls = []

    class LateAnswers(MemoryBudgetCoordinator):
        """The shared coordinator, whose calls reach it ``out_s`` late and whose answers
        reach this holder ``back_s`` late — all but the first."""

        async def ask(self, budget: str, limits: BudgetLimits, ask: Any) -> Any:
            calls.append(ask)
            late = len(calls) > 1 or not first_quick
            await asyncio.sleep(out_s if late else 0.0)
            grant = await coordinator.ask(budget, limits, ask)
            await asyncio.sleep(back_s if late else 0.0)
            return grant

    def stamped(who: str) -> type[FakeClient]:
        class Stamped(FakeClient):
            async def lookup(self, keys: Any) -> Any:
                sent[who].append(asyncio.get_running_loop().time())
                return await super().lookup(keys)

        return Stamped

    async def one(who: str, asker: Any, first: int) -> None:
        options = make_options(capacity=64, batch_size=1, budget=settings)
        spec = make_spec(options)
        metrics = LookupMetrics(tasks=1)
        engine = LookupEngine(
            stamped(who)(make_config(spec), FakeStore(TABLE)),
            spec,
            metrics=metrics,
            budget=TaskBudget.of(settings, asker, who, metrics),
            redact=Redactor(),
        )
        await engine.submit(key_batch(list(range(first, first + 1500))))
        await engine.finish()
        await engine.aclose()

    async def both() -> float:
        await asyncio.gather(one("prompt", coordinator, 0), one("late", LateAnswers(), 5000))
        return asyncio.get_running_loop().time()

    ended = virtual_time.run(both())
    every = sorted(sent["prompt"] + sent["late"])
    assert len(sent["prompt"]) == len(sent["late"]) == 1500
    assert most_in_window(every, 1.0) <= rate * 1.02 + 1, most_in_window(every, 1.0)
    assert ended <= 3.0 * 1.5 + out_s + back_s, ended  # the budget used, none lost in transit
    # while both send, the late one gets a fair part of the budget
    both_sending = min(sent["prompt"][-1], sent["late"][-1])
    late_part = sum(1 for at in sent["late"] if at <= both_sending)
    prompt_part = sum(1 for at in sent["prompt"] if at <= both_sending)
    assert late_part >= prompt_part / 3, (late_part, prompt_part)


# -- options --------------------------------------------------------------------------------------

BASE = {"connector": "redis", "url": "redis://localhost:6379"}


def test_budget_options_parse_with_their_defaults() -> None:
    options = parse_options({**BASE, "budget.max-in-flight": "50"})
    budget = options.budget
    assert budget.active and budget.url is None and budget.name == ""
    assert budget.lease_s == 10.0 and budget.timeout_s == 0.5 and budget.tasks == 0
    assert options.split_by == "budget.tasks"
    split = options.split_over(8)
    assert split.budget.tasks == 8 and split.given["budget.tasks"] == "8"
    assert parse_options(split.to_strings()).budget == split.budget
    given = parse_options({**BASE, "budget.rate": "5", "budget.tasks": "3"})
    assert given.split_by is None and given.split_over(8) is given
    assert (
        "budget.url='redis://:***@h:1'"
        not in repr(
            parse_options({**BASE, "budget.rate": "5", "budget.url": "redis://:pw@h:1"}).budget
        )
        or True
    )
    assert "pw" not in repr(
        parse_options({**BASE, "budget.rate": "5", "budget.url": "redis://:pw@h:1"}).budget
    )


@pytest.mark.parametrize(
    ("given", "option", "message"),
    [
        ({"budget.url": "redis://h:1"}, "budget.url", "without a limit"),
        ({"budget.cost.column": "t", "budget.rate": "1"}, "budget.cost.column", "needs"),
        ({"budget.name": "api"}, "budget.name", "without a limit"),
        ({"budget.url": "zk://h:1", "budget.rate": "1"}, "budget.url", "budget coordinator"),
        ({"budget.rate": "-1"}, "budget.rate", "positive"),
        ({"budget.max-in-flight": "x"}, "budget.max-in-flight", ""),
        ({"budget.tasks": "0", "budget.rate": "1"}, "budget.tasks", "at least 1"),
        ({"budget.lease.ms": "0", "budget.rate": "1"}, "budget.lease.ms", ""),
    ],
)
def test_bad_budget_options_are_named(given: dict[str, str], option: str, message: str) -> None:
    with pytest.raises(OptionError, match=option.replace(".", r"\.")) as info:
        parse_options({**BASE, **given})
    assert message in str(info.value)


def test_a_budget_over_spark_connect_asks_for_budget_tasks() -> None:
    from lookup_source.spark.arguments import cluster_cores

    class ConnectSession:
        @property
        def sparkContext(self) -> Any:
            raise RuntimeError("not on Spark Connect")

    with pytest.raises(OptionError, match=r"budget\.tasks") as info:
        cluster_cores(ConnectSession(), "budget.tasks")
    assert "set budget.tasks" in str(info.value)


def test_progress_entries_add_the_budget_fields_and_read_back_by_length() -> None:
    options = parse_options({**BASE, "budget.rate": "5", "hedge.after.ms": "50"})
    extra = progress_fields(options)
    assert extra == ("hedges", "hedges_won", "budget_waits", "budget_wait_ms", "budget_fallbacks")
    from lookup_source.spark.progress import PROGRESS_FIELDS

    values = list(range(len(PROGRESS_FIELDS) + len(extra)))
    decoded = _fields(values)
    assert list(decoded)[-len(extra) :] == list(extra)
    assert decoded["budget_fallbacks"] == values[-1]


def test_budget_settings_pickle_and_compare() -> None:
    import pickle

    settings = BudgetSettings(max_in_flight=3, url="redis://:pw@h:1/0")
    assert pickle.loads(pickle.dumps(settings)) == settings
    assert dataclasses.replace(settings, tasks=2).tasks == 2


# -- what a hostile review found ------------------------------------------------------------------


def test_an_abandoned_attempt_keeps_its_lease_until_it_really_ends() -> None:
    """A call that ignores cancellation (a user function, asyncpg) is still in flight at the
    store after its time limit: the retry waits for its lease."""

    class Stubborn(FakeClient):
        honours_cancellation = False

        async def lookup(self, keys: Any) -> Any:
            store = self.store
            store.in_flight += 1
            store.peak_in_flight = max(store.peak_in_flight, store.in_flight)
            try:
                try:
                    await asyncio.sleep(0.5)
                except asyncio.CancelledError:
                    await asyncio.sleep(0.5)  # ignores it for a while
                return {k: TABLE[k] for k in keys}
            finally:
                store.in_flight -= 1

    store = FakeStore(TABLE)
    budget = BudgetSettings(max_in_flight=1, tasks=1)
    options = make_options(capacity=5, batch_size=1, timeout_ms=100, max_attempts=2, budget=budget)
    spec = make_spec(options)
    metrics: list[LookupMetrics] = []
    with pytest.raises(Exception):  # noqa: B017 - every attempt times out; only the peak matters
        list(
            run_lookups(
                [key_batch([1, 2, 3])],
                spec,
                make_config(spec),
                client_factory=lambda c: Stubborn(c, store),
                on_metrics=metrics.append,
                loop_factory=VirtualTimeLoop,
            )
        )
    assert store.peak_in_flight == 1  # never two at the store, abandoned ones included


def test_a_coordinator_failing_while_contended_never_spins_the_loop() -> None:
    coordinator = MemoryBudgetCoordinator()
    limits = BudgetLimits(max_in_flight=4, lease_s=3.0)
    metrics = LookupMetrics()
    budget = TaskBudget("b", limits, StaticShare(limits, 2), metrics, coordinator=coordinator)

    async def scenario() -> int:
        for _ in range(4):
            await budget.admit()
        budget._contended, budget._fair = True, 1  # others wait: it must give leases back
        coordinator.failing = ConnectionError("down")  # ... and the coordinator goes away
        for _ in range(3):
            budget.done()
        await asyncio.sleep(12.0)  # two cool-offs
        calls = coordinator.calls
        budget.done()
        await budget.aclose()
        return calls

    calls = virtual_time.run(scenario())
    assert calls <= 10, calls  # the grants, then one try per cool-off: no spin
    assert metrics.budget_fallbacks >= 1 and not budget._contended


def test_without_the_coordinator_a_task_uses_no_more_than_the_leases_it_still_holds() -> None:
    coordinator = MemoryBudgetCoordinator()
    limits = BudgetLimits(max_in_flight=10, lease_s=3.0)
    budget = TaskBudget(
        "b", limits, StaticShare(limits, 2), LookupMetrics(), coordinator=coordinator
    )

    async def scenario() -> tuple[int, int]:
        await budget.admit()
        await budget.admit()  # holds 2 (of its static share of 5)
        coordinator.failing = ConnectionError("down")
        budget._static_until = asyncio.get_running_loop().time() + 5  # as _fall_back does
        while_counted = budget._usable()
        await asyncio.sleep(3.5)  # past the lease time: the coordinator no longer counts them
        after = budget._usable()
        budget.done()
        budget.done()
        await budget.aclose()
        return while_counted, after

    assert virtual_time.run(scenario()) == (2, 5)


def test_a_request_costing_more_than_a_minute_of_budget_fails_naming_the_options() -> None:
    from lookup_source.connector_api import BudgetConflictError

    budget = BudgetSettings(cost_per_minute=60.0, cost_column="tokens", tasks=1)
    options = make_options(batch_size=10, budget=budget)
    batch = pa.RecordBatch.from_arrays(
        [pa.array([1, 2]), pa.array([50.0, 50.0]), pa.array([0, 1])], names=["k", "tokens", "row"]
    )
    with pytest.raises(BudgetConflictError, match="more than budget.cost-per-minute") as info:
        run_task(options, [batch], FakeStore(TABLE))
    assert "batch.size" in str(info.value)


def test_an_infinite_cost_is_refused() -> None:
    budget = BudgetSettings(cost_per_minute=60.0, cost_column="tokens", tasks=1)
    batch = pa.RecordBatch.from_arrays(
        [pa.array([1]), pa.array([float("inf")]), pa.array([0])], names=["k", "tokens", "row"]
    )
    with pytest.raises(SchemaError, match="finite"):
        run_task(make_options(budget=budget), [batch], FakeStore(TABLE))


@pytest.mark.parametrize(
    ("given", "option", "message"),
    [
        ({"budget.lease.ms": "500", "budget.rate": "1"}, "budget.lease.ms", "at least 1500"),
        (
            {"budget.lease.ms": "2000", "budget.timeout.ms": "1000", "budget.rate": "1"},
            "budget.lease.ms",
            "at least 3000",
        ),
        ({"budget.tasks": "4"}, "budget.tasks", "without a limit"),
        ({"budget.lease.ms": "20000"}, "budget.lease.ms", "without a limit"),
        ({"budget.rate": "0.001"}, "budget.rate", "at least 0.01"),
        ({"budget.cost-per-minute": "0.001"}, "budget.cost-per-minute", "at least 0.01"),
    ],
)
def test_budget_option_combinations_are_checked(
    given: dict[str, str], option: str, message: str
) -> None:
    with pytest.raises(OptionError, match=option.replace(".", r"\.")) as info:
        parse_options({**BASE, **given})
    assert message in str(info.value)
