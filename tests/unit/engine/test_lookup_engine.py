"""Unit tests of the async engine against an in-process fake store."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pytest

from lookup_source.engine.lookup_engine import LookupEngine
from lookup_source.engine.runner import run_lookups
from lookup_source.errors import LookupFailedError, PermanentError, RecordError, TransientError
from lookup_source.redaction import Redactor
from lookup_source.testing import clock as virtual_time
from lookup_source.testing.clock import VirtualTimeLoop
from tests.fakes import FakeClient, FakeStore, flat, key_batch, make_config, make_options, make_spec

TABLE = {i: {"name": f"user-{i}", "n": i * 10} for i in range(1000)}


def run(spec, batches, store: FakeStore) -> list[pa.RecordBatch]:
    config = make_config(spec)
    return list(
        run_lookups(
            batches,
            spec,
            config,
            client_factory=lambda c: FakeClient(c, store),
            loop_factory=VirtualTimeLoop,
        )
    )


def rows(batches: list[pa.RecordBatch]) -> list[dict[str, Any]]:
    return [row for batch in batches for row in batch.to_pylist()]


def test_values_are_attached_to_their_keys_in_input_order() -> None:
    store = FakeStore(TABLE)
    rng = random.Random(7)
    store.latency = lambda keys: rng.random() * 0.01
    spec = make_spec(make_options(capacity=8, batch_size=3))
    keys = [rng.randrange(0, 1200) for _ in range(500)]
    batches = [key_batch(keys[i : i + 50]) for i in range(0, 500, 50)]
    out = rows(run(spec, batches, store))
    assert [r["k"] for r in out] == keys
    for r in out:
        expected = TABLE.get(r["k"])
        assert r["name"] == (expected["name"] if expected else None)
        assert r["n"] == (expected["n"] if expected else None)


def test_peak_in_flight_never_exceeds_capacity_and_reaches_it() -> None:
    store = FakeStore(TABLE)
    store.latency = lambda keys: 0.005
    spec = make_spec(make_options(capacity=7, batch_size=2))
    batches = [key_batch(list(range(i, i + 20))) for i in range(0, 400, 20)]
    engine_metrics = []
    config = make_config(spec)
    list(
        run_lookups(
            batches,
            spec,
            config,
            client_factory=lambda c: FakeClient(c, store),
            on_metrics=engine_metrics.append,
            loop_factory=VirtualTimeLoop,
        )
    )
    assert store.peak_in_flight == 7
    assert engine_metrics[0].peak_in_flight == 7


def test_capacity_is_kept_busy_across_batch_boundaries() -> None:
    # Batches of 2 keys with capacity 10: only by running ahead of emission can 10 be in flight.
    store = FakeStore(TABLE)
    store.latency = lambda keys: 0.01
    spec = make_spec(make_options(capacity=10, batch_size=1))
    batches = [key_batch([i, i + 1]) for i in range(0, 200, 2)]
    out = rows(run(spec, batches, store))
    assert len(out) == 200
    assert store.peak_in_flight == 10


def test_requests_hold_at_most_batch_size_distinct_keys_and_never_null() -> None:
    store = FakeStore(TABLE)
    spec = make_spec(make_options(batch_size=4))
    keys = [1, 1, 2, None, 3, 2, 4, 5, 6, None, 1, 7, 8, 9]
    out = rows(run(spec, [key_batch(keys)], store))
    sent = [k for request in store.requests for k in request]
    assert all(len(request) <= 4 for request in store.requests)
    assert sorted(sent) == [1, 2, 3, 4, 5, 6, 7, 8, 9]  # each distinct key once, no null
    assert [r["k"] for r in out] == keys
    nulls = [r for r in out if r["k"] is None]
    assert len(nulls) == 2 and all(r["name"] is None and r["n"] is None for r in nulls)
    assert [r["name"] for r in out if r["k"] == 1] == ["user-1"] * 3


def test_inner_join_drops_missing_and_null_keys_left_keeps_them() -> None:
    store = FakeStore(TABLE)
    keys = [1, 5000, None, 2]
    left = rows(run(make_spec(make_options()), [key_batch(keys)], store))
    inner = rows(run(make_spec(make_options(), how="inner"), [key_batch(keys)], store))
    assert [r["k"] for r in left] == [1, 5000, None, 2]
    assert [(r["k"], r["name"]) for r in inner] == [(1, "user-1"), (2, "user-2")]
    assert [r["row"] for r in inner] == [0, 3]  # the other columns travel with their row


def test_unordered_emits_a_finished_batch_before_a_slow_earlier_one() -> None:
    store = FakeStore(TABLE)
    store.latency = lambda keys: 0.3 if 0 in keys else 0.0
    spec = make_spec(make_options(capacity=10, batch_size=5, output_mode="unordered"))
    batches = [key_batch([0, 1]), key_batch([2, 3]), key_batch([4, 5])]
    out = run(spec, batches, store)
    firsts = [batch.column("k")[0].as_py() for batch in out]
    assert firsts[-1] == 0  # the slow batch comes last
    assert sorted(r["k"] for r in rows(out)) == [0, 1, 2, 3, 4, 5]
    ordered = run(make_spec(make_options(capacity=10, batch_size=5)), batches, store)
    assert [r["k"] for r in rows(ordered)] == [0, 1, 2, 3, 4, 5]


def test_input_is_pulled_only_while_there_is_room() -> None:
    """Backpressure: with a stalled store, the task stops pulling input."""
    store = FakeStore(TABLE)
    gate = asyncio.Event()

    async def stalled(keys):  # never answers until the gate opens
        await gate.wait()
        return {}

    pulled = 0

    def source() -> Iterator[pa.RecordBatch]:
        nonlocal pulled
        for i in range(10_000):
            pulled += 1
            yield key_batch([i])

    spec = make_spec(make_options(capacity=5, batch_size=1, timeout_ms=60_000))
    client = FakeClient(make_config(spec), store)
    client.lookup = stalled  # type: ignore[method-assign]

    async def drive() -> None:
        engine = LookupEngine(client, spec, redact=Redactor())
        batches = source()

        async def feed() -> None:
            for batch in batches:
                flat(await engine.submit(batch))

        feeder = asyncio.ensure_future(feed())
        await asyncio.sleep(0.2)
        assert engine.in_flight == 5
        assert pulled <= 6  # capacity, plus the one batch waiting for a slot
        feeder.cancel()
        await engine.aclose()

    virtual_time.run(drive())


def test_buffered_rows_stay_bounded_under_head_of_line_blocking() -> None:
    store = FakeStore(TABLE)
    store.latency = lambda keys: 0.5 if 0 in keys else 0.0
    spec = make_spec(make_options(capacity=50, batch_size=10))
    pulled = 0

    def source() -> Iterator[pa.RecordBatch]:
        nonlocal pulled
        for start in range(0, 100_000, 100):
            pulled += 1
            yield key_batch([(start + i) % 1000 for i in range(100)])

    async def drive() -> None:
        engine = LookupEngine(
            FakeClient(make_config(spec), store), spec, buffer_rows=1_000, redact=Redactor()
        )
        batches = source()
        task = asyncio.ensure_future(engine.submit(next(batches)))
        await task

        async def feed() -> None:
            for batch in batches:
                flat(await engine.submit(batch))

        feeder = asyncio.ensure_future(feed())
        await asyncio.sleep(0.2)  # the head batch is still waiting for key 0
        assert pulled <= 12  # ~1,000 buffered rows in batches of 100, not 100,000 rows
        feeder.cancel()
        await engine.aclose()

    virtual_time.run(drive())


def test_timeouts_are_retried_then_fail_naming_connector_and_keys() -> None:
    store = FakeStore(TABLE)
    store.latency = lambda keys: 1.0
    spec = make_spec(make_options(timeout_ms=30, max_attempts=3, batch_size=5))
    with pytest.raises(LookupFailedError) as info:
        run(spec, [key_batch([1, 2, 3])], store)
    error = info.value
    assert error.connector == "fake" and error.failed_keys == 3 and error.attempts == 3
    assert "fake lookup at fake://user:***@store:1 failed for 3 keys" in str(error)
    assert "timeout.ms=30" in str(error)
    assert "secret" not in str(error)
    assert len(store.requests) == 3
    assert store.opened == 1 and store.closed == 1  # closed on failure too


def test_the_failure_counts_every_key_that_failed_before_the_task_stopped() -> None:
    store = FakeStore(TABLE)
    store.latency = lambda keys: 0.05
    store.fail_keys = {k: PermanentError("no such table.") for k in (1, 2, 3)}
    spec = make_spec(make_options(batch_size=1, max_attempts=1))  # three requests at once
    with pytest.raises(LookupFailedError) as info:
        run(spec, [key_batch([1, 2, 3, 4])], store)
    error = info.value
    assert error.failed_keys == 3 and sorted(error.sample_keys) == [1, 2, 3]
    assert "failed for 3 keys" in str(error)
    assert "PermanentError: no such table. Set on.error=null" in str(error)  # one period


def test_the_deadline_bounds_every_attempt_and_backoff_of_a_key() -> None:
    """Slow answers and a retry policy that would take ~2 s: deadline.ms=250 ends it."""
    store = FakeStore(TABLE)
    store.latency = lambda keys: 0.12
    options = make_options(
        timeout_ms=100, max_attempts=10, initial_delay_ms=50, max_delay_ms=50, deadline_ms=250
    )
    with pytest.raises(LookupFailedError) as info:
        run(make_spec(options), [key_batch([1, 2])], store)
    # without the deadline: 10 attempts of 100 ms, 50 ms apart
    assert "no answer within deadline.ms=250 (2 attempts)" in str(info.value)
    assert info.value.attempts == 2 and len(store.requests) == 2  # 100 + 50 + 100 ms: no third
    # the last attempt is cut short to end at the deadline, and on.error applies
    store.requests.clear()
    store.latency = lambda keys: 0.12 if len(store.requests) < 3 else 0.0
    options = make_options(
        timeout_ms=100, max_attempts=10, initial_delay_ms=10, max_delay_ms=10, deadline_ms=250
    )
    out = rows(run(make_spec(options), [key_batch([1])], store))
    assert out[0]["name"] == "user-1" and len(store.requests) == 3  # 100+10+100+10+answer
    failed = make_options(
        timeout_ms=100,
        max_attempts=10,
        initial_delay_ms=10,
        max_delay_ms=10,
        deadline_ms=150,
        on_error="column",
    )
    store.requests.clear()
    store.latency = lambda keys: 0.12
    out = rows(run(make_spec(failed), [key_batch([1])], store))
    assert out[0]["name"] is None
    assert "deadline.ms=150 (2 attempts)" in out[0]["_lookup_error"]


def test_transient_errors_are_retried_until_success() -> None:
    store = FakeStore(TABLE)
    store.failures = [ConnectionResetError("reset by peer"), TransientError("503")]
    out = rows(run(make_spec(make_options(max_attempts=3)), [key_batch([4])], store))
    assert out[0]["name"] == "user-4"
    assert len(store.requests) == 3


def test_permanent_errors_are_not_retried() -> None:
    store = FakeStore(TABLE)
    store.failures = [PermanentError("authentication failed")]
    with pytest.raises(LookupFailedError, match="authentication failed") as info:
        run(make_spec(make_options(max_attempts=5)), [key_batch([4])], store)
    assert info.value.attempts == 1
    assert len(store.requests) == 1


def test_unknown_exceptions_are_not_retried() -> None:
    store = FakeStore(TABLE)
    store.failures = [ValueError("bad query")]
    with pytest.raises(LookupFailedError, match="ValueError: bad query"):
        run(make_spec(make_options(max_attempts=5)), [key_batch([4])], store)
    assert len(store.requests) == 1


def attempt_times(store: FakeStore) -> list[float]:
    """Have ``store`` note the loop's (virtual) time of each request it is sent."""
    times: list[float] = []

    def note(keys: Any) -> float:
        times.append(asyncio.get_running_loop().time())
        return 0.0  # answered at once: the time between attempts is the backoff alone

    store.latency = note
    return times


