"""A chunk of a scan as output rows (:func:`scan_rows`): the scanned keys and values in the
declared types, one row per match (a scanned key without a match has no row), and a key or value
that does not convert reported for its key as ``on.error`` asks: an error column, nulls, or the
task's failure naming the key."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lookup_source.connector_api import Matches
from lookup_source.engine.output.scan_rows import scan_rows
from lookup_source.errors import LookupFailedError

KEY_FIELDS = [pa.field("k", pa.int64())]
VALUE_FIELDS = [pa.field("name", pa.string()), pa.field("n", pa.int64())]
BAD_N = (
    "column 'n' expects bigint, got str 'y' (Failed to parse string: 'y' as a scalar of type int64)"
)
BAD_K = (
    "column 'k' expects bigint, got str 'x' (Failed to parse string: 'x' as a scalar of type int64)"
)


def chunk() -> tuple[pa.RecordBatch, Matches]:
    """Keys as text (one, 'x', no number); key '1' has two matches, '2' a value that does not
    fit, '3' none."""
    keys = pa.record_batch({"k": pa.array(["1", "2", "x", "3", "4"])})
    values = pa.record_batch({"name": ["a", "b", "c", "d"], "n": pa.array(["1", "2", "y", "4"])})
    return keys, Matches([0, 0, 1, 4], values)


def test_rows_in_the_declared_types_one_per_match() -> None:
    keys = pa.record_batch({"k": pa.array([5, 6, 7], pa.int32())})
    values = pa.record_batch({"name": ["five", "seven-a", "seven-b"], "n": [5, 7, 70]})
    out = scan_rows(
        keys,
        Matches([0, 2, 2], values),
        KEY_FIELDS,
        VALUE_FIELDS,
        on_error="null",
        connector="fake",
        address=None,
    )
    assert out.schema == pa.schema(KEY_FIELDS + VALUE_FIELDS)
    assert out.to_pylist() == [
        {"k": 5, "name": "five", "n": 5},
        {"k": 7, "name": "seven-a", "n": 7},
        {"k": 7, "name": "seven-b", "n": 70},
    ]  # 6: no match, no row


def test_on_error_column_reports_each_bad_key_and_value_naming_the_key() -> None:
    keys, matches = chunk()
    out = scan_rows(
        keys, matches, KEY_FIELDS, VALUE_FIELDS, on_error="column", connector="fake", address=None
    )
    assert out.schema.names == ["k", "name", "n", "_lookup_error"]
    assert [tuple(r.values()) for r in out.to_pylist()] == [
        (1, "a", 1, None),
        (1, "b", 2, None),
        (2, None, None, f"key '2': {BAD_N}"),
        (None, None, None, f"key 'x': {BAD_K}"),  # a key that does not convert: one error row
        (4, "d", 4, None),
    ]


def test_on_error_null_keeps_the_failed_keys_rows_with_nulls() -> None:
    keys, matches = chunk()
    out = scan_rows(
        keys, matches, KEY_FIELDS, VALUE_FIELDS, on_error="null", connector="fake", address=None
    )
    assert out.schema.names == ["k", "name", "n"]
    assert [tuple(r.values()) for r in out.to_pylist()] == [
        (1, "a", 1),
        (1, "b", 2),
        (2, None, None),
        (None, None, None),
        (4, "d", 4),
    ]


def test_on_error_fail_raises_naming_the_failed_keys() -> None:
    keys, matches = chunk()
    with pytest.raises(LookupFailedError) as raised:
        scan_rows(
            keys,
            matches,
            KEY_FIELDS,
            VALUE_FIELDS,
            on_error="fail",
            connector="fake",
            address="fake://user:secret@store:1",
        )
    error = raised.value
    assert error.failed_keys == 2 and error.sample_keys == ["2", "x"]
    assert error.reason == f"a value could not be used: key '2': {BAD_N}"
    assert error.address == "fake://user:***@store:1"


def test_on_error_fail_with_good_values_raises_nothing() -> None:
    keys = pa.record_batch({"k": pa.array([1], pa.int64())})
    matches = Matches([0], pa.record_batch({"name": ["a"], "n": pa.array([1], pa.int64())}))
    out = scan_rows(
        keys, matches, KEY_FIELDS, VALUE_FIELDS, on_error="fail", connector="f", address=None
    )
    assert out.to_pylist() == [{"k": 1, "name": "a", "n": 1}]


def test_messages_are_left_unnamed_when_asked() -> None:
    keys, matches = chunk()
    out = scan_rows(
        keys,
        matches,
        KEY_FIELDS,
        VALUE_FIELDS,
        on_error="column",
        connector="fake",
        address=None,
        name_keys=False,
    )
    errors = [e for e in out.column("_lookup_error").to_pylist() if e is not None]
    assert errors == [BAD_N, BAD_K]


def test_a_key_with_an_error_row_keeps_that_row_only() -> None:
    keys = pa.record_batch({"k": pa.array([1], pa.int64())})
    values = pa.record_batch({"name": ["a", "b"], "n": pa.array([1, 2], pa.int64())})
    errors = pa.array([None, "broken"], pa.string())
    out = scan_rows(
        keys,
        Matches([0, 0], values, errors),
        KEY_FIELDS,
        VALUE_FIELDS,
        on_error="column",
        connector="fake",
        address=None,
    )
    assert out.to_pylist() == [{"k": 1, "name": None, "n": None, "_lookup_error": "key 1: broken"}]


def test_an_empty_chunk_is_an_empty_batch_with_the_schema() -> None:
    keys = pa.record_batch({"k": pa.array([], pa.int64())})
    out = scan_rows(
        keys,
        Matches.none(VALUE_FIELDS),
        KEY_FIELDS,
        VALUE_FIELDS,
        on_error="column",
        connector="fake",
        address=None,
    )
    assert out.num_rows == 0
    assert out.schema.names == ["k", "name", "n", "_lookup_error"]


def test_composite_keys_and_a_missing_value_column() -> None:
    key_fields = [pa.field("t", pa.string()), pa.field("u", pa.int64())]
    keys = pa.record_batch({"t": ["a", "b"], "u": pa.array([1, 2], pa.int64())})
    values = pa.record_batch({"name": ["a1", "b2"]})  # no column n: null
    out = scan_rows(
        keys,
        Matches([1, 0], values),
        key_fields,
        VALUE_FIELDS,
        on_error="null",
        connector="fake",
        address=None,
    )
    assert out.to_pylist() == [
        {"t": "a", "u": 1, "name": "b2", "n": None},
        {"t": "b", "u": 2, "name": "a1", "n": None},
    ]


def test_on_error_fail_raises_with_messages_left_unnamed_too() -> None:
    keys, matches = chunk()
    with pytest.raises(LookupFailedError) as failure:
        scan_rows(
            keys,
            matches,
            KEY_FIELDS,
            VALUE_FIELDS,
            on_error="fail",
            connector="fake",
            address=None,
            name_keys=False,
        )
    assert BAD_N in str(failure.value) or BAD_K in str(failure.value)
