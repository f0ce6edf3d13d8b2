"""Turn looked-up Python values into Arrow columns of the declared types, and keys into Arrow.

Conversion is vectorised when the values already have the right Python types (the common
case) and falls back to one value at a time only to pin down which values do not fit: those
come back as per-position error messages, never as silently dropped values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lookup_source.connector_api.keys import match_rows
from lookup_source.connector_api.matches import Matches, value_batch
from lookup_source.errors import RecordError
from lookup_source.redaction import redact_text

_CONVERSION_ERRORS = (
    pa.ArrowInvalid,
    pa.ArrowTypeError,
    pa.ArrowNotImplementedError,
    TypeError,
    ValueError,
    OverflowError,
)


def describe_type(arrow_type: pa.DataType) -> str:
    """A short Spark-like name for messages: ``int``, ``bigint``, ``string``..."""
    names = {
        pa.int8(): "tinyint",
        pa.int16(): "smallint",
        pa.int32(): "int",
        pa.int64(): "bigint",
        pa.float32(): "float",
        pa.float64(): "double",
        pa.string(): "string",
        pa.large_string(): "string",
        pa.bool_(): "boolean",
        pa.binary(): "binary",
        pa.date32(): "date",
    }
    return names.get(arrow_type, str(arrow_type))


def _excerpt(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_textual(arrow_type: pa.DataType) -> bool:
    return pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)


def _convert_one(value: Any, arrow_type: pa.DataType) -> Any:
    """Convert one value or raise; returns something ``pa.array(..., type)`` accepts."""
    if isinstance(value, str) and not _is_textual(arrow_type):
        if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
            return value.encode("utf-8")
        return cast_strings(pa.array([value], pa.string()), arrow_type)[0].as_py()
    if isinstance(value, bytes) and _is_textual(arrow_type):
        return value.decode("utf-8")
    if pa.types.is_decimal(arrow_type) and isinstance(value, (int, float)):
        if isinstance(value, bool):
            raise TypeError("a boolean is not a decimal")
        try:
            value = Decimal(str(value))
        except InvalidOperation as exc:
            raise ValueError(str(exc)) from None
    if _is_textual(arrow_type) and not isinstance(value, str):
        raise TypeError(f"expected string, got {type(value).__name__}")
    if isinstance(value, bool) and (
        pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type)
    ):
        raise TypeError(f"expected {describe_type(arrow_type)}, got a boolean")
    if isinstance(value, float) and pa.types.is_integer(arrow_type):
        if not value.is_integer():
            raise ValueError("has a fractional part")
        value = int(value)
    return pa.scalar(value, type=arrow_type).as_py()


_ZONE = r"(Z|z|[+-]\d\d(:?\d\d)?)$"


def cast_strings(array: pa.Array, arrow_type: pa.DataType) -> pa.Array:
    """Parse a string array into ``arrow_type``; timestamps without a zone offset are UTC."""
    try:
        return array.cast(arrow_type)
    except pa.ArrowInvalid:
        if not (pa.types.is_timestamp(arrow_type) and arrow_type.tz is not None):
            raise
    zoned = pc.match_substring_regex(array, _ZONE).fill_null(False)
    naive = pc.if_else(zoned, pa.scalar(None, array.type), array)
    as_utc = naive.cast(pa.timestamp(arrow_type.unit)).cast(arrow_type)
    if not pc.any(zoned).as_py():
        return as_utc
    with_zone = pc.if_else(zoned, array, pa.scalar(None, array.type)).cast(arrow_type)
    return pc.if_else(zoned, with_zone, as_utc)


def to_arrow_column(
    values: Sequence[Any], arrow_type: pa.DataType, *, column: str
) -> tuple[pa.Array, dict[int, str]]:
    """Convert ``values`` (``None`` = null) into an Arrow array of ``arrow_type``.

    Returns the array and ``{position: message}`` for each value that does not fit (those
    positions are null in the array). Strings are parsed into numbers, booleans, dates and
    timestamps (Redis hashes and HTTP query strings carry everything as text).
    """
    if not _needs_slow_path(values, arrow_type):
        try:
            return pa.array(values, type=arrow_type), {}
        except _CONVERSION_ERRORS:
            pass
    if not _is_textual(arrow_type) and all(v is None or isinstance(v, str) for v in values):
        try:
            return cast_strings(pa.array(values, type=pa.string()), arrow_type), {}
        except _CONVERSION_ERRORS:
            pass
    converted: list[Any] = []
    errors: dict[int, str] = {}
    for position, value in enumerate(values):
        if value is None:
            converted.append(None)
            continue
        try:
            converted.append(_convert_one(value, arrow_type))
        except _CONVERSION_ERRORS as exc:
            converted.append(None)
            detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            errors[position] = (
                f"column '{column}' expects {describe_type(arrow_type)}, got "
                f"{type(value).__name__} {_excerpt(value)} ({detail})"
            )
    return pa.array(converted, type=arrow_type), errors


def convert_columns(
    columns: Sequence[tuple[pa.Field, Sequence[Any]]],
) -> tuple[list[pa.Array], dict[int, str]]:
    """Convert each ``(field, values)`` into an array of the field's type. Returns the arrays
    and ``{position: why}`` for each position holding a value that does not fit (the first
    problem of a position wins); such a value is null in its array."""
    arrays = []
    reasons: dict[int, str] = {}
    for field, values in columns:
        array, bad = to_arrow_column(values, field.type, column=field.name)
        for position, message in bad.items():
            reasons.setdefault(position, message)
        arrays.append(array)
    return arrays, reasons


def typed_columns(
    columns: Sequence[tuple[pa.Field, Sequence[Any]]],
    keys: Sequence[Any],
    errors: dict[int, str],
) -> list[pa.Array]:
    """:func:`convert_columns`, recording ``"key K: <why>"`` per position in ``errors``."""
    arrays, reasons = convert_columns(columns)
    for position, message in reasons.items():
        errors.setdefault(position, f"key {keys[position]!r}: {message}")
    return arrays


def _error_array(reasons: dict[int, str], rows: int) -> pa.Array | None:
    if not reasons:
        return None
    texts = {row: redact_text(reason) for row, reason in reasons.items()}
    return pa.array([texts.get(row) for row in range(rows)], type=pa.string())


def as_records(document: Any, what: str) -> Any:
    """A decoded JSON ``document`` as the record form of one key's answer: an object is its
    record, an array of objects its several matches, null or ``[]`` no match; anything else
    a :class:`RecordError` saying that ``what`` holds the wrong thing.

    >>> as_records([{"item": 1}, {"item": 2}], "key 7")
    [{'item': 1}, {'item': 2}]
    """
    if document is None or isinstance(document, dict):
        return document
    if isinstance(document, list):
        if not document:
            return None
        wrong = next((item for item in document if not isinstance(item, dict)), document)
        if wrong is document:
            return document
        return RecordError(
            f"{what} holds a JSON array with a {_json_name(wrong)} in it; expected an object "
            "or an array of objects (one per match)"
        )
    return RecordError(
        f"{what} holds a JSON {_json_name(document)}; expected an object or an array of "
        "objects (one per match)"
    )


def _json_name(value: Any) -> str:
    names = {str: "string", int: "number", float: "number", bool: "boolean", list: "array"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def records_to_matches(
    keys: Sequence[Any], result: Mapping[Any, Any], fields: Sequence[pa.Field]
) -> Matches:
    """The record form of an answer (``{key: record}``, see ``LookupClient.lookup``) as
    :class:`Matches`: the one place where records become typed Arrow columns.

    A key that is absent or maps to None is missing; a list of records is several matches; a
    :class:`RecordError`, or anything that is not a record, is an error for that key.
    """
    return values_to_matches([result.get(key) for key in keys], fields)


def values_to_matches(values: Sequence[Any], fields: Sequence[pa.Field]) -> Matches:
    """:func:`records_to_matches` of the values found for keys ``0 .. len(values)-1``, in
    that order (None: missing)."""
    positions: list[int] = []
    records: list[Mapping[str, Any] | None] = []
    reasons: dict[int, str] = {}
    for position, value in enumerate(values):
        if value is None:
            continue
        if type(value) is dict:  # the common case, without the checks below
            positions.append(position)
            records.append(value)
            continue
        for item in value if isinstance(value, (list, tuple)) else (value,):
            positions.append(position)
            if isinstance(item, Mapping):
                records.append(item)
                continue
            reasons[len(records)] = (
                str(item)
                if isinstance(item, RecordError)
                else f"connector returned {type(item).__name__}, not a record"
            )
            records.append(None)
    arrays, bad = convert_columns(
        [
            (field, [None if record is None else record.get(field.name) for record in records])
            for field in fields
        ]
    )
    for row, message in bad.items():
        reasons.setdefault(row, message)
    values = value_batch(arrays, fields, len(records))
    errors = _error_array(reasons, len(records))
    return Matches(np.asarray(positions, dtype=np.int64), values, errors)


def records_from_matches(keys: Sequence[Any], matches: Matches) -> dict[Any, Any]:
    """The record form of :class:`Matches` over ``keys``: key -> record, a list of records
    (several matches) or a :class:`RecordError`."""
    out: dict[Any, Any] = {}
    rows = matches.values.to_pylist()
    errors = matches.errors.to_pylist() if matches.errors is not None else [None] * len(rows)
    for position, record, error in zip(matches.key_index.tolist(), rows, errors):
        key = keys[position]
        if error is not None or isinstance(out.get(key), RecordError):
            out[key] = out.get(key) if isinstance(out.get(key), RecordError) else RecordError(error)
        elif key in out:
            previous = out[key]
            out[key] = [*previous, record] if isinstance(previous, list) else [previous, record]
        else:
            out[key] = record
    return out


def conform_column(column: pa.Array, field: pa.Field) -> tuple[pa.Array, dict[int, str]]:
    """``column`` in ``field``'s type: as it is, cast (in native code) when every value fits,
    else value by value (:func:`to_arrow_column`), with ``{row: why}`` for the values that do
    not fit (null in the array)."""
    if column.type == field.type:
        return column, {}
    try:
        return column.cast(field.type, safe=True), {}
    except _CONVERSION_ERRORS:
        pass
    return to_arrow_column(column.to_pylist(), field.type, column=field.name)


def conform_matches(matches: Matches, fields: Sequence[pa.Field]) -> Matches:
    """``matches`` with exactly the value columns ``fields``, in their types: a column the
    connector left out is null; one of another type is cast, and a value that does not fit is
    an error for its row (as it would be in the record form)."""
    values = matches.values
    names = values.schema.names
    if names == [f.name for f in fields] and all(
        values.schema.field(i).type == f.type for i, f in enumerate(fields)
    ):
        return matches
    rows = matches.num_rows
    arrays: list[pa.Array] = []
    reasons: dict[int, str] = {}
    for field in fields:
        if field.name not in names:
            arrays.append(pa.nulls(rows, type=field.type))
            continue
        array, bad = conform_column(values.column(field.name), field)
        for row, message in bad.items():
            reasons.setdefault(row, message)
        arrays.append(array)
    errors = matches.errors
    if reasons:
        merged = errors.to_pylist() if errors is not None else [None] * rows
        for row, message in reasons.items():
            merged[row] = merged[row] or message
        errors = pa.array(merged, type=pa.string())
    return Matches(matches.key_index, value_batch(arrays, fields, rows), errors)


def _needs_slow_path(values: Sequence[Any], arrow_type: pa.DataType) -> bool:
    # pa.array silently turns booleans into numbers, and numbers into booleans: not on our watch.
    if pa.types.is_integer(arrow_type):
        return any(isinstance(v, (bool, float)) for v in values)
    if pa.types.is_floating(arrow_type):
        return any(isinstance(v, bool) for v in values)
    if pa.types.is_boolean(arrow_type):
        return any(v is not None and not isinstance(v, bool) for v in values)
    return False


def arrow_to_matches(
    answer: pa.RecordBatch | pa.Table,
    keys: pa.RecordBatch,
    fields: Sequence[pa.Field],
    *,
    what: str,
) -> Matches:
    """A columnar answer — a record batch or table with the key column(s), named as in
    ``keys``, and value columns by name; a row per match — as :class:`Matches` of the asked
    ``keys``: rows whose key was not asked (or is null) are dropped, a value column it leaves
    out is null, one of another type is cast (a value that does not fit is an error for its
    row). ``what`` names the answer's source in a message. Raises ValueError for an answer
    without a key column or with one that cannot be compared with the asked keys."""
    if isinstance(answer, pa.Table):
        table = answer.combine_chunks()  # one chunk per column: one batch
        batches = table.to_batches()
        answer = batches[0] if batches else pa.RecordBatch.from_pylist([], schema=table.schema)
    names = answer.schema.names
    probe: list[pa.Array] = []
    for position, name in enumerate(keys.schema.names):
        if name not in names:
            raise ValueError(
                f"{what} answered columns {names} without the key column {name!r}: a columnar "
                "answer carries its keys, a row per match"
            )
        if names.count(name) > 1:
            raise ValueError(f"{what} answered the key column {name!r} {names.count(name)} times")
        column = answer.column(name)
        wanted = keys.column(position).type
        if column.type != wanted:
            try:
                column = column.cast(wanted)
            except _CONVERSION_ERRORS as exc:
                raise ValueError(
                    f"{what} answered key column {name!r} as {column.type}, which cannot be "
                    f"compared with the asked keys ({wanted}): {exc}"
                ) from None
        probe.append(column)
    index = match_rows(probe, list(keys.columns))
    asked = np.flatnonzero(index >= 0)
    values = answer if len(asked) == answer.num_rows else answer.take(pa.array(asked))
    return conform_matches(Matches(index[asked], values, None), fields)
