"""What a cache keeps of a columnar answer: per key, its rows in a compact Arrow batch
(:class:`CachedRows`), :data:`MISSING` for a key the store does not have, or the error of a
malformed value (:class:`CachedError`); :func:`cache_rows` cuts an answer into them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from lookup_source.connector_api import Key, Matches

MISSING: Any = object()
"""Cached marker of a key the store does not have."""


@dataclass(frozen=True, eq=False)
class CachedRows:
    """A cached key's matches: rows ``start`` to ``start + count`` of an Arrow batch of value
    columns (a compact copy of the rows its answer held for cached keys, never an error)."""

    values: pa.RecordBatch
    start: int
    count: int


@dataclass(frozen=True)
class CachedError:
    """A key whose stored value is malformed (full cache): reported each time it is asked."""

    message: str


def cache_rows(
    keys: Sequence[Key], answer: Matches, found: np.ndarray, *, cache_missing: bool
) -> list[tuple[Key, Any]]:
    """What to cache from a columnar answer to ``keys``: a :class:`CachedRows` per key that
    has matches, :data:`MISSING` per key without (if ``cache_missing``); keys whose value was
    malformed are not cached."""
    index = answer.key_index
    usable = np.ones(len(index), dtype=bool)
    if answer.errors is not None and answer.errors.null_count < len(answer.errors):
        bad = answer.errors.is_valid().to_numpy(zero_copy_only=False)
        usable &= ~np.isin(index, index[bad])
    rows = np.flatnonzero(usable)
    rows = rows[np.argsort(index[rows], kind="stable")]
    items: list[tuple[Key, Any]] = []
    if len(rows):
        segment = answer.values.take(pa.array(rows))
        positions, starts, counts = np.unique(index[rows], return_index=True, return_counts=True)
        items = [
            (keys[p], CachedRows(segment, int(a), int(n)))
            for p, a, n in zip(positions.tolist(), starts.tolist(), counts.tolist())
        ]
    if cache_missing:
        items += [(keys[p], MISSING) for p in np.flatnonzero(~found).tolist()]
    return items


__all__ = ["MISSING", "CachedError", "CachedRows", "cache_rows"]
