"""Redis replies as typed Arrow columns, for each ``redis.value.format``.

The fast path decodes a whole request's replies at once — JSON documents by msgspec, strings and
hash fields by Arrow casts — straight into the declared column types. Replies it does not take
as they are (a malformed value, a type that does not fit) are decoded again value by value (the
reference path), which names the Redis key and the column at fault; both give the same values.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from lookup_source.connector_api import (
    DECODE_ERRORS,
    ConnectorConfig,
    JsonColumns,
    Matches,
    RecordError,
    as_records,
    cast_strings,
    excerpt,
    records_to_matches,
)


def _present(replies: Sequence[Any]) -> list[int]:
    """Positions of the replies that are not nil."""
    return [i for i, reply in enumerate(replies) if reply is not None]


class RedisValues:
    """Decodes the replies of one lookup's Redis keys into its value columns."""

    def __init__(self, config: ConnectorConfig, value_fields: list[pa.Field], form: str) -> None:
        self.value_fields = value_fields
        self._fields = config.value_columns
        self._binary_fields = frozenset(
            name
            for name, kind in zip(config.value_columns, config.value_types)
            if pa.types.is_binary(kind) or pa.types.is_large_binary(kind)
        )
        self._raw_bytes = len(self._fields) == 1 and self._fields[0] in self._binary_fields
        self._json = JsonColumns(value_fields) if form == "json" else None

    def json(self, redis_keys: list[str], replies: list[Any]) -> Matches:
        """MGET replies, each a JSON object (or an array of them: several matches)."""
        present = _present(replies)
        assert self._json is not None
        documents = [replies[i] for i in present]
        try:
            values = self._json.decode(documents)
        except DECODE_ERRORS:
            try:  # values that are arrays of objects: several matches for their key
                index, values = self._json.decode_matches(documents)
            except DECODE_ERRORS:
                return self._reference(self._decode_json(redis_keys, replies))
            return Matches(np.asarray(present, dtype=np.int64)[index], values)
        return Matches(present, values)

    def strings(self, redis_keys: list[str], replies: list[Any]) -> Matches:
        """MGET replies, each the raw value of the single value column."""
        present = _present(replies)
        field = self.value_fields[0]
        raw = pa.array([replies[i] for i in present], type=pa.binary())
        try:
            column = raw if self._raw_bytes else cast_strings(raw.cast(pa.string()), field.type)
            column = column.cast(field.type)
        except (pa.ArrowException, ValueError):
            return self._reference(self._decode_strings(redis_keys, replies))
        return Matches(present, pa.RecordBatch.from_arrays([column], schema=pa.schema([field])))

    def hashes(self, redis_keys: list[str], replies: list[Any]) -> Matches:
        """HMGET replies: the value fields of each hash (an error reply: that key's error)."""
        if any(isinstance(reply, Exception) for reply in replies):
            return self._reference(self._decode_hashes(redis_keys, replies))
        present = _present(replies)
        arrays = []
        try:
            for position, field in enumerate(self.value_fields):
                raw = pa.array([replies[i][position] for i in present], type=pa.binary())
                if field.name in self._binary_fields:
                    arrays.append(raw.cast(field.type))
                else:
                    arrays.append(cast_strings(raw.cast(pa.string()), field.type))
        except (pa.ArrowException, ValueError):
            return self._reference(self._decode_hashes(redis_keys, replies))
        schema = pa.schema(self.value_fields)
        return Matches(present, pa.RecordBatch.from_arrays(arrays, schema=schema))

    # -- the reference path: one value at a time, naming what does not fit -----------------------

    def _reference(self, records: dict[int, Any]) -> Matches:
        """Matches from records indexed by the position of their key."""
        return records_to_matches(range(max(records, default=-1) + 1), records, self.value_fields)

    def _decode_json(self, redis_keys: list[str], replies: list[Any]) -> dict[int, Any]:
        out: dict[int, Any] = {}
        for position, (redis_key, raw) in enumerate(zip(redis_keys, replies)):
            if raw is None:
                continue
            try:
                record = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                out[position] = RecordError(
                    f"Redis key {redis_key!r} does not hold valid JSON: {excerpt(raw)!r}"
                )
                continue
            except RecursionError:
                out[position] = RecordError(
                    f"Redis key {redis_key!r} holds JSON nested too deeply to decode: "
                    f"{excerpt(raw)!r}"
                )
                continue
            out[position] = as_records(record, f"Redis key {redis_key!r}")
        return out

    def _decode_strings(self, redis_keys: list[str], replies: list[Any]) -> dict[int, Any]:
        column = self._fields[0]
        out: dict[int, Any] = {}
        for position, (redis_key, raw) in enumerate(zip(redis_keys, replies)):
            if raw is None:
                continue
            if self._raw_bytes:
                out[position] = {column: raw}
                continue
            try:
                out[position] = {column: raw.decode("utf-8")}
            except UnicodeDecodeError:
                out[position] = RecordError(
                    f"Redis key {redis_key!r} holds bytes that are not UTF-8 text; declare "
                    f"column '{column}' as binary to read them raw"
                )
        return out

    def _decode_hashes(self, redis_keys: list[str], replies: list[Any]) -> dict[int, Any]:
        out: dict[int, Any] = {}
        for position, (redis_key, reply) in enumerate(zip(redis_keys, replies)):
            if isinstance(reply, Exception):
                out[position] = RecordError(f"Redis key {redis_key!r}: {reply}")
                continue
            if reply is None:
                continue
            out[position] = {
                name: raw
                if raw is None or name in self._binary_fields
                else raw.decode("utf-8", errors="replace")
                for name, raw in zip(self._fields, reply)
            }
        return out