def gaps(times: list[float]) -> list[float]:
    return [round(later - earlier, 9) for earlier, later in itertools.pairwise(times)]


@pytest.mark.parametrize("backoff", ["fixed", "exponential"])
def test_backoff_delays(backoff: str) -> None:
    store = FakeStore(TABLE)
    store.failures = [TransientError("x")] * 5
    times = attempt_times(store)
    spec = make_spec(
        make_options(max_attempts=6, backoff=backoff, initial_delay_ms=100, max_delay_ms=500)
    )

    async def drive() -> list[pa.RecordBatch]:
        engine = LookupEngine(
            FakeClient(make_config(spec), store), spec, rng=random.Random(1), redact=Redactor()
        )
        out = flat(await engine.submit(key_batch([1])))
        return out + flat(await engine.finish())

    out = virtual_time.run(drive())  # the engine's time is its loop's: virtual here
    assert rows(out)[0]["name"] == "user-1"
    delays = gaps(times)
    assert len(delays) == 5
    if backoff == "fixed":
        assert delays == [0.1] * 5
    else:
        caps = [0.1, 0.2, 0.4, 0.5, 0.5]
        for delay, cap in zip(delays, caps):
            assert cap / 2 <= delay <= cap  # equal jitter, capped at retry.max-delay.ms
        assert len(set(delays)) > 1


