"""Ranges a lookup may send to its store (:class:`KeyRange`): a point-in-time join's
``visit.ts >= version.valid_from AND visit.ts < version.valid_to``, per asked key.

The engine judges every condition on each pair of a row and a match itself (in Arrow, after
the answer); a range only lets a store that can filter send fewer of a key's rows. It is a
superset of what the engine keeps: for each asked key, the bound is the largest (or smallest)
input value among the rows that ask that key, so a row the condition keeps is never left out.

The ranges travel with the keys: the keys batch a connector's ``lookup_arrow`` receives then
holds, after the key columns, one column per range — the bound of each key — marked by its
field's metadata (:func:`ranges_of`). A connector that takes them says so
(``LookupClient.takes_ranges``); any other never receives such a batch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pyarrow as pa

RANGE_METADATA = b"asynclookup.range"
"""The metadata key of a bound column of a keys batch: JSON ``{"value": ..., "op": ...}``."""

RANGE_OPERATORS = ("lt", "le", "gt", "ge")
"""``value <op> bound``: the store keeps a row of a key whose ``value`` column compares so."""


@dataclass(frozen=True)
class KeyRange:
    """Keep only the rows whose ``value`` column compares ``op`` (``lt``, ``le``, ``gt``,
    ``ge``) with the key's bound, held by the keys batch's column ``column``. A null bound
    (no row asking the key has a value) may be sent as no range: every row of the key is a
    superset too."""

    value: str
    op: str
    column: str

    def field(self, data_type: pa.DataType) -> pa.Field:
        """The keys batch's column of this range's bounds, marked as one."""
        text = json.dumps({"value": self.value, "op": self.op})
        return pa.field(self.column, data_type, metadata={RANGE_METADATA: text.encode()})


def ranges_of(keys: pa.RecordBatch) -> tuple[KeyRange, ...]:
    """The ranges a keys batch carries (its marked columns), in their columns' order."""
    found = []
    for field in keys.schema:
        metadata = field.metadata or {}
        if RANGE_METADATA not in metadata:
            continue
        spec = json.loads(metadata[RANGE_METADATA])
        if spec.get("op") not in RANGE_OPERATORS or not isinstance(spec.get("value"), str):
            raise ValueError(f"a keys batch's range column {field.name!r} is malformed: {spec}")
        found.append(KeyRange(spec["value"], spec["op"], field.name))
    return tuple(found)


def key_columns_of(keys: pa.RecordBatch) -> pa.RecordBatch:
    """``keys`` without its range columns (the key columns alone)."""
    kept = [i for i, f in enumerate(keys.schema) if RANGE_METADATA not in (f.metadata or {})]
    if len(kept) == keys.num_columns:
        return keys
    return keys.select(kept)


__all__ = ["RANGE_METADATA", "RANGE_OPERATORS", "KeyRange", "key_columns_of", "ranges_of"]
