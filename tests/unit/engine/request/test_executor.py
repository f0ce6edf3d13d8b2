"""The request executor (engine.request.executor.RequestExecutor) against the fake store, on
virtual time: an answer on the first attempt, a transient error retried after its backoff (or
the store's Retry-After) then answered, a permanent error never retried, retry.max-attempts
ending in FinalFailure with its attempt count, each attempt cut at timeout.ms, deadline.ms
ending the retries, missing keys asked again under retry.on-miss, rate.limit spacing attempts,
the metrics it counts (requests, retries, timeouts), an overload lowering an adaptive limit,
a connector's malformed result failing loudly and its error texts redacted."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest

from lookup_source.engine.metrics import LookupMetrics
from lookup_source.engine.request.answers import Answer, ColumnarAnswer, RecordAnswer
from lookup_source.engine.request.executor import RequestExecutor, redact_texts
from lookup_source.engine.request.limit import AdaptiveLimit, FixedLimit
from lookup_source.engine.request.retry import FinalFailure
from lookup_source.engine.request.slots import RequestSlots
from lookup_source.errors import (
    LookupTimeoutError,
    OverloadedError,
    PermanentError,
    RecordError,
    TransientError,
)
from lookup_source.testing import clock as virtual_time
from tests.fakes import (
    AskedKeys,
    FakeClient,
    FakeColumnarClient,
    FakeStore,
    make_config,
    make_options,
    make_spec,
)

TABLE = {i: {"name": f"user-{i}", "n": i} for i in range(100)}


class Timed(FakeClient):
    """The fake client, noting the loop's time of every attempt."""

    def __init__(self, config: Any, store: FakeStore, seen: list[float]) -> None:
        super().__init__(config, store)
        self.seen = seen

    async def lookup(self, keys: Sequence[Any]) -> Any:
        self.seen.append(round(asyncio.get_running_loop().time(), 6))
        return await super().lookup(keys)


class Returning(FakeClient):
    """A client whose lookup returns ``result`` as it is."""

    def __init__(self, config: Any, result: Any) -> None:
        super().__init__(config)
        self.result = result

    async def lookup(self, keys: Sequence[Any]) -> Any:
        return self.result


def executor_for(
    store: FakeStore,
    seen: list[float] | None = None,
    *,
    limit: Any = None,
    client: Any = None,
    **options: Any,
) -> tuple[RequestExecutor, LookupMetrics, RequestSlots]:
    spec = make_spec(make_options(**options))
    config = make_config(spec)
    metrics = LookupMetrics()
    slots = RequestSlots(limit or FixedLimit(spec.options.capacity), metrics, lambda: None)
    if client is None:
        client = Timed(config, store, seen if seen is not None else [])
    executor = RequestExecutor.of(
        client, spec.options, slots, metrics, list(spec.value_fields), rng=random.Random(5)
    )
    return executor, metrics, slots


def run(executor: RequestExecutor, keys: list[int]) -> tuple[Any, float]:
    """The answer (or the FinalFailure) for ``keys``, and the virtual time it took."""

    async def scenario() -> tuple[Any, float]:
        loop = asyncio.get_running_loop()
        try:
            outcome: Any = await executor.run(AskedKeys(keys))
        except FinalFailure as failure:
            outcome = failure
        return outcome, round(loop.time(), 6)

    return virtual_time.run(scenario())


def names(answer: Answer) -> list[Any]:
    assert isinstance(answer, RecordAnswer)
    return [None if value is None else value["name"] for value in answer.values]


def test_an_answer_on_the_first_attempt() -> None:
    store = FakeStore(TABLE)
    store.latency = lambda keys: 0.02
    seen: list[float] = []
    executor, metrics, _ = executor_for(store, seen)
    answer, took = run(executor, [1, 500, 2])
    assert names(answer) == ["user-1", None, "user-2"]
    assert answer.missing_rows().tolist() == [1]
    assert (metrics.requests, metrics.retries, metrics.timeouts) == (1, 0, 0)
    assert sum(metrics.latency_buckets.values()) == 1
    assert metrics.latency_max_ms == pytest.approx(20.0)
    assert seen == [0.0] and took == 0.02


