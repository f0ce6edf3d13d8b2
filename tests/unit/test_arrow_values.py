"""Conversion of looked-up values into Arrow columns of the declared types."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest

from lookup_source.connector_api.values import to_arrow_column
from lookup_source.redaction import redact_url


@pytest.mark.parametrize(
    ("values", "arrow_type", "expected"),
    [
        ([1, None, 3], pa.int32(), [1, None, 3]),
        (["1", "2", None], pa.int64(), [1, 2, None]),
        ([1.5, 2], pa.float64(), [1.5, 2.0]),
        (["true", "false"], pa.bool_(), [True, False]),
        (["2024-05-01"], pa.date32(), [dt.date(2024, 5, 1)]),
        (
            ["2024-05-01T10:00:00"],
            pa.timestamp("us", tz="UTC"),
            [dt.datetime(2024, 5, 1, 10, tzinfo=dt.timezone.utc)],
        ),
        (
            [1.25, "3.5", 2],
            pa.decimal128(10, 2),
            [Decimal("1.25"), Decimal("3.50"), Decimal("2.00")],
        ),
        ([[1, 2], None], pa.list_(pa.int64()), [[1, 2], None]),
        ([{"a": 1}], pa.struct([("a", pa.int64())]), [{"a": 1}]),
        (["text", b"raw"], pa.string(), ["text", "raw"]),
        (["text"], pa.binary(), [b"text"]),
    ],
)
def test_values_convert(values, arrow_type, expected) -> None:
    array, errors = to_arrow_column(values, arrow_type, column="c")
    assert errors == {}
    assert array.type == arrow_type
    assert array.to_pylist() == expected


@pytest.mark.parametrize(
    ("values", "arrow_type", "bad", "message"),
    [
        ([1, "x", 3], pa.int64(), 1, "column 'c' expects bigint, got str 'x'"),
        ([1, 2**40], pa.int32(), 1, "column 'c' expects int, got int 1099511627776"),
        ([True, 2], pa.int64(), 0, "column 'c' expects bigint, got bool True"),
        ([True, 2], pa.bool_(), 1, "column 'c' expects boolean, got int 2"),
        (["a", 7], pa.string(), 1, "column 'c' expects string, got int 7"),
        ([1.5], pa.int64(), 0, "column 'c' expects bigint, got float 1.5"),
        (["soon"], pa.date32(), 0, "column 'c' expects date, got str 'soon'"),
        ([{"a": 1}], pa.int64(), 0, "column 'c' expects bigint, got dict"),
    ],
)
def test_values_that_do_not_fit_are_reported_by_position(values, arrow_type, bad, message):
    array, errors = to_arrow_column(values, arrow_type, column="c")
    assert list(errors) == [bad]
    assert errors[bad].startswith(message)
    assert array.to_pylist()[bad] is None
    assert array.null_count == 1 + sum(v is None for v in values)


def test_redact_url() -> None:
    assert redact_url("redis://user:pw@h:1/0") == "redis://user:***@h:1/0"
    assert redact_url("redis://:pw@h") == "redis://:***@h"
    assert redact_url("postgresql://h/db?password=pw&x=1") == "postgresql://h/db?password=***&x=1"
    assert redact_url("http://h/users/{key}") == "http://h/users/{key}"
