"""Ranges sent to the store with each key (:class:`PushedRange`): of the conditions on each pair
of a row and a match (:mod:`..output.match_conditions`), those comparing a value column with an
input column — a validity range — become, per distinct key of a batch, a bound the store
may filter by: ``version.valid_from <= max(visit.ts)`` and ``version.valid_to > min(visit.ts)``
over the rows that ask the key. A superset of what the conditions keep (they are still judged
on every pair after the answer); the answer to a key then depends on its batch, so the engine
neither shares such a request with another batch nor keeps its answer in a cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from lookup_source.connector_api.ranges import KeyRange
from lookup_source.engine.intake.keys import DistinctKeys
from lookup_source.engine.output.match_conditions import MatchCondition

BOUND_PREFIX = "__asynclookup_range_"
"""The names of the keys batch's bound columns."""

_SENT = {
    "lt": (("lt", "max"),),
    "le": (("le", "max"),),
    "gt": (("gt", "min"),),
    "ge": (("ge", "min"),),
    "eq": (("ge", "min"), ("le", "max")),
}
"""``value <op> input``: the ranges sent (the store's op, the key's extreme) — some row keeps
a match only if the comparison holds against the extreme of the key's rows."""
_FLIPPED = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}


def _pushable(data_type: pa.DataType) -> bool:
    """Types whose order is the same in Spark and in a store (integers, dates, instants)."""
    return (
        pa.types.is_integer(data_type)
        or pa.types.is_date(data_type)
        or (pa.types.is_timestamp(data_type) and data_type.tz is not None)
    )


@dataclass(frozen=True)
class PushedRange:
    """A :class:`KeyRange` and how each key's bound is made: the largest (``max``) or the
    smallest (``min``) value of the ``input`` column among the rows asking the key."""

    range: KeyRange
    input: str
    bound: str


def pushed_ranges(
    conditions: Sequence[MatchCondition], input_schema: pa.Schema
) -> tuple[PushedRange, ...]:
    """The ranges ``conditions`` allow sending: each comparing a value column with an input
    column of a type ordered alike everywhere (``eq`` gives two, ``ne`` none)."""
    pushed: list[PushedRange] = []
    for condition in conditions:
        sides = (condition.left.kind, condition.right.kind)
        if sides == ("value", "input"):
            value, column, op = condition.left.name, condition.right.name, condition.op
        elif sides == ("input", "value"):
            value, column, op = condition.right.name, condition.left.name, _FLIPPED[condition.op]
        else:
            continue
        if column not in input_schema.names or not _pushable(input_schema.field(column).type):
            continue
        for store_op, bound in _SENT.get(op, ()):
            name = f"{BOUND_PREFIX}{len(pushed)}"
            pushed.append(PushedRange(KeyRange(value, store_op, name), column, bound))
    return tuple(pushed)


def with_bounds(
    distinct: DistinctKeys, batch: pa.RecordBatch, pushed: Sequence[PushedRange]
) -> DistinctKeys:
    """``distinct`` whose keys batch carries, after its key columns, each range's bound of
    every distinct key (over the batch's rows asking it; null where none has a value)."""
    if not pushed or not len(distinct):
        return distinct
    keyed = distinct.indices.is_valid().to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(keyed)
    groups = pa.array(distinct.indices.to_numpy(zero_copy_only=False)[rows].astype(np.int64))
    fields = list(distinct.keys.schema)
    columns = list(distinct.keys.columns)
    for push in pushed:
        array = batch.column(push.input)
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        values = array.take(pa.array(rows))
        table = pa.table({"key": groups, "value": values})
        grouped = table.group_by("key").aggregate([("value", push.bound)])
        positions = grouped.column("key").to_numpy()
        extremes = grouped.column(f"value_{push.bound}").combine_chunks().cast(array.type)
        order = np.full(len(distinct), -1, dtype=np.int64)  # each key's group, or none
        order[positions] = np.arange(len(positions))
        bounds = extremes.take(pa.array(order, mask=order < 0))
        fields.append(push.range.field(array.type))
        columns.append(bounds)
    keys = pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields))
    return DistinctKeys(keys, distinct.indices)


__all__ = ["BOUND_PREFIX", "PushedRange", "pushed_ranges", "with_bounds"]