def test_a_transient_error_is_retried_after_its_backoff_then_answered() -> None:
    store = FakeStore(TABLE)
    store.latency = lambda keys: 0.01
    store.failures = [TransientError("connection reset")]
    seen: list[float] = []
    executor, metrics, _ = executor_for(store, seen, initial_delay_ms=50)  # fixed backoff
    answer, took = run(executor, [3])
    assert names(answer) == ["user-3"]
    assert seen == [0.0, 0.06]  # 10 ms to fail, 50 ms of backoff
    assert took == 0.07
    assert (metrics.requests, metrics.retries, metrics.timeouts) == (2, 1, 0)


def test_an_exponential_backoff_draws_its_jitter_from_the_given_random() -> None:
    store = FakeStore(TABLE)
    store.failures = [TransientError("a"), TransientError("b")]
    seen: list[float] = []
    executor, metrics, _ = executor_for(
        store, seen, backoff="exponential", initial_delay_ms=100, max_delay_ms=1000
    )
    answer, _ = run(executor, [4])
    draws = random.Random(5)
    first = 0.05 + draws.random() * 0.05
    second = first + 0.1 + draws.random() * 0.1
    assert names(answer) == ["user-4"]
    assert seen == [0.0, round(first, 6), round(second, 6)]
    assert metrics.retries == 2


def test_the_stores_retry_after_wins_when_longer() -> None:
    store = FakeStore(TABLE)
    store.failures = [OverloadedError("429", retry_after=0.3)]
    seen: list[float] = []
    executor, _, _ = executor_for(store, seen, initial_delay_ms=10, max_delay_ms=1000)
    answer, _ = run(executor, [5])
    assert names(answer) == ["user-5"]
    assert seen == [0.0, 0.3]


def test_a_permanent_error_is_not_retried() -> None:
    store = FakeStore(TABLE)
    store.failures = [PermanentError("authentication failed")]
    seen: list[float] = []
    executor, metrics, _ = executor_for(store, seen, max_attempts=5)
    failure, _ = run(executor, [1])
    assert isinstance(failure, FinalFailure)
    assert failure.attempts == 1
    assert isinstance(failure.error, PermanentError)
    assert str(failure) == "authentication failed"
    assert seen == [0.0]
    assert (metrics.requests, metrics.retries) == (1, 0)


def test_a_programming_error_of_the_client_is_not_retried() -> None:
    store = FakeStore(TABLE)
    store.failures = [KeyError("user")]
    executor, metrics, _ = executor_for(store, max_attempts=5)
    failure, _ = run(executor, [1])
    assert isinstance(failure, FinalFailure)
    assert isinstance(failure.error, KeyError)
    assert (failure.attempts, metrics.requests) == (1, 1)


def test_max_attempts_ends_in_a_final_failure_with_the_last_error() -> None:
    store = FakeStore(TABLE)
    store.failures = [TransientError(f"reset {n}") for n in range(1, 6)]
    seen: list[float] = []
    executor, metrics, _ = executor_for(store, seen, max_attempts=3, initial_delay_ms=20)
    failure, took = run(executor, [1])
    assert isinstance(failure, FinalFailure)
    assert failure.attempts == 3
    assert str(failure.error) == "reset 3"
    assert seen == [0.0, 0.02, 0.04]
    assert took == 0.04
    assert (metrics.requests, metrics.retries) == (3, 2)
    assert len(store.failures) == 2  # no fourth attempt


def test_each_attempt_is_cut_at_timeout_ms_and_counted() -> None:
    store = FakeStore(TABLE)
    store.latency = lambda keys: 0.5
    seen: list[float] = []
    executor, metrics, _ = executor_for(
        store, seen, timeout_ms=100, max_attempts=2, initial_delay_ms=10
    )
    failure, took = run(executor, [1])
    assert isinstance(failure, FinalFailure)
    assert failure.attempts == 2
    assert isinstance(failure.error, LookupTimeoutError)
    assert str(failure.error) == "no answer within timeout.ms=100"
    assert seen == [0.0, 0.11]
    assert took == 0.21
    assert (metrics.requests, metrics.retries, metrics.timeouts) == (2, 1, 2)
    assert store.in_flight == 0  # the timed-out calls were cancelled
    assert not executor.abandoned


