"""The columnar answer of a lookup: :class:`Matches`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa


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

    >>> import pyarrow as pa
    >>> m = Matches([0, 2], pa.record_batch({"name": ["Ada", "Bob"]}))  # keys 0 and 2 found
    >>> m.num_rows
    2
    """

    key_index: Any
    values: pa.RecordBatch
    errors: pa.Array | None = None

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
        object.__setattr__(self, "key_index", index)

    @property
    def num_rows(self) -> int:
        return len(self.key_index)

    @classmethod
    def none(cls, fields: Sequence[pa.Field] = ()) -> Matches:
        """No match at all: every key is missing."""
        empty = pa.RecordBatch.from_pylist([], schema=pa.schema(list(fields)))
        return cls(np.zeros(0, dtype=np.int64), empty)
