"""The table function's answer in the schema Spark declared for it (:class:`DeclaredOutput`).

PySpark 4.3 writes a table function's Arrow answer with one IPC writer per task, whose schema
is the first batch written. Each batch is first matched against the declared schema
(``to_arrow_type`` of the output's ``StructType``: timestamps in UTC, strings ``large_string``
under ``spark.sql.execution.arrow.useLargeVarTypes``, each field's nullability): a batch that
matches goes as it is, any other is cast and rebuilt with every field nullable; and a call of
``eval`` or ``terminate`` that hands back nothing writes an empty batch of the declared schema.
So a task whose first call answered nothing (the engine was still asking the store) and whose
next batch differed at all — an input timestamp carried in the session's zone (``Etc/UTC``,
``Europe/Paris``), a ``string`` where Spark wanted ``large_string`` — failed: "Tried to write
record batch with different schema".

Every batch the table function hands back is therefore cast to the declared schema, and a call
with nothing to hand back hands back an empty batch of it: every batch a task writes has one
schema, whichever PySpark reads it. The declared schema is the one PySpark computes, with
large types when Spark sent the input with them (its strings or binaries ``large_*``); when the
input has neither, normal ones — were that the wrong guess, every batch would still be
rebuilt alike, and none is PySpark's own empty one.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa
from pyspark.sql.types import StructType

_LARGE = (pa.types.is_large_string, pa.types.is_large_binary)
_NORMAL = (pa.types.is_string, pa.types.is_binary)


class DeclaredOutput:
    """The declared schema of a table function's answer, as PySpark converts it, and each
    batch of the answer cast to it (see the module)."""

    def __init__(self, declared: StructType | None) -> None:
        self._declared = declared
        self._schema: pa.Schema | None = None
        self._known = declared is None  # no declared schema: the batches go as they are

    def schema(self, input_schema: pa.Schema) -> pa.Schema | None:
        """The declared schema in Arrow, large types as the input (``input_schema``) has them
        (worked out on the first call, the same after); None when PySpark cannot convert it
        here (the batches then go as they are, for PySpark to judge)."""
        if not self._known:
            self._known = True
            try:
                assert self._declared is not None
                self._schema = _arrow_schema(self._declared, _large_types(input_schema))
            except Exception:
                self._schema = None
        return self._schema

    def conform(
        self, batches: Iterable[pa.RecordBatch], input_schema: pa.Schema
    ) -> Iterator[pa.RecordBatch]:
        """``batches`` cast to the declared schema, or one empty batch of it when there are
        none."""
        schema = self.schema(input_schema)
        if schema is None:
            yield from batches
            return
        handed = False
        for batch in batches:
            handed = True
            yield _cast(batch, schema)
        if not handed:
            yield _empty(schema)


def _empty(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in schema], schema=schema)


def _cast(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` in ``schema`` (the same columns, by position; a batch whose columns are not
    the declared ones goes as it is, for PySpark to judge)."""
    if batch.schema.equals(schema, check_metadata=False):
        return batch
    if batch.num_columns != len(schema) or batch.schema.names != schema.names:
        return batch
    columns = [
        column if column.type == field.type else column.cast(field.type)
        for column, field in zip(batch.columns, schema)
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _large_types(schema: pa.Schema) -> bool:
    """Whether Spark sent ``schema``'s strings and binaries as ``large_*`` (the first one it
    has says; none: no)."""
    for field in schema:
        for kind in _walk(field.type):
            if any(test(kind) for test in _LARGE):
                return True
            if any(test(kind) for test in _NORMAL):
                return False
    return False


def _walk(data_type: pa.DataType) -> Iterator[pa.DataType]:
    yield data_type
    for index in range(data_type.num_fields):
        yield from _walk(data_type.field(index).type)


def _arrow_schema(declared: StructType, large: bool) -> pa.Schema:
    """``declared`` as PySpark converts a table function's return type: timestamps in UTC
    (PySpark 4.2+ spells it ``timezone``, 4.0 and 4.1 ``timestamp_utc``)."""
    from pyspark.sql.pandas.types import to_arrow_type

    for zone in ({"timezone": "UTC"}, {"timestamp_utc": True}):
        try:
            struct = to_arrow_type(declared, prefers_large_types=large, **zone)
        except TypeError:
            continue
        return pa.schema(list(struct))
    struct = to_arrow_type(declared)
    return pa.schema(list(struct))


__all__ = ["DeclaredOutput"]