def test_a_timeout_then_an_answer_in_time() -> None:
    store = FakeStore(TABLE)
    delays = iter([1.0, 0.05])
    store.latency = lambda keys: next(delays)
    executor, metrics, _ = executor_for(
        store, timeout_ms=200, initial_delay_ms=100, max_delay_ms=1000
    )
    answer, took = run(executor, [9])
    assert names(answer) == ["user-9"]
    assert took == 0.35  # 200 ms cut, 100 ms backoff, 50 ms answer
    assert (metrics.timeouts, metrics.retries, metrics.requests) == (1, 1, 2)


def test_the_deadline_ends_the_retries_with_its_own_error() -> None:
    store = FakeStore(TABLE)
    store.latency = lambda keys: 0.12
    seen: list[float] = []
    executor, metrics, _ = executor_for(
        store, seen, timeout_ms=100, deadline_ms=250, initial_delay_ms=50, max_attempts=5
    )
    failure, took = run(executor, [1])
    assert isinstance(failure, FinalFailure)
    assert seen == [0.0, 0.15]  # the second attempt cut to end at 250 ms; no third
    assert took == 0.25
    assert failure.attempts == 2
    assert isinstance(failure.error, LookupTimeoutError)
    assert str(failure.error).startswith("no answer within deadline.ms=250 (2 attempts)")
    assert metrics.timeouts == 2


def test_the_deadline_error_does_not_repeat_itself() -> None:
    store = FakeStore(TABLE)
    store.latency = lambda keys: 0.12
    executor, _, _ = executor_for(
        store, timeout_ms=100, deadline_ms=250, initial_delay_ms=50, max_attempts=5
    )
    failure, _ = run(executor, [1])
    assert str(failure.error) == "no answer within deadline.ms=250 (2 attempts)"


def test_a_retry_that_would_start_past_the_deadline_is_not_made() -> None:
    store = FakeStore(TABLE)
    store.failures = [TransientError("reset")]
    seen: list[float] = []
    executor, metrics, _ = executor_for(
        store, seen, deadline_ms=100, initial_delay_ms=200, max_delay_ms=1000
    )
    failure, took = run(executor, [1])
    assert isinstance(failure, FinalFailure)
    assert failure.attempts == 1
    assert str(failure.error) == (
        "no answer within deadline.ms=100 (1 attempt); the last attempt failed with "
        "TransientError: reset"
    )
    assert seen == [0.0] and took == 0.0
    assert metrics.retries == 0


def test_missing_keys_are_asked_again_under_retry_on_miss() -> None:
    store = FakeStore({1: TABLE[1]})
    seen: list[float] = []

    def latency(keys: Any) -> float:
        store.table[3] = TABLE[3]  # arrives after the first request was answered
        if len(store.requests) == 1:
            store.table.pop(3)
        return 0.0

    store.latency = latency
    executor, metrics, _ = executor_for(
        store, seen, retry_on_miss=True, max_attempts=3, initial_delay_ms=40
    )
    answer, took = run(executor, [1, 3, 700])
    assert store.requests == [[1, 3, 700], [3, 700], [700]]
    assert names(answer) == ["user-1", "user-3", None]
    assert seen == [0.0, 0.04, 0.08]
    assert took == 0.08
    assert (metrics.requests, metrics.retries) == (3, 2)


def test_retry_on_miss_stops_once_every_key_is_found() -> None:
    store = FakeStore(TABLE)
    executor, metrics, _ = executor_for(store, retry_on_miss=True, max_attempts=3)
    answer, _ = run(executor, [1, 2])
    assert names(answer) == ["user-1", "user-2"]
    assert store.requests == [[1, 2]]
    assert metrics.retries == 0


def test_rate_limit_spaces_the_attempts() -> None:
    store = FakeStore(TABLE)
    store.failures = [TransientError("a"), TransientError("b")]
    seen: list[float] = []
    executor, _, _ = executor_for(store, seen, rate_limit=4.0, initial_delay_ms=1)
    answer, _ = run(executor, [1])
    assert names(answer) == ["user-1"]
    assert seen == [0.0, 0.25, 0.5]  # 250 ms apart, though the backoff is 1 ms


