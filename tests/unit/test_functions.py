"""Your own async function as the lookup: every engine feature through one adapter
(lookup_source.functions), its errors translated, its open/close run once per task."""

from __future__ import annotations

import asyncio
from typing import Any

import pyarrow as pa
import pytest

from lookup_source import OptionError, PermanentError, TransientError
from lookup_source.engine.metrics import LookupMetrics
from lookup_source.engine.runner import run_lookups
from lookup_source.errors import ConfigurationError, LookupFailedError, SchemaError
from lookup_source.functions import LookupFunction
from lookup_source.settings import parse_options
from lookup_source.spark.plan import LookupPlan
from lookup_source.testing.clock import VirtualTimeLoop

SCHEMA = "id long, name string, tier int"
USERS = {i: {"name": f"user {i}", "tier": i % 3} for i in range(1, 100)}


def run(
    function: LookupFunction,
    keys: list[Any],
    options: dict[str, str] | None = None,
    schema: str = SCHEMA,
    metrics: list[LookupMetrics] | None = None,
) -> list[dict[str, Any]]:
    plan = LookupPlan.build(parse_options(function.options(options)), schema)
    names = plan.key_names
    if len(names) == 1:
        arrays = [pa.array(keys, type=pa.int64())]
    else:
        arrays = [pa.array([k[i] if k else None for k in keys]) for i in range(len(names))]
    batch = pa.RecordBatch.from_arrays(arrays, names=list(names))
    out = run_lookups(
        [batch],
        plan.engine_spec(names, how="left"),
        plan.connector_config(),
        client_factory=function,
        on_metrics=metrics.append if metrics is not None else None,
        loop_factory=VirtualTimeLoop,
    )
    return [row for b in out for row in b.to_pylist()]


class Recorder:
    """A fetch function that records its calls and the most running at once."""

    def __init__(self, delay: float = 0.0) -> None:
        self.calls: list[Any] = []
        self.running = self.peak = 0
        self.delay = delay
        self.opened = self.closed = 0

    async def open(self) -> None:
        self.opened += 1

    async def close(self) -> None:
        self.closed += 1

    async def __call__(self, key: Any) -> Any:
        self.calls.append(key)
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            await asyncio.sleep(self.delay)
            return USERS.get(key)
        finally:
            self.running -= 1


def test_fetch_a_key_at_a_time_with_capacity_dedup_and_nulls() -> None:
    recorder = Recorder(delay=0.01)
    function = LookupFunction.of(fetch=recorder)
    assert function is not None
    keys = [1, 2, 2, None, 500, *range(3, 60)]
    metrics: list[LookupMetrics] = []
    rows = run(function, keys, {"capacity": "8"}, metrics=metrics)
    assert [r["name"] for r in rows[:5]] == ["user 1", "user 2", "user 2", None, None]
    assert rows[6] == {"id": 4, "name": "user 4", "tier": 1}
    assert sorted(recorder.calls) == sorted({1, 2, 500, *range(3, 60)})  # once each, no null
    assert recorder.peak == 8  # capacity: calls in flight at once
    (m,) = metrics
    assert m.requests == len(recorder.calls) and m.missing_keys == 1 and m.null_keys == 1


