"""Timestamps as the table function hands them back: in UTC (:func:`in_utc`).

Spark sends a table function's input in Arrow with its ``timestamp`` columns in the session's
time zone (``Etc/UTC``, ``Europe/Paris``: an instant, printed there) and expects its output's
in ``UTC``, as it declares them. A column carried from the input to the output keeps the
session's zone; PySpark 4.3 then writes a batch whose schema is not the one it wrote first
(``Tried to write record batch with different schema``: a point-in-time JOIN failed on a
machine whose zone is named ``Etc/UTC``). Changing the zone changes no value: an instant is
the same number of microseconds since the epoch in any zone.
"""

from __future__ import annotations

import functools

import pyarrow as pa

UTC = "UTC"


def in_utc(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with every timestamp that has a time zone (nested ones too) in ``UTC``; the
    batch itself when it has none in another zone (the common case: no copy)."""
    wanted = _utc_schema(batch.schema)
    if wanted is batch.schema:
        return batch
    columns = [
        column if column.type == field.type else column.cast(field.type)
        for column, field in zip(batch.columns, wanted)
    ]
    return pa.RecordBatch.from_arrays(columns, schema=wanted)


@functools.lru_cache(maxsize=64)
def _utc_schema(schema: pa.Schema) -> pa.Schema:
    fields = [field.with_type(_utc_type(field.type)) for field in schema]
    if all(new.type == old.type for new, old in zip(fields, schema)):
        return schema
    return pa.schema(fields, metadata=schema.metadata)


def _utc_type(data_type: pa.DataType) -> pa.DataType:
    if pa.types.is_timestamp(data_type):
        if data_type.tz is None or data_type.tz == UTC:
            return data_type
        return pa.timestamp(data_type.unit, UTC)
    if pa.types.is_struct(data_type):
        return pa.struct([f.with_type(_utc_type(f.type)) for f in data_type])
    if pa.types.is_map(data_type):
        return pa.map_(
            data_type.key_field.with_type(_utc_type(data_type.key_type)),
            data_type.item_field.with_type(_utc_type(data_type.item_type)),
            keys_sorted=data_type.keys_sorted,
        )
    if pa.types.is_list(data_type):
        return pa.list_(data_type.value_field.with_type(_utc_type(data_type.value_type)))
    if pa.types.is_large_list(data_type):
        return pa.large_list(data_type.value_field.with_type(_utc_type(data_type.value_type)))
    return data_type


__all__ = ["in_utc"]