def test_retry_after_hint_is_honoured_but_capped() -> None:
    store = FakeStore(TABLE)
    store.failures = [TransientError("429", retry_after=0.3), TransientError("429", retry_after=60)]
    times = attempt_times(store)
    spec = make_spec(make_options(backoff="fixed", initial_delay_ms=10, max_delay_ms=1000))

    async def drive() -> None:
        engine = LookupEngine(FakeClient(make_config(spec), store), spec, redact=Redactor())
        flat(await engine.submit(key_batch([1])))
        flat(await engine.finish())

    virtual_time.run(drive())
    assert gaps(times) == [0.3, 1.0]


def test_on_error_null_fills_nulls_and_keeps_every_row() -> None:
    store = FakeStore(TABLE)
    store.fail_keys = {3: PermanentError("boom")}
    spec = make_spec(make_options(on_error="null", batch_size=1), how="inner")
    out = rows(run(spec, [key_batch([1, 3, 5000, 2])], store))
    # inner drops the missing key 5000 but keeps the failed key 3: no row lost silently
    assert [(r["k"], r["name"]) for r in out] == [(1, "user-1"), (3, None), (2, "user-2")]
    assert "_lookup_error" not in out[0]


def test_on_error_column_reports_the_reason_per_row() -> None:
    store = FakeStore(TABLE)
    store.fail_keys = {3: PermanentError("boom")}
    spec = make_spec(make_options(on_error="column", batch_size=1))
    out = rows(run(spec, [key_batch([1, 3, 5000, None])], store))
    errors = {r["k"]: r["_lookup_error"] for r in out}
    assert errors[1] is None and errors[5000] is None and errors[None] is None
    assert errors[3] == "fake lookup failed: PermanentError: boom"