def test_every_engine_option_applies_to_a_function() -> None:
    """One path through the engine: deadline, retries on a miss, rate limit, unordered output,
    max matches and sharing a key in flight between batches work as for any connector, and
    the metrics count them."""
    calls: list[Any] = []
    misses: dict[Any, int] = {}

    async def fetch(key: Any) -> Any:
        calls.append(key)
        await asyncio.sleep(0.02)
        if key == 7:  # a store that is always busy: bounded by deadline.ms, not by attempts
            raise TransientError("busy")
        if key == 8:  # five rows where lookup.max-matches allows three
            return [{"name": f"row {i}", "tier": i} for i in range(5)]
        if key == 9 and misses.setdefault(9, 0) < 2:  # a row that arrives late
            misses[9] += 1
            return None
        return USERS.get(key)

    function = LookupFunction.of(fetch=fetch)
    assert function is not None
    options = {
        "deadline.ms": "200",
        "retry.max-attempts": "1000",
        "retry.initial-delay.ms": "10",
        "retry.max-delay.ms": "10",
        "retry.on-miss": "true",
        "rate.limit": "100",
        "output.mode": "unordered",
        "lookup.max-matches": "3",
        "on.error": "column",
    }
    plan = LookupPlan.build(parse_options(function.options(options)), SCHEMA)
    spec = plan.engine_spec(plan.key_names, how="left")
    batches = [
        pa.RecordBatch.from_arrays([pa.array(keys, type=pa.int64())], names=["id"])
        for keys in ([1, 2, 7, 8], [9, 1, 2], [3])  # 1 and 2 again while in flight
    ]
    metrics: list[LookupMetrics] = []
    out = run_lookups(
        batches,
        spec,
        plan.connector_config(),
        client_factory=function,
        on_metrics=metrics.append,
        loop_factory=VirtualTimeLoop,
    )
    rows = [row for b in out for row in b.to_pylist()]
    by_id = {}
    for row in rows:
        by_id.setdefault(row["id"], []).append(row)
    assert sorted(by_id) == [1, 2, 3, 7, 8, 9] and len(rows) == 8
    assert by_id[1][0]["name"] == "user 1" and by_id[3][0]["tier"] == 0
    assert by_id[9][0]["name"] == "user 9"  # found on the third attempt (retry.on-miss)
    (late,) = by_id[7]
    assert late["name"] is None and "deadline.ms=200" in late["_lookup_error"]
    (many,) = by_id[8]
    assert many["name"] is None and "3" in many["_lookup_error"] and "8" in many["_lookup_error"]
    assert calls.count(1) == 1 and calls.count(2) == 1  # shared with the request in flight
    # the rate limit (100/s) holds the retries of 7 back too: about 20 in its 200 ms
    assert 2 <= calls.count(7) <= 0.2 * 100 + 2
    (m,) = metrics
    assert m.failed_keys == 2 and m.retries >= calls.count(7) - 1 + 2
    assert m.requests == len(calls)


def test_open_and_close_run_once_per_task_however_it_ends() -> None:
    recorder = Recorder()
    function = LookupFunction.of(fetch=recorder)
    assert function is not None
    run(function, [1, 2])
    assert (recorder.opened, recorder.closed) == (1, 1)

    async def broken(key: Any) -> Any:
        raise ValueError("no such table")

    class Failing(Recorder):
        async def __call__(self, key: Any) -> Any:
            return await broken(key)

    failing = Failing()
    function = LookupFunction.of(fetch=failing)
    assert function is not None
    with pytest.raises(LookupFailedError) as raised:
        run(function, [7])
    assert (failing.opened, failing.closed) == (1, 1)
    message = str(raised.value)
    name = "tests.unit.test_functions.test_open_and_close_run_once_per_task_however_it_ends.Failing"
    assert message.startswith(f"fetch={name} lookup failed for 1 key (e.g. 7)")
    assert f"{name}(7) raised ValueError: no such table" in message
    assert raised.value.attempts == 1  # any other exception is permanent: not retried


def test_transient_errors_are_retried_permanent_ones_not() -> None:
    attempts: dict[Any, int] = {}

    async def flaky(key: Any) -> Any:
        attempts[key] = attempts.get(key, 0) + 1
        if key == 1 and attempts[key] < 3:
            raise ConnectionResetError("reset by peer")  # OSError: transient
        if key == 2 and attempts[key] < 2:
            raise TransientError("busy", retry_after=0.01)
        if key == 3:
            raise PermanentError("forbidden")
        return USERS[key]

    function = LookupFunction.of(fetch=flaky)
    assert function is not None
    options = {"retry.initial-delay.ms": "1", "on.error": "column"}
    rows = run(function, [1, 2, 3], options)
    assert [r["name"] for r in rows] == ["user 1", "user 2", None]
    assert attempts == {1: 3, 2: 2, 3: 1}
    assert rows[2]["_lookup_error"].endswith("_not.flaky lookup failed: PermanentError: forbidden")


