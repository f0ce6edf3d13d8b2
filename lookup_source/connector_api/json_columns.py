"""JSON documents to typed Arrow columns, decoded in native code (msgspec).

A :class:`JsonColumns` decoder is built once per lookup schema: a msgspec ``Struct`` whose
fields are the value columns, typed so that msgspec itself checks what arrives (an integer
column takes JSON integers, a string column JSON strings...). Decoding a request's documents
then costs one msgspec call per document and one Arrow conversion per column, with no dict
per record.

msgspec is strict: anything the typed decode does not accept (a number where a string is
declared, ``1.0`` for an integer, NaN, a document that is not an object...) raises, and the
caller converts that request with the per-value reference path
(:func:`lookup_source.arrow_values.to_arrow_column`), which gives the same values and names
what does not fit. The fast path never produces a value the reference path would not.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa

from lookup_source.connector_api.values import cast_strings, to_arrow_column

DECODE_ERRORS = (
    msgspec.DecodeError,
    msgspec.ValidationError,
    pa.ArrowException,
    ValueError,
    OverflowError,
    RecursionError,  # nested deeper than the decoders go
)
"""What :meth:`JsonColumns.decode` may raise for documents the fast path does not take."""


def _is_text(arrow_type: pa.DataType) -> bool:
    return pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)


def _is_bytes(arrow_type: pa.DataType) -> bool:
    return pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type)


def _parsed_from_text(arrow_type: pa.DataType) -> bool:
    return (
        pa.types.is_timestamp(arrow_type)
        or pa.types.is_date(arrow_type)
        or pa.types.is_time(arrow_type)
    )


def _python_type(arrow_type: pa.DataType) -> Any:
    """The msgspec type that accepts exactly the JSON values the column takes as they are."""
    if pa.types.is_boolean(arrow_type):
        return bool | None
    if pa.types.is_integer(arrow_type):
        return int | None
    if pa.types.is_floating(arrow_type):
        # integers stay integers: Arrow then refuses one a float cannot hold exactly (as the
        # reference does) instead of rounding it
        return int | float | None
    if _is_text(arrow_type) or _is_bytes(arrow_type) or _parsed_from_text(arrow_type):
        return str | None
    return Any  # nested and decimal columns: the reference conversion, value by value


def _column(values: list[Any], field: pa.Field) -> pa.Array:
    """One column from the values msgspec checked; raises where the reference would report."""
    arrow_type = field.type
    if _parsed_from_text(arrow_type):
        return cast_strings(pa.array(values, type=pa.string()), arrow_type)
    if _python_type(arrow_type) is Any:
        array, errors = to_arrow_column(values, arrow_type, column=field.name)
        if errors:
            raise ValueError(errors[min(errors)])
        return array
    return pa.array(values, type=arrow_type)  # ints out of range raise: the reference reports


class JsonColumns:
    """Decodes JSON objects (one per document) into the value columns ``fields``.

    >>> decoder = JsonColumns([pa.field("name", pa.string()), pa.field("tier", pa.int32())])
    >>> decoder.decode([b'{"name": "Ada", "tier": 2, "x": 0}', b'{"tier": 1}']).to_pylist()
    [{'name': 'Ada', 'tier': 2}, {'name': None, 'tier': 1}]
    """

    def __init__(self, fields: Sequence[pa.Field], *, extra: Sequence[str] = ()) -> None:
        self.fields = list(fields)
        self.schema = pa.schema(self.fields)
        attributes = [f"f{i}" for i in range(len(self.fields))]
        others = [f"x{i}" for i in range(len(extra))]  # taken as they come, e.g. key columns
        self.record_type: Any = msgspec.defstruct(
            "Record",
            [(a, _python_type(f.type), None) for a, f in zip(attributes, self.fields)]
            + [(a, Any, None) for a in others],
            rename=dict(zip(attributes + others, [f.name for f in self.fields] + list(extra))),
        )
        self._decode: Callable[[bytes], Any] = msgspec.json.Decoder(self.record_type).decode
        self._decode_many: Callable[[bytes], Any] = msgspec.json.Decoder(
            self.record_type | list[self.record_type]  # type: ignore[name-defined]
        ).decode
        self._getters = [operator.attrgetter(a) for a in attributes]
        self.extra_getters = [operator.attrgetter(a) for a in others]
        """Read the ``extra`` fields of a decoded record, in the order given."""

    def decode(self, documents: Sequence[bytes]) -> pa.RecordBatch:
        """The columns of ``documents`` (each one JSON object); raises one of
        :data:`DECODE_ERRORS` if any document is not taken as it is."""
        return self.columns([self._decode(document) for document in documents])

    def decode_matches(self, documents: Sequence[bytes]) -> tuple[np.ndarray, pa.RecordBatch]:
        """Documents that are each an object or an array of objects (one per match): the
        position of its document for each record, and the records' columns. Raises one of
        :data:`DECODE_ERRORS` as :meth:`decode` does."""
        index: list[int] = []
        records: list[Any] = []
        for position, document in enumerate(documents):
            value = self._decode_many(document)
            if isinstance(value, list):
                records += value
                index += [position] * len(value)
            else:
                records.append(value)
                index.append(position)
        return np.asarray(index, dtype=np.int64), self.columns(records)

    def columns(self, records: Sequence[Any]) -> pa.RecordBatch:
        """The columns of records decoded as :attr:`record_type`."""
        arrays = [
            _column(list(map(getter, records)), field)
            for getter, field in zip(self._getters, self.fields)
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)
