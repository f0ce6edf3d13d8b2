"""A task's output side (:class:`Emitter`): a batch's rows count as buffered from its arrival,
its matches too once its output is built, and both stop counting when it leaves; the output
leaves in batches of at most ``output_rows`` rows, in the queue's order; a failure of the builder
(a value that cannot be output under ``on.error=fail``, a bug) fails the task through the
``fail`` callback; a request that failed for good is counted and handled as ``on.error`` says."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from lookup_source.engine.intake.batches import BatchEntry, Request
from lookup_source.engine.metrics import LookupMetrics
from lookup_source.engine.output.builder import OutputBuilder
from lookup_source.engine.output.emitter import Emitter
from lookup_source.engine.output.joined_rows import JoinedRows
from lookup_source.engine.output.queue import KeyOrderedQueue, OrderedQueue, OutputQueue
from lookup_source.engine.request.answers import Part, RecordAnswer
from lookup_source.engine.request.retry import FinalFailure
from lookup_source.errors import LookupFailedError, PermanentError
from tests.fakes import key_batch, make_options, make_spec

ONE = {"name": "one", "n": 1}
MANY = [{"name": f"m{i}", "n": i} for i in range(4)]


class Task:
    """An emitter and what it reports: the errors that failed the task, its metrics."""

    def __init__(
        self,
        queue: OutputQueue | None = None,
        output_rows: int = 100,
        builder: OutputBuilder | None = None,
        how: str = "left",
        **options: Any,
    ) -> None:
        self.spec = make_spec(make_options(**options), how=how)
        self.builder = builder or OutputBuilder(
            self.spec.options, self.spec.value_fields, how=how, connector="fake", address=None
        )
        self.failures: list[BaseException] = []
        self.metrics = LookupMetrics()
        self.emitter = Emitter(
            queue if queue is not None else OrderedQueue(),
            self.builder,
            self.metrics,
            output_rows,
            self.failures.append,
        )
        self._numbers = iter(range(1000))

    def job(self, keys: Sequence[Any], answers: dict[Any, Any]) -> BatchEntry:
        job = BatchEntry.of(next(self._numbers), key_batch(list(keys)), self.spec, ["k"])
        asked = job.python_keys()
        fields = list(self.spec.value_fields)
        values = [answers.get(key) for key in asked]
        job.receive(Part(np.arange(len(asked)), RecordAnswer(values, asked, fields)))
        return job


def rows(outputs: list[Iterator[pa.RecordBatch]]) -> list[list[tuple[Any, ...]]]:
    """Each output batch's rows as (row, name)."""
    return [[(r["row"], r["name"]) for r in batch.to_pylist()] for it in outputs for batch in it]


def test_whole_batches_buffer_their_rows_and_matches_until_they_leave() -> None:
    task = Task(output_rows=2)
    emitter = task.emitter
    first = task.job([1, 2, 1], {1: ONE})
    second = task.job([7], {7: MANY})
    emitter.put(first)
    emitter.put(second)
    assert emitter.buffered_rows == 4  # input rows
    emitter.complete(second)
    assert emitter.buffered_rows == 8  # and the 4 matches of key 7
    assert second.held_rows == 5 and second.parts == []  # its answers are in its output now
    assert emitter.ready() == []  # it waits for the first batch
    emitter.complete(first)
    assert emitter.buffered_rows == 9
    outputs = emitter.ready()
    assert rows(outputs) == [
        [(0, "one"), (1, None)],
        [(2, "one")],
        [(0, "m0"), (0, "m1")],
        [(0, "m2"), (0, "m3")],
    ]
    assert emitter.buffered_rows == 0 and len(emitter.queue) == 0
    assert first.output is None and second.output is None
    assert task.failures == []


def test_an_empty_output_is_one_empty_batch() -> None:
    task = Task()
    job = task.job([], {})
    task.emitter.put(job)
    task.emitter.complete(job)
    [batch] = [b for it in task.emitter.ready() for b in it]
    assert batch.num_rows == 0 and batch.schema.names == ["k", "row", "name", "n"]
    assert task.emitter.buffered_rows == 0


def test_a_value_that_cannot_be_output_fails_the_task() -> None:
    task = Task(on_error="fail")
    job = task.job([1, 4], {1: ONE, 4: {"name": "bad", "n": "x"}})
    task.emitter.put(job)
    task.emitter.complete(job)
    [failure] = task.failures
    assert isinstance(failure, LookupFailedError)
    assert failure.sample_keys == [4] and "key 4: column 'n' expects bigint" in failure.reason
    assert task.metrics.failed_keys == 1
    assert job.output is None and job.parts == [] and job.failed_parts == []
    assert not task.emitter.queue.is_done(job)  # never leaves
    assert task.emitter.ready() == [] and task.emitter.buffered_rows == 2