def test_timeouts_are_transient_and_bounded() -> None:
    async def slow(key: Any) -> Any:
        await asyncio.sleep(10)

    function = LookupFunction.of(fetch=slow)
    assert function is not None
    options = {"timeout.ms": "50", "retry.max-attempts": "2", "retry.initial-delay.ms": "1"}
    with pytest.raises(LookupFailedError, match="after 2 attempts: LookupTimeoutError"):
        run(function, [1], options)


def test_what_a_function_returns_one_to_many_and_malformed() -> None:
    async def orders(key: Any) -> Any:
        return {
            1: [{"name": "a", "tier": 1}, {"name": "b", "tier": 2}],
            2: [],
            3: "not a record",
            4: {"name": "d", "tier": "x"},
        }.get(key)

    function = LookupFunction.of(fetch=orders)
    assert function is not None
    metrics: list[LookupMetrics] = []
    rows = run(function, [1, 2, 3, 4, 3], {"on.error": "column"}, metrics=metrics)
    assert [(r["id"], r["name"]) for r in rows] == [
        (1, "a"),
        (1, "b"),
        (2, None),
        (3, None),
        (4, None),
        (3, None),
    ]
    (m,) = metrics  # the keys whose answers could not be used are failed keys, each once
    assert (m.failed_keys, m.missing_keys, m.failed_requests) == (2, 1, 0)
    assert rows[3]["_lookup_error"].startswith("key 3: tests.unit.test_functions.")
    assert rows[3]["_lookup_error"].endswith(
        "_malformed.orders(3) returned str, not a record: return a mapping of value columns, a "
        "list of them (several matches) or None (missing)"
    )
    assert rows[4]["_lookup_error"].startswith("key 4: column 'tier' expects int")


def test_fetch_many_gets_distinct_keys_in_batches() -> None:
    batches: list[list[Any]] = []

    async def many(keys: list[Any]) -> dict[Any, Any]:
        batches.append(keys)
        return {k: USERS[k] for k in keys if k in USERS}

    function = LookupFunction.of(fetch_many=many)
    assert function is not None
    rows = run(function, [5, 5, None, 1000, *range(1, 30)], {"batch.size": "10"})
    assert [r["name"] for r in rows[:4]] == ["user 5", "user 5", None, None]
    assert all(len(b) <= 10 for b in batches)
    assert sorted(k for b in batches for k in b) == sorted({5, 1000, *range(1, 30)})
    plan_default = parse_options(function.options(None))
    assert plan_default.batch_size == 100  # fetch_many's default batch


def test_fetch_many_that_returns_the_wrong_shape_fails_naming_it() -> None:
    async def wrong(keys: list[Any]) -> Any:
        return [USERS[k] for k in keys]

    function = LookupFunction.of(fetch_many=wrong)
    assert function is not None
    with pytest.raises(LookupFailedError, match=r"\.wrong\(\[2 keys\]\) returned list; fetch_many"):
        run(function, [1, 2])


@pytest.mark.parametrize("form", ["records", "columns"])
def test_fetch_many_asked_directly_answers_records_whatever_it_returns(form: str) -> None:
    """``lookup`` of a fetch_many client (the record form, for a caller outside the engine)
    answers through the same path as the engine's ``lookup_arrow``: columns too."""

    async def many(keys: list[Any]) -> Any:
        found = [k for k in keys if k in USERS]
        if form == "records":
            return {k: USERS[k] for k in found}
        return pa.table(
            {
                "id": pa.array(found, pa.int64()),
                "name": [USERS[k]["name"] for k in found],
                "tier": pa.array([USERS[k]["tier"] for k in found], pa.int32()),
            }
        )

    function = LookupFunction.of(fetch_many=many)
    assert function is not None
    plan = LookupPlan.build(parse_options(function.options(None)), SCHEMA)
    client = function(plan.connector_config())

    async def ask() -> Any:
        await client.open()
        try:
            return await client.lookup([5, 1000, 7])
        finally:
            await client.close()

    assert asyncio.run(ask()) == {
        5: {"name": "user 5", "tier": 2},
        7: {"name": "user 7", "tier": 1},
    }


