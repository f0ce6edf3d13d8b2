"""The distinct keys of an input batch, and where each row's key sits among them.

Vectorised: a batch of 10,000 rows is reduced to its distinct keys without a Python object per
row; composite keys are encoded as one integer code per row
(:func:`lookup_source.connector_api.keys.encode_rows`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from lookup_source.connector_api.keys import encode_rows
from lookup_source.errors import SchemaError


@dataclass(frozen=True)
class DistinctKeys:
    """The distinct non-null keys of a batch and, per row, the index of its key.

    ``keys`` holds one column per key column, one row per distinct key. ``indices[i]`` is null
    when row ``i`` has a null key (or any null part of a composite key): such a key is never
    sent to the store.
    """

    keys: pa.RecordBatch
    indices: pa.Array

    def __len__(self) -> int:
        return self.keys.num_rows


def cast_key_column(array: pa.Array, arrow_type: pa.DataType | None, column: str) -> pa.Array:
    """Cast a key column to the type the lookup schema declares, or fail naming the column."""
    if arrow_type is None or array.type == arrow_type:
        return array
    try:
        return array.cast(arrow_type, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise SchemaError(
            f"key column '{column}' holds {array.type} values that do not convert to the "
            f"lookup schema's {arrow_type}: {exc}",
            column=column,
        ) from None


def distinct_keys(columns: Sequence[pa.Array], names: Sequence[str]) -> DistinctKeys:
    """Distinct keys of one (scalar keys) or several (composite keys) key columns."""
    columns = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in columns]
    if len(columns) == 1 and pa.types.is_null(columns[0].type):
        # a column of the null type (no declared key type to cast it to): no key at all
        # (its dictionary would be [None], a key never to be sent)
        keys = pa.RecordBatch.from_arrays([pa.nulls(0)], names=list(names))
        return DistinctKeys(keys, pa.nulls(len(columns[0]), type=pa.int32()))
    if len(columns) == 1:
        encoded = columns[0].dictionary_encode()
        indices = encoded.indices
        if indices.type != pa.int32():
            indices = indices.cast(pa.int32())
        keys = pa.RecordBatch.from_arrays([encoded.dictionary], names=list(names))
        return DistinctKeys(keys, indices)
    codes = encode_rows(columns)
    valid = codes >= 0
    _, first, inverse = np.unique(codes[valid], return_index=True, return_inverse=True)
    rows = np.flatnonzero(valid)[first]
    keys = pa.RecordBatch.from_arrays([c.take(pa.array(rows)) for c in columns], names=list(names))
    positions = np.full(len(codes), -1, dtype=np.int32)
    positions[valid] = inverse.astype(np.int32)
    return DistinctKeys(keys, pa.array(positions, mask=~valid, type=pa.int32()))


def convert_keys(
    keys: Sequence[Any], key_types: Sequence[pa.DataType | None], key_columns: Sequence[str]
) -> tuple[list[Any], dict[int, str]]:
    """Keys (scalars, or tuples for composite keys) as the key columns' types: text from a scan
    or JSON numbers become the declared type. Returns the converted keys, position by position,
    and ``{position: why}`` for those that do not convert (their converted value is None)."""
    from lookup_source.connector_api.values import typed_columns

    errors: dict[int, str] = {}
    columns = [
        [k[index] if isinstance(k, tuple) else k for k in keys] for index in range(len(key_columns))
    ]
    typed = typed_columns(
        [
            (pa.field(column, arrow_type), values)
            for column, arrow_type, values in zip(key_columns, key_types, columns)
            if arrow_type is not None
        ],
        keys,
        errors,
    )
    converted = iter(array.to_pylist() for array in typed)
    lists = [
        values if arrow_type is None else next(converted)
        for arrow_type, values in zip(key_types, columns)
    ]
    out = lists[0] if len(lists) == 1 else list(zip(*lists))
    return [None if position in errors else key for position, key in enumerate(out)], errors