def test_record_errors_and_values_that_do_not_fit_are_lookup_errors() -> None:
    table = {
        1: {"name": "ok", "n": 1},
        2: {"name": "bad", "n": "not a number"},
        3: {"name": 42, "n": 3},
    }
    store = FakeStore(table)
    store.table[4] = RecordError("stored value is not valid JSON")
    spec = make_spec(make_options(on_error="column"))
    out = {r["k"]: r for r in rows(run(spec, [key_batch([1, 2, 3, 4])], store))}
    assert out[1]["_lookup_error"] is None and out[1]["n"] == 1
    assert out[2]["n"] is None and out[2]["name"] is None  # the whole record is rejected
    assert "key 2: column 'n' expects bigint, got str 'not a number'" in out[2]["_lookup_error"]
    assert "key 3: column 'name' expects string, got int 42" in out[3]["_lookup_error"]
    assert out[4]["_lookup_error"] == "key 4: stored value is not valid JSON"
    with pytest.raises(LookupFailedError, match="column 'n' expects bigint"):
        run(make_spec(make_options()), [key_batch([1, 2])], store)


def test_string_values_are_parsed_into_typed_columns() -> None:
    store = FakeStore({1: {"name": "a", "n": "17"}, 2: {"name": "b", "n": None}})
    out = rows(run(make_spec(make_options()), [key_batch([1, 2])], store))
    assert [(r["n"]) for r in out] == [17, None]