def test_composite_keys_arrive_as_tuples() -> None:
    seen: list[Any] = []

    async def by_tenant(key: Any) -> Any:
        seen.append(key)
        tenant, user = key
        return {"name": f"{tenant}/{user}"}

    function = LookupFunction.of(fetch=by_tenant)
    assert function is not None
    rows = run(
        function,
        [("acme", 1), ("beta", 2), None],
        {"key.column": "tenant,id"},
        schema="tenant string, id long, name string",
    )
    assert [r["name"] for r in rows] == ["acme/1", "beta/2", None]
    assert sorted(seen) == [("acme", 1), ("beta", 2)]


def test_the_cache_serves_a_function_and_two_functions_never_share_it() -> None:
    from lookup_source.engine.kept.worker import forget_worker

    forget_worker()
    first, second = Recorder(), Recorder()
    one = LookupFunction.of(fetch=first)
    other = LookupFunction.of(fetch=second)
    assert one is not None and other is not None
    cached = {"cache.max-rows": "100"}
    run(one, [1, 2], cached)
    run(one, [1, 2], cached)
    run(other, [1, 2], cached)
    assert len(first.calls) == 2 and len(second.calls) == 2


def test_bad_arguments_say_what_to_do() -> None:
    async def fetch(key: Any) -> Any:
        return None

    def blocking(key: Any) -> Any:
        return None

    class SyncOpen:
        def open(self) -> None: ...

        async def __call__(self, key: Any) -> Any: ...

    with pytest.raises(ConfigurationError, match="give fetch= .* or fetch_many= .*, not both"):
        LookupFunction.of(fetch=fetch, fetch_many=fetch)
    with pytest.raises(ConfigurationError, match="fetch= must be an async function .* blocking"):
        LookupFunction.of(fetch=blocking)
    with pytest.raises(ConfigurationError, match=r"its open\(\) must be async def open\(self\)"):
        LookupFunction.of(fetch=SyncOpen())
    function = LookupFunction.of(fetch=fetch)
    assert function is not None
    with pytest.raises(OptionError, match="option 'connector': is 'redis', but fetch= is given"):
        function.options({"connector": "redis"})
    with pytest.raises(OptionError, match="option 'batch.size': is 5, but fetch= looks up one key"):
        parse_options(function.options({"batch.size": "5"}))
    with pytest.raises(OptionError, match="option 'connector': 'function' is chosen by passing"):
        parse_options({"connector": "function"})
    with pytest.raises(OptionError, match="option 'cache.mode': is full, but the function"):
        LookupPlan.build(parse_options(function.options({"cache.mode": "full"})), SCHEMA)
    with pytest.raises(SchemaError):
        LookupPlan.build(parse_options(function.options(None)), "id long")


def test_a_function_that_cannot_be_pickled_is_refused_on_the_driver() -> None:
    import threading

    from lookup_source.spark.arguments import lookup_options_of

    class Holder:
        def __init__(self) -> None:
            self.lock = threading.Lock()

        async def __call__(self, key: Any) -> Any: ...

    function = LookupFunction.of(fetch=Holder())
    assert function is not None
    with pytest.raises(
        ConfigurationError, match=r"fetch=tests\..*_driver\.Holder cannot be pickled"
    ):
        lookup_options_of(None, function)
    with pytest.raises(OptionError, match="or your own async function as fetch= or fetch_many="):
        lookup_options_of(None, None)


def test_a_function_that_honours_cancellation_may_say_so() -> None:
    class Prompt:
        honours_cancellation = True

        async def __call__(self, key: Any) -> Any:
            return USERS.get(key)

    quick = LookupFunction.of(fetch=Prompt())
    careful = LookupFunction.of(fetch=Recorder())
    assert quick is not None and careful is not None
    config = LookupPlan.build(parse_options(quick.options(None)), SCHEMA).connector_config()
    assert quick(config).honours_cancellation is True
    assert careful(config).honours_cancellation is False  # the safe default
    assert [r["name"] for r in run(quick, [1, 500])] == ["user 1", None]
