"""Conversion of looked-up values into Arrow columns of the declared types."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest

from lookup_source.connector_api.values import arrow_array, to_arrow_column
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


UTC = dt.timezone.utc
INDIA = dt.timezone(dt.timedelta(hours=5, minutes=30))
WEST = dt.timezone(dt.timedelta(hours=-8))


@pytest.mark.parametrize("zone", ["UTC", "Asia/Kolkata", "America/New_York", "+02:00"])
@pytest.mark.parametrize("unit", ["s", "ms", "us"])
def test_a_zoned_timestamp_column_holds_the_instants_pyarrow_makes(zone: str, unit: str) -> None:
    values = [
        dt.datetime(2026, 1, 1, 12, 0, 0, 7, tzinfo=UTC),
        dt.datetime(2026, 1, 1, 12, tzinfo=INDIA),
        dt.datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=WEST),
        None,
        dt.datetime.max.replace(tzinfo=UTC),  # asyncpg's 'infinity'
        dt.datetime.min.replace(tzinfo=UTC),  # '-infinity'
        dt.datetime(2024, 5, 1, 10, 30),  # naive: taken as UTC by both
    ]
    arrow_type = pa.timestamp(unit, tz=zone)
    made = arrow_array(values, arrow_type)
    assert made.type == arrow_type
    assert made.equals(pa.array(values, type=arrow_type))
    assert made[1].as_py() == dt.datetime(2026, 1, 1, 6, 30, tzinfo=UTC)


def test_a_zoned_timestamp_that_does_not_fit_fails_as_pyarrow_does() -> None:
    far = [dt.datetime(3000, 1, 1, tzinfo=UTC)]  # beyond nanoseconds since 1970 in int64
    with pytest.raises((pa.ArrowInvalid, OverflowError, ValueError)):
        pa.array(far, type=pa.timestamp("ns", tz="UTC"))
    with pytest.raises((pa.ArrowInvalid, OverflowError, ValueError)):
        arrow_array(far, pa.timestamp("ns", tz="UTC"))
    array, bad = to_arrow_column([*far, None], pa.timestamp("ns", tz="UTC"), column="valid_to")
    assert array.to_pylist() == [None, None] and list(bad) == [0] and "valid_to" in bad[0]
    assert arrow_array(["x"], pa.string()).to_pylist() == ["x"]  # other types: pa.array itself


def test_redact_url() -> None:
    assert redact_url("redis://user:pw@h:1/0") == "redis://user:***@h:1/0"
    assert redact_url("redis://:pw@h") == "redis://:***@h"
    assert redact_url("postgresql://h/db?password=pw&x=1") == "postgresql://h/db?password=***&x=1"
    assert redact_url("http://h/users/{key}") == "http://h/users/{key}"
