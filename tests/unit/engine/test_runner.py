"""The engine run inside one Spark task (lookup_source.engine.runner): batches in, batches with
the values out; when the task ends its metrics are reported once (named, with the worker's peak
memory, and to OpenTelemetry when asked) and its client handed back — kept after a task that
ended well or that Spark stopped reading, closed after a failure; a close is safe twice."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from lookup_source.engine import runner
from lookup_source.engine.kept.worker import Worker
from lookup_source.engine.metrics import LookupMetrics
from lookup_source.engine.runner import LookupTask, run_lookups
from lookup_source.errors import LookupFailedError, PermanentError
from lookup_source.testing.clock import VirtualTimeLoop, virtual_worker
from tests.fakes import (
    FakeClient,
    FakeStore,
    StoreFactory,
    key_batch,
    make_config,
    make_options,
    make_spec,
)

TABLE = {i: {"name": f"user-{i}", "n": i} for i in range(10)}


@pytest.fixture
def worker() -> Iterator[Worker]:
    made = virtual_worker()
    yield made
    made.close()


def names(batches: Any) -> list[str | None]:
    return [row["name"] for batch in batches for row in batch.to_pylist()]


def test_batches_come_back_with_their_values_and_the_metrics_once(worker: Worker) -> None:
    store = FakeStore(TABLE)
    store.latency = lambda keys: 3600.0  # an hour per answer, on virtual time
    spec = dataclasses.replace(make_spec(make_options(timeout_ms=7_200_000)), name="users")
    reported: list[LookupMetrics] = []
    out = run_lookups(
        [key_batch([1, 2]), key_batch([3, 42])],
        spec,
        make_config(spec),
        client_factory=StoreFactory(store),
        on_metrics=reported.append,
        keep_client=True,
        worker=worker,
    )
    assert names(out) == ["user-1", "user-2", "user-3", None]
    (metrics,) = reported
    assert metrics.rows == 4 and metrics.missing_keys == 1 and metrics.name == "users"
    assert metrics.peak_rss_mb > 0
    assert store.opened == 1 and store.closed == 0  # kept for the next task


def test_a_task_spark_stopped_reading_keeps_its_client(worker: Worker) -> None:
    store = FakeStore(TABLE)
    spec = make_spec(make_options(batch_size=1))
    reported: list[LookupMetrics] = []
    out = run_lookups(
        [key_batch([1]), key_batch([2]), key_batch([3])],
        spec,
        make_config(spec),
        client_factory=StoreFactory(store),
        on_metrics=reported.append,
        keep_client=True,
        worker=worker,
    )
    next(out)
    out.close()  # Spark read enough (a LIMIT): not a failure of the client
    assert len(reported) == 1 and store.closed == 0


def test_a_failed_task_closes_its_client(worker: Worker) -> None:
    store = FakeStore(TABLE)
    store.failures = [PermanentError("refused")]
    spec = make_spec(make_options())
    reported: list[LookupMetrics] = []
    with pytest.raises(LookupFailedError, match="refused"):
        list(
            run_lookups(
                [key_batch([1])],
                spec,
                make_config(spec),
                client_factory=StoreFactory(store),
                on_metrics=reported.append,
                keep_client=True,
                worker=worker,
            )
        )
    assert store.opened == 1 and store.closed == 1  # never handed to the next task
    assert len(reported) == 1 and reported[0].failed_keys == 1


def test_an_input_that_fails_fails_the_task_and_closes_its_client(worker: Worker) -> None:
    store = FakeStore(TABLE)
    spec = make_spec(make_options())

    def batches() -> Iterator[Any]:
        yield key_batch([1])
        raise OSError("Spark's input broke")

    out = run_lookups(
        batches(),
        spec,
        make_config(spec),
        client_factory=StoreFactory(store),
        keep_client=True,
        worker=worker,
    )
    with pytest.raises(OSError, match="input broke"):
        list(out)
    assert store.closed == 1


def test_a_task_driven_by_hand_is_closed_once(worker: Worker) -> None:
    store = FakeStore(TABLE)
    spec = make_spec(make_options())
    reported: list[LookupMetrics] = []
    task = LookupTask(
        spec,
        make_config(spec),
        client_factory=lambda config: FakeClient(config, store),  # a closure: never kept
        on_metrics=reported.append,
        loop_factory=VirtualTimeLoop,
        worker=worker,
    )
    assert task.metrics is not None and task.metrics.rows == 0
    rows = names(task.submit(key_batch([5, 6]))) + names(task.finish())
    assert rows == ["user-5", "user-6"] and task.metrics.rows == 2
    task.close()
    task.close()  # safe twice
    assert len(reported) == 1 and store.opened == store.closed == 1


def test_a_kept_client_closed_as_failed_is_never_kept(worker: Worker) -> None:
    store = FakeStore(TABLE)
    spec = make_spec(make_options())
    factory = StoreFactory(store)
    task = LookupTask(
        spec, make_config(spec), client_factory=factory, keep_client=True, worker=worker
    )
    assert names(task.submit(key_batch([1]))) + names(task.finish()) == ["user-1"]
    task.close(failed=True)
    assert store.closed == 1
    again = LookupTask(
        spec, make_config(spec), client_factory=factory, keep_client=True, worker=worker
    )
    again.close()
    assert store.opened == 2 and store.closed == 1  # a new client, kept this time


def test_a_task_reports_to_opentelemetry_when_asked(
    worker: Worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    exporter = object()
    recorded: list[tuple[Any, LookupMetrics, dict[str, str]]] = []
    monkeypatch.setattr(worker, "telemetry", lambda: exporter)
    monkeypatch.setattr(
        runner.telemetry,
        "record",
        lambda made, metrics, **names: recorded.append((made, metrics, names)),
    )
    store = FakeStore(TABLE)
    spec = dataclasses.replace(make_spec(make_options(metrics_opentelemetry=True)), name="users")
    out = run_lookups(
        [key_batch([1])],
        spec,
        make_config(spec),
        client_factory=StoreFactory(store),
        worker=worker,
    )
    assert names(out) == ["user-1"]
    ((made, metrics, labels),) = recorded
    assert made is exporter and metrics.rows == 1
    assert labels == {"lookup": "users", "connector": "fake"}