def test_an_overload_lowers_an_adaptive_limit_and_is_recorded() -> None:
    store = FakeStore(TABLE)
    store.failures = [OverloadedError("503")]
    limit = AdaptiveLimit(ceiling=20)
    executor, metrics, slots = executor_for(store, limit=limit)
    answer, _ = run(executor, [1])
    assert names(answer) == ["user-1"]
    assert slots.limit is limit
    assert [value for _, value in metrics.limit_history[0]] == [10, 7]


def test_a_columnar_client_answers_with_columnar_matches() -> None:
    store = FakeStore(TABLE)
    spec = make_spec(make_options())
    client = FakeColumnarClient(make_config(spec), store)
    executor, metrics, _ = executor_for(store, client=client)
    answer, _ = run(executor, [4, 900, 2])
    assert isinstance(answer, ColumnarAnswer)
    assert answer.found().tolist() == [True, False, True]
    assert answer.to_matches().values.to_pylist() == [
        {"name": "user-4", "n": 4},
        {"name": "user-2", "n": 2},
    ]
    assert metrics.requests == 1


def test_a_client_returning_none_found_nothing() -> None:
    spec = make_spec(make_options())
    executor, _, _ = executor_for(FakeStore(), client=Returning(make_config(spec), None))
    answer, _ = run(executor, [1, 2])
    assert names(answer) == [None, None]


def test_a_client_returning_something_else_than_a_mapping_fails_loudly() -> None:
    spec = make_spec(make_options())
    executor, metrics, _ = executor_for(
        FakeStore(), client=Returning(make_config(spec), [1, 2]), max_attempts=3
    )
    with pytest.raises(TypeError, match="connector 'fake' returned list from lookup"):
        run(executor, [1])
    assert metrics.requests == 1


def test_record_errors_of_a_client_are_redacted() -> None:
    spec = make_spec(make_options())
    result = {1: RecordError("bad value at redis://app:hunter2@db:6379/0"), 2: {"name": "B"}}
    executor, _, _ = executor_for(FakeStore(), client=Returning(make_config(spec), result))
    answer, _ = run(executor, [1, 2])
    assert isinstance(answer, RecordAnswer)
    error, record = answer.values
    assert isinstance(error, RecordError)
    assert str(error) == "bad value at redis://app:***@db:6379/0"
    assert record == {"name": "B"}


def test_redact_texts_redacts_each_message_and_keeps_nulls() -> None:
    texts = pa.array(["at postgres://u:pw@h/db", None, "plain"], pa.string())
    assert redact_texts(texts).to_pylist() == ["at postgres://u:***@h/db", None, "plain"]
    assert redact_texts(texts, str.upper).to_pylist() == ["AT POSTGRES://U:PW@H/DB", None, "PLAIN"]


def test_hedgings_window_takes_the_time_the_loop_ran_and_the_metrics_the_wall_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Spark held the task 300 ms of a 350 ms request: the metrics see 350 ms, the hedging
    window 50 ms (its delay is time the loop ran: a window of wall times would put a busy
    machine's pauses into ``hedge.after.ms=p95`` and leave slow requests unhedged)."""
    from lookup_source.engine.request import executor as executor_module
    from lookup_source.engine.request.executor import Feedback
    from lookup_source.engine.request.hedge import MIN_SAMPLES, Hedging

    paused = {"s": 2.0}
    monkeypatch.setattr(executor_module, "time_paused", lambda: paused["s"])
    metrics = LookupMetrics()
    hedging = Hedging(after_s=0.1, quantile=0.95, budget=0.05)
    feedback = Feedback(metrics, FixedLimit(10), lambda _: None, lambda: 0, hedging)
    for _ in range(MIN_SAMPLES):
        at_send = feedback.paused()
        paused["s"] += 0.3
        feedback.answered(10.0, 10.35, at_send)
    assert hedging.delay_s() == pytest.approx(0.05)
    assert metrics.latency_max_ms == pytest.approx(350.0)
    # without hedging, nothing reads the loop's pauses
    plain = Feedback(LookupMetrics(), FixedLimit(10), lambda _: None, lambda: 0, None)
    assert plain.paused() == 0.0
