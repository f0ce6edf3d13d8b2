"""Output queues: in which order input batches leave the engine (``output.mode``).

Flink's ``OrderedStreamElementQueue`` / ``UnorderedStreamElementQueue``, for Arrow batches, and
its key-ordered mode (FLIP-519): the engine puts each input batch in the queue when it arrives,
tells it which of the batch's keys have their answer, and marks it complete when all its lookups
are done; the queue says what may leave now (:meth:`OutputQueue.pop_ready`). The queue owns each
entry's progress (whether it is done — it alone marks that, once —, which keys have their
answer and which rows have left) and decides when its output is built: at completion for a
whole batch, on release for rows. The entry owns the count of its parts and completes once
(:class:`~lookup_source.engine.intake.batches.BatchEntry`); the engine only conducts.

- :class:`OrderedQueue`: whole batches, in arrival order;
- :class:`UnorderedQueue`: whole batches, as they complete;
- :class:`KeyOrderedQueue`: rows, as soon as their key has its answer — the rows of one key in
  arrival order, never held back by the rows of other keys.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from lookup_source.connector_api.keys import match_rows
from lookup_source.connector_api.ranges import key_columns_of

if TYPE_CHECKING:
    from lookup_source.engine.intake.batches import BatchEntry


@dataclass(frozen=True)
class Release:
    """What may leave: a whole batch (``positions`` None), or the rows of some of its keys
    (``positions`` among its distinct keys) and, if ``nulls``, its rows with a null key.
    ``last``: nothing of the batch is left after this."""

    job: BatchEntry
    positions: np.ndarray | None = None
    nulls: bool = False
    last: bool = True


Targets = Callable[[], Iterable[tuple["BatchEntry", np.ndarray]]]
"""The batches a request answered and, for each, the positions of its keys there."""


class OutputQueue:
    """The interface: ``put`` on arrival; ``answered_but`` and ``request_done`` as keys get
    answers; ``complete`` when all are done; ``pop_ready`` to emit. This base emits whole
    batches, their output built when they complete."""

    def __init__(self) -> None:
        self._entries: deque[BatchEntry] = deque()
        self._done: set[int] = set()
        """The numbers of its entries that are done: their lookups ended (and, for a whole
        batch, its output built). The queue alone marks an entry done, once."""

    def put(self, job: BatchEntry) -> None:
        self._entries.append(job)

    def answered_but(self, job: BatchEntry, asked: np.ndarray | None, still: np.ndarray) -> None:
        """Of the keys of ``job`` at ``asked`` (positions among its distinct keys; None: all
        of them), all but those at ``still`` have their answer (from a cache, the tier)."""

    def request_done(self, targets: Targets) -> None:
        """A request ended (answered or failed): its keys in every batch it served have their
        answer (``targets``, called only by a queue that needs them)."""

    def complete(self, job: BatchEntry, build_output: Callable[[BatchEntry], bool]) -> None:
        """All of ``job``'s lookups are done: its output is built now (``build_output``:
        False when that failed the task, and the batch stays undone)."""
        if build_output(job):
            self._mark_done(job)

    def _mark_done(self, job: BatchEntry) -> None:
        if job.number in self._done:
            raise RuntimeError(f"batch {job.number} completed twice")
        self._done.add(job.number)
        self._finished(job)

    def _finished(self, job: BatchEntry) -> None:
        """``job`` is done, its output built."""

    def _leave(self, job: BatchEntry) -> None:
        """``job`` has left the queue."""
        self._entries.remove(job)
        self._done.discard(job.number)

    def is_done(self, job: BatchEntry) -> bool:
        """Whether ``job`` is done (its lookups ended; a whole batch's output built)."""
        return job.number in self._done

    def pop_ready(self) -> list[Release]:
        raise NotImplementedError

    def has_ready(self) -> bool:
        """Whether :meth:`pop_ready` may have something now."""
        raise NotImplementedError

    def __len__(self) -> int:
        return len(self._entries)

    def all_done(self) -> bool:
        return all(job.number in self._done for job in self._entries)

    def unfinished(self) -> int:
        return sum(1 for job in self._entries if job.number not in self._done)


class OrderedQueue(OutputQueue):
    """Batches leave in arrival order: a finished batch waits for the ones before it."""

    def pop_ready(self) -> list[Release]:
        ready = []
        while self._entries and self._entries[0].number in self._done:
            job = self._entries.popleft()
            self._done.discard(job.number)
            ready.append(Release(job))
        return ready

    def has_ready(self) -> bool:
        return bool(self._entries) and self._entries[0].number in self._done


class UnorderedQueue(OutputQueue):
    """Batches leave as soon as they are finished, in the order they finished."""

    def __init__(self) -> None:
        super().__init__()
        self._finished_order: deque[BatchEntry] = deque()

    def _finished(self, job: BatchEntry) -> None:
        self._finished_order.append(job)

    def pop_ready(self) -> list[Release]:
        ready = list(self._finished_order)
        self._finished_order.clear()
        for job in ready:
            self._leave(job)
        return [Release(job) for job in ready]

    def has_ready(self) -> bool:
        return bool(self._finished_order)


@dataclass(eq=False)
class _Progress:
    """How far a batch is under ``key-ordered``: which of its distinct keys have their answer,
    which have left with their rows, whether its rows with a null key have left."""

    answered: np.ndarray
    released: np.ndarray
    nulls_released: bool


class KeyOrderedQueue(OutputQueue):
    """Rows leave as soon as their key has its answer, in arrival order among those that leave
    together; a row whose key an earlier batch still waits for waits too. So the rows of one key
    keep their order, and a slow key holds back its own rows only. Their output is built as
    they leave."""

    def __init__(self) -> None:
        super().__init__()
        self._changed = False
        self._progress: dict[int, _Progress] = {}

    def put(self, job: BatchEntry) -> None:
        super().put(job)
        size = len(job.distinct)
        self._progress[job.number] = _Progress(
            np.zeros(size, dtype=bool),
            np.zeros(size, dtype=bool),
            job.distinct.indices.null_count == 0,
        )
        self._changed = True

    def answered(self, job: BatchEntry, positions: np.ndarray) -> None:
        """The keys of ``job`` at ``positions`` have their answer."""
        progress = self._progress.get(job.number)
        if progress is not None:
            progress.answered[positions] = True
            self._changed = True

    def answered_but(self, job: BatchEntry, asked: np.ndarray | None, still: np.ndarray) -> None:
        size = len(job.distinct)
        if asked is None:
            if len(still) == size:
                return
            known = np.ones(size, dtype=bool)
        else:
            if len(still) == len(asked):
                return
            known = np.zeros(size, dtype=bool)
            known[asked] = True
        known[still] = False
        self.answered(job, np.flatnonzero(known))

    def request_done(self, targets: Targets) -> None:
        for job, positions in targets():
            self.answered(job, positions)

    def complete(self, job: BatchEntry, build_output: Callable[[BatchEntry], bool]) -> None:
        if job.number in self._progress:  # (not once all its rows have left)
            self._mark_done(job)  # its rows leave (and are built) as their keys are answered
        self._changed = True

    def has_ready(self) -> bool:
        return self._changed

    def pop_ready(self) -> list[Release]:
        self._changed = False
        ready: list[Release] = []
        waiting: list[pa.RecordBatch] = []  # keys that earlier batches still hold
        for job in list(self._entries):
            progress = self._progress[job.number]
            candidates = np.flatnonzero(progress.answered & ~progress.released)
            if waiting and len(candidates):
                keys = key_columns_of(job.distinct.keys).take(pa.array(candidates))
                held = [
                    column.combine_chunks() for column in pa.Table.from_batches(waiting).columns
                ]
                blocked = match_rows(list(keys.columns), held) >= 0
                candidates = candidates[~blocked]
            nulls = not progress.nulls_released
            progress.released[candidates] = True
            progress.nulls_released = True
            left = np.flatnonzero(~progress.released)
            if len(candidates) or nulls:
                ready.append(Release(job, candidates, nulls, last=not len(left)))
            if len(left):  # (its key columns: a range's bounds are no part of a key)
                waiting.append(key_columns_of(job.distinct.keys).take(pa.array(left)))
            else:
                self._leave(job)
                del self._progress[job.number]
        return ready


def output_queue(mode: str) -> OutputQueue:
    """The queue of ``output.mode`` ``mode``."""
    if mode == "key-ordered":
        return KeyOrderedQueue()
    if mode == "unordered":
        return UnorderedQueue()
    return OrderedQueue()
