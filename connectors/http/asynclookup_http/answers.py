"""What a JSON answer of the HTTP connector holds: the record at ``http.json.path`` (per key),
or the records of a batch answer matched to the asked keys (:class:`BatchAnswers`).

A batch answer is decoded by msgspec straight into typed columns (its keys compared as text);
one the fast path does not take as it is (a record without its key, a path that is not there,
a value that does not fit) is decoded again with ``json`` and matched key by key, which names
the option and shows an excerpt of the answer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa

from lookup_source.connector_api import (
    DECODE_ERRORS,
    JsonColumns,
    Key,
    LookupResult,
    Matches,
    PermanentError,
    RecordError,
    as_records,
    excerpt,
    key_text,
    match_rows,
    python_keys,
    records_to_matches,
)


class Absent:
    """What :func:`_select` finds where the answer does not have ``http.json.path``."""

    def __init__(self, path: tuple[str, ...], depth: int, found: Any) -> None:
        self.path = path
        self.depth = depth  # how many parts of the path were there
        self.found = found  # what was there instead of the next part

    def message(self, what: str, body: bytes) -> str:
        wanted = ".".join(self.path)
        have = ".".join(self.path[: self.depth]) or "the top level"
        if isinstance(self.found, Mapping):
            names = ", ".join(list(map(str, self.found))[:8]) or "nothing"
            instead = f"{have} has {names}"
        else:
            instead = f"{have} is a JSON {json_type(self.found)}"
        return (
            f"{what} has no {self.path[self.depth]!r} at http.json.path={wanted} ({instead}; "
            f"check the option against an answer): {excerpt(body)!r}"
        )


def json_type(value: Any) -> str:
    names = {str: "string", int: "number", float: "number", bool: "boolean", list: "array"}
    return "null" if value is None else names.get(type(value), "object")


def select(document: Any, path: tuple[str, ...]) -> Any:
    """What ``document`` holds at ``path``; :class:`_Absent` where it does not have it (an
    explicit null along the way is null: no record)."""
    for depth, part in enumerate(path):
        if document is None:
            return None
        if isinstance(document, Mapping) and part in document:
            document = document[part]
        elif isinstance(document, list) and part.isdigit() and int(part) < len(document):
            document = document[int(part)]
        else:
            return Absent(path, depth, document)
    return document


def parse_json_path(value: str) -> tuple[str, ...]:
    parts = tuple(part for part in value.strip().split(".") if part)
    if value.strip() and not parts:
        raise ValueError(f"expected a dotted path such as data.user, got {value!r}")
    return parts


class BatchAnswers:
    """The records of a batch answer at ``http.json.path``, matched to the asked keys: an
    object key -> record, or an array of records carrying their key column(s)."""

    def __init__(
        self, value_fields: list[pa.Field], key_columns: tuple[str, ...], path: tuple[str, ...]
    ) -> None:
        self.value_fields = value_fields
        self.key_columns = key_columns
        self._path = path
        self._records = JsonColumns(value_fields)
        self._keyed_records = JsonColumns(value_fields, extra=key_columns)
        shape = self._answer_type()
        self._decode = msgspec.json.Decoder(shape).decode if shape is not None else None

    def matches(self, keys: pa.RecordBatch, answer: bytes, what: str) -> Matches:
        """The matches of ``answer`` (the body of the response to ``what``) for ``keys``."""
        if self._decode is not None:
            try:
                return self._decoded_matches(keys, self._decode(answer))
            except DECODE_ERRORS:
                pass  # the answer is decoded again below, naming what does not fit
        try:
            document = loads(answer)
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise PermanentError(
                f"the response to {what} is not valid JSON: {excerpt(answer)!r}"
            ) from None
        wanted = python_keys(keys)
        records = select(document, self._path)
        if isinstance(records, Absent):
            raise PermanentError(records.message(f"the response to {what}", answer))
        found = self._match(wanted, records, what, answer)
        return records_to_matches(wanted, found, self.value_fields)

    def _answer_type(self) -> Any:
        """The msgspec type of a batch answer: an object key -> record, or an array of records
        carrying their key, at ``http.json.path``; None if the path cannot be typed."""
        if any(part.isdigit() for part in self._path):
            return None
        shape = _answer_shape(self._records.record_type, self._keyed_records.record_type)
        for depth, part in enumerate(reversed(self._path)):
            level = shape | msgspec.UnsetType
            shape = msgspec.defstruct(
                f"Level{depth}", [("v", level, msgspec.UNSET)], rename={"v": part}
            )
        return shape

    def _unwrap(self, document: Any) -> Any:
        for _ in self._path:
            if document is None:
                return None
            document = document.v
            if document is msgspec.UNSET:  # the path is not there: decoded again, to say so
                raise ValueError("http.json.path not in the answer")
        return document

    def _decoded_matches(self, keys: pa.RecordBatch, document: Any) -> Matches:
        """Matches of a batch answer decoded by msgspec: keys are compared as text."""
        records = self._unwrap(document)
        if isinstance(records, dict):
            if keys.num_columns > 1:
                raise ValueError("an object answer cannot carry composite keys")
            texts = [text for text, record in records.items() if record is not None]
            chosen = [record for record in records.values() if record is not None]
            index = _positions(texts, _texts_of(keys.column(0)))
            values = self._records.columns(chosen)
        elif isinstance(records, list):
            getters = self._keyed_records.extra_getters
            parts = [list(map(getter, records)) for getter in getters]
            present = [i for i, r in enumerate(zip(*parts)) if all(v is not None for v in r)]
            if len(present) < len(records):  # a record without its key: decoded again, to say so
                raise ValueError("a record without its key")
            if len(parts) == 1:
                texts_of_one = [key_text(parts[0][i]) for i in present]
                index = _positions(texts_of_one, _texts_of(keys.column(0)))
            else:
                asked = [pa.array(_texts_of(column), type=pa.string()) for column in keys.columns]
                texts = [
                    pa.array([key_text(part[i]) for i in present], type=pa.string())
                    for part in parts
                ]
                index = match_rows(texts, asked)
            values = self._keyed_records.columns([records[i] for i in present])
            values = values.select([f.name for f in self.value_fields])
        else:
            return Matches.none(self.value_fields)
        keep = index >= 0  # records for keys nobody asked are ignored
        if keep.all():
            return Matches(index, values)
        return Matches(index[keep], values.filter(pa.array(keep)))

    def _match(self, keys: Sequence[Key], records: Any, what: str, body: bytes) -> LookupResult:
        columns = self.key_columns
        by_text: dict[Any, Key] = {_match_text(key): key for key in keys}
        out: dict[Key, Any] = {}
        if isinstance(records, dict):
            if len(columns) > 1:
                raise PermanentError(
                    f"the response to {what} is an object; composite keys need an array of "
                    f"records carrying {', '.join(columns)}"
                )
            for text, record in records.items():
                key = by_text.get(text)
                if key is None or record is None:
                    continue
                out[key] = (
                    record
                    if isinstance(record, dict)
                    else RecordError(
                        f"the response holds a JSON {type(record).__name__} for this key, expected "
                        "an object"
                    )
                )
            return out
        if isinstance(records, list):
            for record in records:
                if not isinstance(record, dict):
                    raise PermanentError(
                        f"the response to {what} holds a JSON {json_type(record)} in its array "
                        f"of records; expected objects carrying {', '.join(columns)} (see "
                        f"http.json.path): {excerpt(body)!r}"
                    )
                parts = [record.get(column) for column in columns]
                if any(part is None for part in parts):
                    absent = [c for c, part in zip(columns, parts) if part is None]
                    raise PermanentError(
                        f"a record in the response to {what} has no {', '.join(absent)}: the "
                        "records of an array answer carry their key column(s) by name, so each "
                        f"can be matched to its key: {excerpt(body)!r}"
                    )
                text = _match_text(parts[0] if len(parts) == 1 else tuple(parts))
                key = by_text.get(text)
                if key is not None:
                    previous = out.get(key)
                    out[key] = record if previous is None else [*_as_list(previous), record]
            return out
        if records is None:
            return out
        raise PermanentError(
            f"the response to {what} holds a JSON {type(records).__name__}; expected an object "
            "(key -> record) or an array of records"
        )


def _answer_shape(record: Any, keyed: Any) -> Any:
    """An object key -> record (or null), or an array of records carrying their key."""
    return dict[str, record | None] | list[keyed] | None


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def loads(body: bytes) -> Any:
    """``json.loads(body)``, decoded by msgspec where it gives the same values (it refuses
    NaN, infinities and invalid text, which json.loads then decides)."""
    try:
        return msgspec.json.decode(body)
    except msgspec.DecodeError:
        return json.loads(body)


def record(body: bytes, path: tuple[str, ...]) -> Any:
    """The record(s) of a per-key GET's answer at ``path`` (``http.json.path``), or the
    RecordError that says why there are none (not JSON, nested too deeply, no such path)."""
    try:
        document = loads(body)
    except RecursionError:
        return RecordError(f"the response is nested too deeply to decode: {excerpt(body)!r}")
    except (ValueError, UnicodeDecodeError):
        return RecordError(f"the response is not valid JSON: {excerpt(body)!r}")
    where = f"the response at {'.'.join(path)}" if path else "the response"
    selected = select(document, path)
    if isinstance(selected, Absent):
        return RecordError(selected.message("the response", body))
    return as_records(selected, where)


def json_key(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return key_text(value)


def _match_text(key: Any) -> Any:
    if isinstance(key, tuple):
        return tuple(key_text(part) for part in key)
    return key_text(key)


def _texts_of(column: pa.Array) -> list[str | None]:
    """The asked keys of one key column as the text a JSON answer names them by (None for a
    null key, which nothing matches)."""
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return column.to_pylist()
    if pa.types.is_integer(column.type):
        return [None if v is None else str(v) for v in column.to_pylist()]
    return [None if v is None else key_text(v) for v in column.to_pylist()]


def _positions(texts: list[str], asked: list[str | None]) -> np.ndarray:
    """For each of ``texts``, the position of the first equal asked key, or -1. A dict: one
    answer's hundred keys are matched faster in Python than by an Arrow hash table."""
    first = dict(zip(reversed(asked), range(len(asked) - 1, -1, -1)))
    first.pop(None, None)
    found = first.get
    return np.array([found(text, -1) for text in texts], dtype=np.int64)
