"""The columnar answer of a lookup: :class:`Matches`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa


def value_batch(
    arrays: Sequence[pa.Array], fields: Sequence[pa.Field], rows: int
) -> pa.RecordBatch:
    """The value columns ``arrays`` (of ``fields``) as a record batch of ``rows`` rows; with no
    value column, a batch of ``rows`` rows and no column (the answer of a lookup that only asks
    whether its keys exist: a semi or anti join's)."""
    if not fields:
        return pa.RecordBatch.from_struct_array(pa.nulls(rows, pa.struct([])))
    return pa.RecordBatch.from_arrays(list(arrays), schema=pa.schema(list(fields)))


@dataclass(frozen=True, eq=False)
class Matches:
    """The columnar answer to a lookup: one row per match, as Arrow.

    - ``key_index``: for each row, the position (0-based) in the requested keys of the key it
      matches. A key that no row names is missing; a key that several rows name has several
      matches (a one-to-many lookup), kept in the order of the rows.
    - ``values``: the value columns, one row per match, found by name (a value column that is
      absent is null; a column of another type is converted, and a value that does not fit is
      reported for its key).
    - ``errors``: optional, one string per row: why that key's stored value is unusable (null
      where it is fine). A key with an error row fails, whatever its other rows hold.
    - ``keys``: optional, one row per match: the match's own key as the store holds it, in the
      key columns' types. A store whose ``=`` is looser than Spark's (a case-insensitive
      collation, ``citext``, ``char(n)``'s padding) may answer ``'eu'`` with the row of
      ``'EU'``; with ``keys``, a lookup that compares keys as Spark does
      (``key.equality=spark``, what a SQL JOIN runs with) keeps only the matches whose key
      equals the asked one.
    - ``unfit``: optional, ``{position: why}``: asked keys that the store's key type cannot
      hold (an integer beyond the column's range, a text with a NUL, one too long), so that no
      row can have them. They have no rows here; ``on.unfit-key`` decides whether such a key
      is a miss (what Spark's own join finds for it) or a failed lookup saying why.

    >>> import pyarrow as pa
    >>> m = Matches([0, 2], pa.record_batch({"name": ["Ada", "Bob"]}))  # keys 0 and 2 found
    >>> m.num_rows
    2
    """

    key_index: Any
    values: pa.RecordBatch
    errors: pa.Array | None = None
    keys: pa.RecordBatch | None = None
    unfit: Mapping[int, str] | None = None

    def __post_init__(self) -> None:
        index = self.key_index
        if isinstance(index, (pa.Array, pa.ChunkedArray)):
            index = index.to_numpy(zero_copy_only=False)
        index = np.asarray(index, dtype=np.int64)
        if index.ndim != 1 or len(index) != self.values.num_rows:
            raise ValueError(
                f"Matches: key_index has {len(index)} entries for {self.values.num_rows} rows"
            )
        if self.errors is not None and len(self.errors) != len(index):
            raise ValueError(
                f"Matches: errors has {len(self.errors)} entries for {len(index)} rows"
            )
        if self.keys is not None and self.keys.num_rows != len(index):
            raise ValueError(f"Matches: keys has {self.keys.num_rows} rows for {len(index)} rows")
        object.__setattr__(self, "key_index", index)

    @property
    def num_rows(self) -> int:
        return len(self.key_index)

    @classmethod
    def none(cls, fields: Sequence[pa.Field] = ()) -> Matches:
        """No match at all: every key is missing."""
        empty = pa.RecordBatch.from_pylist([], schema=pa.schema(list(fields)))
        return cls(np.zeros(0, dtype=np.int64), empty)

    @classmethod
    def concat(cls, parts: Sequence[Matches], fields: Sequence[pa.Field]) -> Matches:
        """All ``parts`` (each already conformed to ``fields``) as one :class:`Matches`, their
        rows in order."""
        unfit = {k: v for part in parts for k, v in (part.unfit or {}).items()} or None
        parts = [part for part in parts if part.num_rows]
        if not parts:
            return cls(np.zeros(0, dtype=np.int64), cls.none(fields).values, unfit=unfit)
        if len(parts) == 1:
            part = parts[0]
            return part if part.unfit == unfit else dataclasses.replace(part, unfit=unfit)
        schema = pa.schema(list(fields))
        values = pa.Table.from_batches([p.values for p in parts], schema=schema).combine_chunks()
        batch = values.to_batches()[0] if values.num_rows else parts[0].values.slice(0, 0)
        errors = None
        if any(p.errors is not None for p in parts):
            errors = pa.concat_arrays(
                [
                    p.errors if p.errors is not None else pa.nulls(p.num_rows, pa.string())
                    for p in parts
                ]
            )
        keys = None
        if all(p.keys is not None for p in parts):
            keys = pa.Table.from_batches([p.keys for p in parts]).combine_chunks().to_batches()[0]
        index = np.concatenate([p.key_index for p in parts])
        return cls(index, batch, errors, keys, unfit)

    def rows(self, rows: np.ndarray, key_index: np.ndarray | None = None) -> Matches:
        """The rows ``rows`` of these matches (with ``key_index``'s entries, if given, as their
        keys)."""
        index = pa.array(rows, type=pa.int64())
        errors = self.errors.take(index) if self.errors is not None else None
        positions = (key_index if key_index is not None else self.key_index)[rows]
        keys = self.keys.take(index) if self.keys is not None else None
        return Matches(positions, self.values.take(index), errors, keys)

    @classmethod
    def failed(
        cls,
        positions: Sequence[int] | np.ndarray,
        messages: Sequence[str],
        fields: Sequence[pa.Field],
    ) -> Matches:
        """One error row (null values) for each key at ``positions``, saying why."""
        nulls = value_batch(
            [pa.nulls(len(messages), type=f.type) for f in fields], fields, len(messages)
        )
        index = np.asarray(positions, dtype=np.int64)
        return cls(index, nulls, pa.array(list(messages), type=pa.string()))