def test_composite_keys() -> None:
    store = FakeStore({("a", 1): {"name": "a1", "n": 1}, ("b", 2): {"name": "b2", "n": 2}})
    spec = make_spec(make_options(), key_columns=("t", "u"))
    batch = pa.RecordBatch.from_arrays(
        [pa.array(["a", "b", "a", None, "a"]), pa.array([1, 2, 2, 1, 1])], names=["t", "u"]
    )
    out = rows(run(spec, [batch], store))
    assert [r["name"] for r in out] == ["a1", "b2", None, None, "a1"]
    sent = [k for request in store.requests for k in request]
    assert sorted(sent) == [("a", 1), ("a", 2), ("b", 2)]


def test_string_keys_with_odd_characters_and_empty_batches() -> None:
    odd = ["", "a b", "ü/%{x}", "'; DROP TABLE x; --", "k" * 10_000]
    store = FakeStore({k: {"name": k, "n": len(k)} for k in odd})
    spec = make_spec(make_options())
    batches = [key_batch([], kind=pa.string()), key_batch(odd, kind=pa.string())]
    out = rows(run(spec, batches, store))
    assert [r["name"] for r in out] == odd


def test_client_is_opened_and_closed_once_when_output_is_abandoned() -> None:
    store = FakeStore(TABLE)
    spec = make_spec(make_options(batch_size=1))
    gen = run_lookups(
        (key_batch([i]) for i in range(100)),
        spec,
        make_config(spec),
        client_factory=lambda c: FakeClient(c, store),
        loop_factory=VirtualTimeLoop,
    )
    next(gen)
    gen.close()
    assert store.opened == 1 and store.closed == 1


def test_key_column_cast_to_declared_type() -> None:
    store = FakeStore(TABLE)
    spec = make_spec(make_options())
    spec = type(spec)(**{**spec.__dict__, "key_types": (pa.int64(),)})
    batch = key_batch([1, 2], kind=pa.int32())
    out = rows(run(spec, [batch], store))
    assert [r["name"] for r in out] == ["user-1", "user-2"]
    assert isinstance(store.requests[0][0], int)


class CancelsItself(FakeClient):
    """A client that ends a request in a cancellation of its own (as a client whose own timer
    raced the attempt's limit could leave behind): never asked for by the engine."""

    async def lookup(self, keys: Sequence[Any]) -> Any:
        if 2 in keys:
            raise asyncio.CancelledError("the client's own")
        return await super().lookup(keys)


@pytest.mark.parametrize("on_error", ["column", "fail"])
def test_a_request_cancelled_not_by_the_engine_fails_its_keys_never_silently(
    on_error: str,
) -> None:
    """Found with the native HTTP transport (issue 53): a request task ended by a cancellation
    the engine had not asked for completed its rows with no value and no error."""
    spec = make_spec(make_options(on_error=on_error, batch_size=1, max_attempts=1))
    store = FakeStore({1: {"name": "one", "n": 1}, 2: {"name": "two", "n": 2}})
    batches = [key_batch([1, 2, 3])]

    def run() -> list[dict[str, Any]]:
        out = run_lookups(
            batches, spec, make_config(spec), client_factory=lambda c: CancelsItself(c, store)
        )
        return [row for batch in out for row in batch.to_pylist()]

    if on_error == "fail":
        with pytest.raises(LookupFailedError, match="cancelled, though not by asynclookup"):
            run()
        return
    rows = run()
    assert [(r["k"], r["name"]) for r in rows] == [(1, "one"), (2, None), (3, None)]
    assert rows[0]["_lookup_error"] is None and rows[2]["_lookup_error"] is None
    assert "cancelled, though not by asynclookup" in rows[1]["_lookup_error"]


def test_a_key_column_of_the_null_type_sends_no_request() -> None:
    store = FakeStore({1: {"name": "a", "n": 1}})
    spec = make_spec(make_options())  # no key types declared: nothing to cast the nulls to
    out = run_lookups(
        [key_batch([None, None], kind=pa.null())],
        spec,
        make_config(spec),
        client_factory=lambda config: FakeClient(config, store),
        loop_factory=VirtualTimeLoop,
    )
    rows = [row for batch in out for row in batch.to_pylist()]
    assert [(row["k"], row["name"]) for row in rows] == [(None, None), (None, None)]
    assert store.requests == []
