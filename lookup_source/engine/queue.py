"""Output queues: in which order finished input batches leave the engine (``output.mode``).

Flink's ``OrderedStreamElementQueue`` / ``UnorderedStreamElementQueue``, for Arrow batches:
the engine puts each input batch in the queue when it arrives and marks it complete when all its
lookups are done; the queue says which batches may leave now.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, Protocol, TypeVar


class Entry(Protocol):
    done: bool


E = TypeVar("E", bound=Entry)


class OutputQueue(Generic[E]):
    """The interface: ``put`` on arrival, ``complete`` when done, ``pop_ready`` to emit."""

    def __init__(self) -> None:
        self._entries: deque[E] = deque()

    def put(self, entry: E) -> None:
        self._entries.append(entry)

    def complete(self, entry: E) -> None:
        """``entry`` is done (``entry.done`` is already true)."""

    def pop_ready(self) -> list[E]:
        raise NotImplementedError

    def __len__(self) -> int:
        return len(self._entries)

    def all_done(self) -> bool:
        return all(entry.done for entry in self._entries)

    def unfinished(self) -> int:
        return sum(1 for entry in self._entries if not entry.done)


class OrderedQueue(OutputQueue[E]):
    """Batches leave in arrival order: a finished batch waits for the ones before it."""

    def pop_ready(self) -> list[E]:
        ready = []
        while self._entries and self._entries[0].done:
            ready.append(self._entries.popleft())
        return ready


class UnorderedQueue(OutputQueue[E]):
    """Batches leave as soon as they are finished, in the order they finished."""

    def __init__(self) -> None:
        super().__init__()
        self._finished: deque[E] = deque()

    def complete(self, entry: E) -> None:
        self._finished.append(entry)

    def pop_ready(self) -> list[E]:
        ready = list(self._finished)
        self._finished.clear()
        for entry in ready:
            self._entries.remove(entry)
        return ready


def output_queue(ordered: bool) -> OutputQueue[E]:
    return OrderedQueue() if ordered else UnorderedQueue()