class BrokenBuilder(OutputBuilder):
    """A builder with a bug."""

    def build(self, job: BatchEntry) -> JoinedRows:
        raise RuntimeError("a bug")

    def build_part(self, job: BatchEntry, positions: np.ndarray, nulls: bool) -> JoinedRows:
        raise RuntimeError("a bug in a part")


def test_a_bug_in_the_builder_fails_the_task() -> None:
    spec = make_spec(make_options())
    broken = BrokenBuilder(spec.options, spec.value_fields, how="left", connector="f", address=None)
    task = Task(builder=broken)
    job = task.job([1], {1: ONE})
    task.emitter.put(job)
    task.emitter.complete(job)
    assert [str(e) for e in task.failures] == ["a bug"]
    assert not task.emitter.queue.all_done()


def test_key_ordered_rows_leave_as_their_keys_are_answered() -> None:
    queue = KeyOrderedQueue()
    task = Task(queue=queue)
    emitter = task.emitter
    job = task.job([1, 2, None, 1], {1: ONE, 2: MANY[:2]})  # 1, 2 at 0, 1
    emitter.put(job)
    assert emitter.buffered_rows == 4
    queue.answered(job, np.array([0]))
    assert rows(emitter.ready()) == [[(0, "one"), (2, None), (3, "one")]]
    assert emitter.buffered_rows == 4  # not all of it left
    queue.answered(job, np.array([1]))
    emitter.complete(job)
    assert rows(emitter.ready()) == [[(1, "m0"), (1, "m1")]]
    assert emitter.buffered_rows == 0 and len(queue) == 0
    assert emitter.ready() == []


def test_key_ordered_a_release_with_no_row_gives_no_output() -> None:
    queue = KeyOrderedQueue()
    task = Task(queue=queue, how="inner")
    job = task.job([1, 5], {1: ONE})  # 5: a miss, dropped by the inner join
    task.emitter.put(job)
    queue.answered(job, np.array([1]))
    assert task.emitter.ready() == []
    queue.answered(job, np.array([0]))
    assert rows(task.emitter.ready()) == [[(0, "one")]]
    assert task.emitter.buffered_rows == 0


def test_key_ordered_a_failure_building_rows_fails_the_task_and_stops() -> None:
    queue = KeyOrderedQueue()
    task = Task(queue=queue, on_error="fail")
    bad = task.job([4], {4: {"name": "bad", "n": "x"}})
    good = task.job([1], {1: ONE})
    task.emitter.put(bad)
    task.emitter.put(good)
    queue.answered(bad, np.array([0]))
    queue.answered(good, np.array([0]))
    assert task.emitter.ready() == []  # the good batch's rows are not output after a failure
    [failure] = task.failures
    assert isinstance(failure, LookupFailedError) and failure.sample_keys == [4]
    assert task.metrics.failed_keys == 1


def test_key_ordered_a_bug_building_rows_fails_the_task() -> None:
    spec = make_spec(make_options())
    broken = BrokenBuilder(spec.options, spec.value_fields, how="left", connector="f", address=None)
    queue = KeyOrderedQueue()
    task = Task(queue=queue, builder=broken)
    job = task.job([None], {})
    task.emitter.put(job)
    assert task.emitter.ready() == []
    assert [str(e) for e in task.failures] == ["a bug in a part"]


def test_a_failed_request_is_counted_with_the_keys_shared_with_it() -> None:
    task = Task(on_error="column")
    owner = task.job([1, 2, 3], {})
    later = task.job([3, 9], {})
    request = Request(owner, np.array([1, 2]))  # 2 and 3
    request.subscribers.append((later, np.array([0]), np.array([1])))  # later's 3
    failing = task.emitter.request_failed(request, FinalFailure(PermanentError("down"), 2), None)
    assert failing is None
    assert task.metrics.failed_requests == 1 and task.metrics.failed_keys == 3
    message = "fake lookup failed after 2 attempts: PermanentError: down"
    assert [m.key_index.tolist() for m in owner.failed_parts] == [[1, 2]]
    assert owner.failed_parts[0].errors is not None
    assert owner.failed_parts[0].errors.to_pylist() == [message, message]
    assert [m.key_index.tolist() for m in later.failed_parts] == [[0]]


@pytest.mark.parametrize("current", [None, "earlier"])
def test_a_failed_request_under_on_error_fail_is_the_tasks_error(current: str | None) -> None:
    task = Task(on_error="fail")
    owner = task.job([1, 2], {})
    request = Request(owner, np.array([0, 1]))
    earlier = LookupFailedError(
        connector="fake", address=None, failed_keys=1, attempts=1, reason="x", sample_keys=[0]
    )
    failing = task.emitter.request_failed(
        request, FinalFailure(PermanentError("down"), 3), earlier if current else None
    )
    assert isinstance(failing, LookupFailedError)
    assert failing.failed_keys == (3 if current else 2)
    assert failing.sample_keys == ([0, 1, 2] if current else [1, 2])
    assert owner.failed_parts == []
    assert task.metrics.failed_requests == 1 and task.metrics.failed_keys == 2
