"""Which keys are being asked right now, so that a later batch shares the request instead of
asking the same key again (a task's keys only: other tasks ask for themselves), and how a
shared request's answer reaches every batch that waits for it (:func:`deliver`).

Matching is vectorised: the keys of a new batch are probed against the keys of every request
in flight in one ``index_in`` (or, for composite keys, one encoding of the rows).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

import numpy as np
import pyarrow as pa

from lookup_source.connector_api.keys import match_rows
from lookup_source.engine.intake.batches import BatchEntry, Request
from lookup_source.engine.request.answers import Answer, Part

R = TypeVar("R", bound=Hashable)


class InFlightKeys(Generic[R]):
    """The key batches of the requests in flight, and a lookup of keys among them."""

    def __init__(self) -> None:
        self._requests: dict[R, Callable[[], pa.RecordBatch]] = {}

    def __len__(self) -> int:
        return len(self._requests)

    def add(self, request: R, keys: Callable[[], pa.RecordBatch]) -> None:
        """A request in flight, with what makes its keys (only asked when a batch is probed)."""
        self._requests[request] = keys

    def discard(self, request: R) -> None:
        self._requests.pop(request, None)

    def share(
        self: InFlightKeys[Request], job: BatchEntry, wanted: np.ndarray
    ) -> tuple[np.ndarray, int]:
        """Subscribe ``job`` to the requests in flight that already ask some of its keys (at
        ``wanted``, positions among its distinct keys); return the positions still to ask and
        how many were shared."""
        if not self._requests or not len(wanted):
            return wanted, 0
        keys = job.distinct.keys
        probe = keys if len(wanted) == keys.num_rows else keys.take(pa.array(wanted))
        shared = self.find(probe)
        if not shared:
            return wanted, 0
        taken = np.zeros(len(wanted), dtype=bool)
        for request, rows, request_rows in shared:
            request.subscribers.append((job, wanted[rows], request_rows))
            job.expect()
            taken[rows] = True
        return wanted[~taken], int(taken.sum())

    def find(self, keys: pa.RecordBatch) -> list[tuple[R, np.ndarray, np.ndarray]]:
        """For the rows of ``keys`` already in flight: ``(request, rows of keys, rows of the
        request)`` per request that holds some of them."""
        if not self._requests or not keys.num_rows:
            return []
        requests = list(self._requests)
        batches = [self._requests[r]() for r in requests]
        sizes = np.array([b.num_rows for b in batches], dtype=np.int64)
        build = [pa.concat_arrays([b.column(i) for b in batches]) for i in range(keys.num_columns)]
        found = match_rows(list(keys.columns), build)
        probe_rows = np.flatnonzero(found >= 0)
        if not len(probe_rows):
            return []
        starts = np.cumsum(sizes) - sizes
        owner = np.searchsorted(starts, found[probe_rows], side="right") - 1
        out = []
        for which in np.unique(owner):
            mine = owner == which
            rows = probe_rows[mine]
            out.append((requests[which], rows, found[rows] - starts[which]))
        return out


def deliver(request: Request, answer: Answer) -> int:
    """Hand ``answer`` (to the request's keys) to the batch that asked and to each batch
    sharing the request, placed at its own key positions; return how many of their keys are
    missing."""
    request.owner.receive(Part(request.positions, answer))
    missing = answer.missing_among()
    for job, positions, request_rows in request.subscribers:
        job.receive(Part(positions, answer.take(request_rows)))
        missing += answer.missing_among(request_rows)
    return missing
