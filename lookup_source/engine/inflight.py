"""Which keys are being asked right now, so that a later batch shares the request instead of
asking the same key again (a task's keys only: other tasks ask for themselves).

Matching is vectorised: the keys of a new batch are probed against the keys of every request
in flight in one ``index_in`` (or, for composite keys, one encoding of the rows).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

import numpy as np
import pyarrow as pa

from lookup_source.connector_api.keys import match_rows

R = TypeVar("R", bound=Hashable)


class InFlightKeys(Generic[R]):
    """The key batches of the requests in flight, and a lookup of keys among them."""

    def __init__(self) -> None:
        self._requests: dict[R, pa.RecordBatch] = {}

    def __len__(self) -> int:
        return len(self._requests)

    def add(self, request: R, keys: pa.RecordBatch) -> None:
        self._requests[request] = keys

    def discard(self, request: R) -> None:
        self._requests.pop(request, None)

    def find(self, keys: pa.RecordBatch) -> list[tuple[R, np.ndarray, np.ndarray]]:
        """For the rows of ``keys`` already in flight: ``(request, rows of keys, rows of the
        request)`` per request that holds some of them."""
        if not self._requests or not keys.num_rows:
            return []
        requests = list(self._requests)
        batches = [self._requests[r] for r in requests]
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
