"""Output queues (``output.mode``): :class:`OrderedQueue` releases whole batches in arrival order
(a finished batch waits for the earlier ones), :class:`UnorderedQueue` in the order they finish,
:class:`KeyOrderedQueue` the rows of answered keys (a key an earlier batch still waits for holds
back later batches' rows of that key only; rows with a null key leave at once). The queue alone
marks an entry done, once; a failed output build leaves it undone."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from lookup_source.engine.intake.batches import BatchEntry
from lookup_source.engine.output.queue import (
    KeyOrderedQueue,
    OrderedQueue,
    OutputQueue,
    Release,
    UnorderedQueue,
    output_queue,
)
from tests.fakes import key_batch, make_options, make_spec

SPEC = make_spec(make_options())


def entry(number: int, keys: Sequence[Any] = (1, 2)) -> BatchEntry:
    return BatchEntry.of(number, key_batch(list(keys)), SPEC, ["k"])


def built(log: list[int] | None = None, ok: bool = True) -> Any:
    """A ``build_output`` that records the batches it built and answers ``ok``."""

    def build(job: BatchEntry) -> bool:
        if log is not None:
            log.append(job.number)
        return ok

    return build


def numbers(releases: list[Release]) -> list[int]:
    return [release.job.number for release in releases]


def positions(release: Release) -> list[int]:
    assert release.positions is not None
    return release.positions.tolist()


def test_output_queue_by_mode() -> None:
    assert type(output_queue("ordered")) is OrderedQueue
    assert type(output_queue("unordered")) is UnorderedQueue
    assert type(output_queue("key-ordered")) is KeyOrderedQueue
    assert type(output_queue("anything else")) is OrderedQueue


def test_the_base_queue_releases_nothing_itself() -> None:
    queue = OutputQueue()
    with pytest.raises(NotImplementedError):
        queue.pop_ready()
    with pytest.raises(NotImplementedError):
        queue.has_ready()


def test_an_empty_queue_is_all_done() -> None:
    for queue in (OrderedQueue(), UnorderedQueue(), KeyOrderedQueue()):
        assert len(queue) == 0
        assert queue.all_done() and queue.unfinished() == 0
        assert queue.pop_ready() == []


def test_ordered_a_finished_batch_waits_for_the_earlier_ones() -> None:
    queue = OrderedQueue()
    first, second, third = entry(0), entry(1), entry(2)
    for job in (first, second, third):
        queue.put(job)
    log: list[int] = []
    queue.complete(second, built(log))
    queue.complete(third, built(log))
    assert log == [1, 2]  # each output is built as the batch completes
    assert queue.is_done(second) and queue.is_done(third) and not queue.is_done(first)
    assert not queue.has_ready() and queue.pop_ready() == []
    assert len(queue) == 3 and queue.unfinished() == 1 and not queue.all_done()
    queue.complete(first, built(log))
    assert queue.all_done() and queue.has_ready()
    ready = queue.pop_ready()
    assert numbers(ready) == [0, 1, 2]
    assert all(r.positions is None and r.last and not r.nulls for r in ready)
    assert len(queue) == 0 and not queue.has_ready() and queue.pop_ready() == []


def test_ordered_releases_the_finished_head_only() -> None:
    queue = OrderedQueue()
    first, second, third = entry(0), entry(1), entry(2)
    for job in (first, second, third):
        queue.put(job)
    queue.complete(first, built())
    queue.complete(third, built())
    assert numbers(queue.pop_ready()) == [0]
    assert len(queue) == 2 and queue.unfinished() == 1
    assert not queue.is_done(first)  # it left: no longer counted
    queue.complete(second, built())
    assert numbers(queue.pop_ready()) == [1, 2]


def test_unordered_releases_batches_in_the_order_they_finished() -> None:
    queue = UnorderedQueue()
    jobs = [entry(n) for n in range(4)]
    for job in jobs:
        queue.put(job)
    assert not queue.has_ready()
    queue.complete(jobs[2], built())
    queue.complete(jobs[0], built())
    assert queue.has_ready() and queue.unfinished() == 2
    ready = queue.pop_ready()
    assert numbers(ready) == [2, 0]
    assert all(r.positions is None and r.last for r in ready)
    assert len(queue) == 2 and not queue.has_ready() and queue.pop_ready() == []
    queue.complete(jobs[3], built())
    queue.complete(jobs[1], built())
    assert numbers(queue.pop_ready()) == [3, 1]
    assert len(queue) == 0 and queue.all_done()


@pytest.mark.parametrize("make", [OrderedQueue, UnorderedQueue, KeyOrderedQueue])
def test_completing_an_entry_twice_raises(make: type[OutputQueue]) -> None:
    queue = make()
    job = entry(5)
    queue.put(job)
    queue.complete(job, built())
    with pytest.raises(RuntimeError, match="batch 5 completed twice"):
        queue.complete(job, built())
    assert queue.is_done(job)


@pytest.mark.parametrize("make", [OrderedQueue, UnorderedQueue])
def test_a_failed_build_leaves_the_entry_undone(make: type[OutputQueue]) -> None:
    queue = make()
    job = entry(3)
    queue.put(job)
    log: list[int] = []
    queue.complete(job, built(log, ok=False))
    assert log == [3]
    assert not queue.is_done(job) and not queue.all_done() and queue.unfinished() == 1
    assert not queue.has_ready() and queue.pop_ready() == []
    assert len(queue) == 1
    queue.complete(job, built(log))  # (not done: completing again is no second completion)
    assert queue.is_done(job) and numbers(queue.pop_ready()) == [3]


def test_key_ordered_completion_builds_nothing() -> None:
    queue = KeyOrderedQueue()
    job = entry(0, [1, 2])
    queue.put(job)
    log: list[int] = []
    queue.complete(job, built(log))
    assert log == []  # its rows are built as they leave, by whoever pops them
    assert queue.is_done(job) and queue.all_done() and queue.unfinished() == 0


def test_key_ordered_releases_the_rows_of_answered_keys() -> None:
    queue = KeyOrderedQueue()
    job = entry(0, [10, 20, 30, 10])  # distinct keys 10, 20, 30 at positions 0, 1, 2
    queue.put(job)
    assert queue.has_ready()  # a new entry: something may have changed
    assert queue.pop_ready() == []  # no key answered, no null key
    assert not queue.has_ready()
    queue.answered(job, np.array([0, 2]))
    assert queue.has_ready()
    [release] = queue.pop_ready()
    assert release.job is job and positions(release) == [0, 2]
    assert not release.nulls and not release.last
    assert len(queue) == 1
    queue.request_done(lambda: [(job, np.array([1]))])
    [release] = queue.pop_ready()
    assert positions(release) == [1] and release.last
    assert len(queue) == 0


def test_key_ordered_rows_with_a_null_key_leave_at_once() -> None:
    queue = KeyOrderedQueue()
    job = entry(0, [None, 1, None])
    queue.put(job)
    [release] = queue.pop_ready()
    assert positions(release) == [] and release.nulls and not release.last
    queue.answered(job, np.array([0]))
    [release] = queue.pop_ready()
    assert positions(release) == [0] and not release.nulls and release.last


def test_key_ordered_a_batch_of_null_keys_only_leaves_whole_at_once() -> None:
    queue = KeyOrderedQueue()
    job = entry(0, [None, None])
    queue.put(job)
    [release] = queue.pop_ready()
    assert positions(release) == [] and release.nulls and release.last
    assert len(queue) == 0


def test_key_ordered_a_key_an_earlier_batch_waits_for_holds_back_that_key_only() -> None:
    queue = KeyOrderedQueue()
    first = entry(0, [1, 2])  # 1 at 0, 2 at 1
    second = entry(1, [3, 1, None])  # 3 at 0, 1 at 1
    queue.put(first)
    queue.put(second)
    queue.answered(first, np.array([1]))  # key 2 of the first batch
    queue.answered(second, np.array([0, 1]))  # keys 3 and 1 of the second
    ready = queue.pop_ready()
    assert numbers(ready) == [0, 1]
    assert positions(ready[0]) == [1] and not ready[0].last
    assert positions(ready[1]) == [0] and ready[1].nulls and not ready[1].last  # key 1 held
    assert queue.pop_ready() == []
    queue.answered(first, np.array([0]))  # key 1 of the first batch: both may go now
    ready = queue.pop_ready()
    assert numbers(ready) == [0, 1]
    assert positions(ready[0]) == [0] and ready[0].last
    assert positions(ready[1]) == [1] and ready[1].last and not ready[1].nulls
    assert len(queue) == 0


def test_key_ordered_answered_but_marks_all_keys_but_those_still_wanted() -> None:
    queue = KeyOrderedQueue()
    job = entry(0, [1, 2, 3, 4])
    queue.put(job)
    queue.pop_ready()
    queue.answered_but(job, None, np.array([1, 3]))  # a cache knew keys 0 and 2
    assert positions(queue.pop_ready()[0]) == [0, 2]
    queue.answered_but(job, np.array([1, 3]), np.array([3]))  # the tier knew key 1 of them
    assert positions(queue.pop_ready()[0]) == [1]
    queue.answered_but(job, np.array([3]), np.array([3]))  # nothing more known
    assert not queue.has_ready()
    queue.answered_but(job, None, np.arange(4))  # nothing known at all
    assert not queue.has_ready() and len(queue) == 1


def test_key_ordered_answers_for_a_batch_that_left_are_ignored() -> None:
    queue = KeyOrderedQueue()
    job = entry(0, [1])
    queue.put(job)
    queue.answered(job, np.array([0]))
    assert numbers(queue.pop_ready()) == [0] and len(queue) == 0
    queue.answered(job, np.array([0]))
    assert not queue.has_ready() and queue.pop_ready() == []


def test_key_ordered_all_done_and_unfinished_follow_completion() -> None:
    queue = KeyOrderedQueue()
    first, second = entry(0, [1]), entry(1, [2])
    queue.put(first)
    queue.put(second)
    assert queue.unfinished() == 2 and not queue.all_done()
    queue.answered(first, np.array([0]))
    queue.complete(first, built())
    assert queue.unfinished() == 1 and queue.is_done(first) and not queue.is_done(second)
    assert numbers(queue.pop_ready()) == [0]
    assert not queue.is_done(first)  # it left
    queue.answered(second, np.array([0]))
    queue.complete(second, built())
    assert queue.all_done() and numbers(queue.pop_ready()) == [1] and len(queue) == 0
