"""Output queues: in which order input batches leave the engine (``output.mode``).

Flink's ``OrderedStreamElementQueue`` / ``UnorderedStreamElementQueue``, for Arrow batches, and
its key-ordered mode (FLIP-519): the engine puts each input batch in the queue when it arrives,
tells it which of the batch's keys have their answer, and marks it complete when all its lookups
are done; the queue says what may leave now (:meth:`OutputQueue.pop_ready`).

- :class:`OrderedQueue`: whole batches, in arrival order;
- :class:`UnorderedQueue`: whole batches, as they complete;
- :class:`KeyOrderedQueue`: rows, as soon as their key has its answer — the rows of one key in
  arrival order, never held back by the rows of other keys.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from lookup_source.connector_api.keys import match_rows

if TYPE_CHECKING:
    from lookup_source.engine.batches import Job


@dataclass(frozen=True)
class Release:
    """What may leave: a whole batch (``positions`` None), or the rows of some of its keys
    (``positions`` among its distinct keys) and, if ``nulls``, its rows with a null key.
    ``last``: nothing of the batch is left after this."""

    job: Job
    positions: np.ndarray | None = None
    nulls: bool = False
    last: bool = True


class OutputQueue:
    """The interface: ``put`` on arrival, ``answered`` as keys get answers, ``complete`` when
    all are done, ``pop_ready`` to emit."""

    partial = False
    """Whether batches leave in parts (then the engine builds each part's output on release)."""

    def __init__(self) -> None:
        self._entries: deque[Job] = deque()

    def put(self, job: Job) -> None:
        self._entries.append(job)

    def answered(self, job: Job, positions: np.ndarray) -> None:
        """The keys of ``job`` at ``positions`` (among its distinct keys) have their answer."""

    def complete(self, job: Job) -> None:
        """``job`` is done (``job.done`` is already true)."""

    def pop_ready(self) -> list[Release]:
        raise NotImplementedError

    def has_ready(self) -> bool:
        """Whether :meth:`pop_ready` may have something now."""
        raise NotImplementedError

    def __len__(self) -> int:
        return len(self._entries)

    def all_done(self) -> bool:
        return all(job.done for job in self._entries)

    def unfinished(self) -> int:
        return sum(1 for job in self._entries if not job.done)


class OrderedQueue(OutputQueue):
    """Batches leave in arrival order: a finished batch waits for the ones before it."""

    def pop_ready(self) -> list[Release]:
        ready = []
        while self._entries and self._entries[0].done:
            ready.append(Release(self._entries.popleft()))
        return ready

    def has_ready(self) -> bool:
        return bool(self._entries) and self._entries[0].done


class UnorderedQueue(OutputQueue):
    """Batches leave as soon as they are finished, in the order they finished."""

    def __init__(self) -> None:
        super().__init__()
        self._finished: deque[Job] = deque()

    def complete(self, job: Job) -> None:
        self._finished.append(job)

    def pop_ready(self) -> list[Release]:
        ready = list(self._finished)
        self._finished.clear()
        for job in ready:
            self._entries.remove(job)
        return [Release(job) for job in ready]

    def has_ready(self) -> bool:
        return bool(self._finished)


class KeyOrderedQueue(OutputQueue):
    """Rows leave as soon as their key has its answer, in arrival order among those that leave
    together; a row whose key an earlier batch still waits for waits too. So the rows of one key
    keep their order, and a slow key holds back its own rows only."""

    partial = True

    def __init__(self) -> None:
        super().__init__()
        self._changed = False

    def put(self, job: Job) -> None:
        super().put(job)
        size = len(job.distinct)
        job.answered = np.zeros(size, dtype=bool)
        job.released = np.zeros(size, dtype=bool)
        job.nulls_released = job.distinct.indices.null_count == 0
        self._changed = True

    def answered(self, job: Job, positions: np.ndarray) -> None:
        assert job.answered is not None
        job.answered[positions] = True
        self._changed = True

    def has_ready(self) -> bool:
        return self._changed

    def pop_ready(self) -> list[Release]:
        self._changed = False
        ready: list[Release] = []
        waiting: list[pa.RecordBatch] = []  # keys that earlier batches still hold
        for job in list(self._entries):
            assert job.answered is not None and job.released is not None
            candidates = np.flatnonzero(job.answered & ~job.released)
            if waiting and len(candidates):
                keys = job.distinct.keys.take(pa.array(candidates))
                held = pa.Table.from_batches(waiting).combine_chunks()
                blocked = match_rows(list(keys.columns), list(held.columns)) >= 0
                candidates = candidates[~blocked]
            nulls = not job.nulls_released
            job.released[candidates] = True
            job.nulls_released = True
            left = np.flatnonzero(~job.released)
            if len(candidates) or nulls:
                ready.append(Release(job, candidates, nulls, last=not len(left)))
            if len(left):
                waiting.append(job.distinct.keys.take(pa.array(left)))
            else:
                self._entries.remove(job)
        return ready


def output_queue(mode: str) -> OutputQueue:
    """The queue of ``output.mode`` ``mode``."""
    if mode == "key-ordered":
        return KeyOrderedQueue()
    if mode == "unordered":
        return UnorderedQueue()
    return OrderedQueue()
