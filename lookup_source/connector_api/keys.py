"""Keys as Arrow: matching rows of key columns, and keys as Python values.

Vectorised: keys are matched without a Python object per row. Composite keys (several key
columns) are matched by encoding each row's tuple as one integer code.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def python_keys(keys: pa.RecordBatch) -> list[Any]:
    """The keys of a batch of key columns as Python values: scalars for one key column,
    tuples for a composite key."""
    if keys.num_columns == 1:
        return keys.column(0).to_pylist()
    return list(zip(*(column.to_pylist() for column in keys.columns)))


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
            size = int(np.max(codes)) + 1 if len(codes) else 0
        codes = codes * max(width, 1) + more
        size *= max(width, 1)
    codes[null] = -1
    return codes


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
