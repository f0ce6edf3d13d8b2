"""A chunk of a scan as output rows (:func:`scan_rows`): each chunk of ``LookupClient.scan_arrow``
(the keys it found and their matches) goes through the same output builder as lookups
(:class:`lookup_source.engine.output.joined_rows.JoinedRows`): key and value columns in the declared
types, one row per match, malformed values reported per key as ``on.error`` asks. Used by a task's
scan (:mod:`lookup_source.engine.scan`) and a full cache's load
(:mod:`lookup_source.engine.kept.table_load`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from lookup_source.connector_api import Matches
from lookup_source.connector_api.keys import python_keys
from lookup_source.connector_api.values import conform_column, conform_matches
from lookup_source.engine.output.builder import value_failure
from lookup_source.engine.output.joined_rows import JoinedRows
from lookup_source.engine.request.answers import keyed_messages
from lookup_source.settings import ERROR_COLUMN


def _typed_keys(
    keys: pa.RecordBatch, key_fields: Sequence[pa.Field]
) -> tuple[pa.RecordBatch, dict[int, str]]:
    """The scanned keys in the declared key types, and why those that do not convert fail."""
    arrays = []
    reasons: dict[int, str] = {}
    for column, field in zip(keys.columns, key_fields):
        array, bad = conform_column(column, field)
        for row, message in bad.items():
            reasons.setdefault(row, message)
        arrays.append(array)
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(list(key_fields))), reasons


def scan_rows(
    keys: pa.RecordBatch,
    matches: Matches,
    key_fields: Sequence[pa.Field],
    value_fields: Sequence[pa.Field],
    *,
    on_error: str,
    connector: str,
    address: str | None,
    name_keys: bool = True,
) -> pa.RecordBatch:
    """One chunk of a scan as output rows: the key columns, then the value columns (and the
    error column under ``on.error=column``); one row per match. Error messages name their key
    (``key 7: ...``) unless ``name_keys`` is false."""
    typed, key_reasons = _typed_keys(keys, key_fields)
    matches = conform_matches(matches, value_fields)
    if key_reasons:  # a key that does not convert fails, as one error row
        rows = np.asarray(sorted(key_reasons), dtype=np.int64)
        nulls = pa.RecordBatch.from_pylist([], schema=pa.schema(list(value_fields)))
        errors = pa.array([key_reasons[int(r)] for r in rows], type=pa.string())
        failing = Matches(rows, nulls.take(pa.nulls(len(rows), pa.int64())), errors)
        matches = Matches.concat([matches, failing], value_fields)
    failed = matches.errors is not None and matches.errors.null_count < matches.num_rows
    if failed and (name_keys or on_error == "fail"):
        scanned = python_keys(keys)
        if name_keys:
            matches = keyed_messages(matches, lambda: scanned)
        if on_error == "fail":
            failure = value_failure(matches, scanned, connector=connector, address=address)
            if failure is not None:
                raise failure
    n = keys.num_rows
    return JoinedRows(
        typed,
        pa.array(np.arange(n, dtype=np.int32)),
        n,
        matches,
        how="inner",  # a scanned key whose value vanished meanwhile has no row
        error_column=ERROR_COLUMN if on_error == "column" else None,
        fields=value_fields,
    ).whole()
