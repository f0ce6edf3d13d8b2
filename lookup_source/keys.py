"""Keys as Arrow: the distinct keys of a batch, and where each row's key sits among them.

Everything here is vectorised: a batch of 10,000 rows is reduced to its distinct keys, and keys
are matched against other keys, without a Python object per row. Composite keys (several key
columns) are handled by encoding each row's tuple as one integer code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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


def python_keys(keys: pa.RecordBatch) -> list[Any]:
    """The keys of a batch of key columns as Python values: scalars for one key column,
    tuples for a composite key."""
    if keys.num_columns == 1:
        return keys.column(0).to_pylist()
    return list(zip(*(column.to_pylist() for column in keys.columns)))


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


def _codes(array: pa.Array) -> tuple[np.ndarray, int]:
    """Dense integer codes of an array's values (nulls get -1) and how many distinct values."""
    encoded = array.dictionary_encode()
    codes = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    return codes, len(encoded.dictionary)


def encode_rows(columns: Sequence[pa.Array]) -> np.ndarray:
    """One int64 code per row such that two rows get the same code exactly when all their key
    columns are equal; -1 for a row with a null in any column."""
    codes, size = _codes(columns[0])
    null = codes < 0
    for column in columns[1:]:
        more, width = _codes(column)
        null |= more < 0
        if size * max(width, 1) >= 2**62:  # keep the combined code inside int64: densify
            _, codes = np.unique(codes, return_inverse=True)
            size = int(codes.max()) + 1 if len(codes) else 0
        codes = codes * max(width, 1) + more
        size *= max(width, 1)
    codes[null] = -1
    return codes


def distinct_keys(columns: Sequence[pa.Array], names: Sequence[str]) -> DistinctKeys:
    """Distinct keys of one (scalar keys) or several (composite keys) key columns."""
    columns = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in columns]
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


def match_rows(probe: Sequence[pa.Array], build: Sequence[pa.Array]) -> np.ndarray:
    """For each row of ``probe``, the index of the first equal row of ``build``, or -1.

    Both are lists of key columns of the same types; a null part never matches.
    """
    if not len(probe[0]):
        return np.zeros(0, dtype=np.int64)
    if not len(build[0]):
        return np.full(len(probe[0]), -1, dtype=np.int64)
    if len(probe) == 1:
        found = pc.index_in(probe[0], value_set=build[0])
        return found.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    codes = encode_rows([pa.concat_arrays([p, b]) for p, b in zip(probe, build)])
    probe_codes, build_codes = codes[: len(probe[0])], codes[len(probe[0]) :]
    distinct, first = np.unique(build_codes, return_index=True)
    slot = np.minimum(np.searchsorted(distinct, probe_codes), len(distinct) - 1)
    hit = (distinct[slot] == probe_codes) & (probe_codes >= 0)
    return np.where(hit, first[slot], -1).astype(np.int64)


def convert_keys(
    keys: Sequence[Any], key_types: Sequence[pa.DataType | None], key_columns: Sequence[str]
) -> tuple[list[Any], dict[int, str]]:
    """Keys (scalars, or tuples for composite keys) as the key columns' types: text from a scan
    or JSON numbers become the declared type. Returns the converted keys, position by position,
    and ``{position: why}`` for those that do not convert (their converted value is None)."""
    from lookup_source.arrow_values import typed_columns

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
