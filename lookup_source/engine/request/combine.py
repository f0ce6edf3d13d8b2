""":class:`~lookup_source.connector_api.Matches` put together: concatenated
(:func:`concat_matches`), some of their rows taken (:func:`rows_of`), their error messages
naming their keys (:func:`keyed_messages`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa

from lookup_source.connector_api import Key, Matches

KeySource = Callable[[], Sequence[Key]]
"""The asked keys as Python values, made when first needed (a message names its key)."""


def concat_matches(parts: Sequence[Matches], fields: Sequence[pa.Field]) -> Matches:
    """All ``parts`` (each already conformed to ``fields``) as one :class:`Matches`."""
    parts = [part for part in parts if part.num_rows]
    if not parts:
        return Matches.none(fields)
    if len(parts) == 1:
        return parts[0]
    schema = pa.schema(list(fields))
    values = pa.Table.from_batches([p.values for p in parts], schema=schema).combine_chunks()
    batch = values.to_batches()[0] if values.num_rows else parts[0].values.slice(0, 0)
    errors = None
    if any(p.errors is not None for p in parts):
        errors = pa.concat_arrays(
            [p.errors if p.errors is not None else pa.nulls(p.num_rows, pa.string()) for p in parts]
        )
    return Matches(np.concatenate([p.key_index for p in parts]), batch, errors)


def keyed_messages(matches: Matches, keys: KeySource) -> Matches:
    """``matches`` with each error message prefixed by the key it concerns: ``key 7: ...``
    (``keys()``: the asked keys, which ``key_index`` points into)."""
    errors = matches.errors
    if errors is None or errors.null_count == len(errors):
        return matches
    everything = keys()
    index = matches.key_index
    messages = [
        None if text is None else f"key {everything[index[row]]!r}: {text}"
        for row, text in enumerate(errors.to_pylist())
    ]
    return Matches(index, matches.values, pa.array(messages, type=pa.string()))


def rows_of(matches: Matches, rows: np.ndarray, key_index: np.ndarray | None = None) -> Matches:
    """The rows ``rows`` of ``matches`` (with ``key_index``'s entries, if given, as their keys)."""
    index = pa.array(rows, type=pa.int64())
    errors = matches.errors.take(index) if matches.errors is not None else None
    keys = (key_index if key_index is not None else matches.key_index)[rows]
    return Matches(keys, matches.values.take(index), errors)


__all__ = ["KeySource", "concat_matches", "keyed_messages", "rows_of"]
