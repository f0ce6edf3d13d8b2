"""How asyncpg's values become Arrow columns (``query.native_array``): a ``timestamptz``'s
aware datetimes, whatever their zone, are the instants they say."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
from asynclookup_postgres.query import native_array

UTC = pa.timestamp("us", tz="UTC")
EPOCH_2026 = 1_767_225_600_000_000  # 2026-01-01 00:00 UTC, in microseconds


def test_aware_datetimes_are_their_instants_in_utc() -> None:
    plus_two = dt.timezone(dt.timedelta(hours=2))
    values = [
        dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
        None,
        dt.datetime(2026, 1, 1, 2, tzinfo=plus_two),  # the same instant
        dt.datetime(2026, 1, 1, 0, 0, 0, 7, tzinfo=dt.timezone.utc),
    ]
    array = native_array(values, UTC)
    assert array.type == UTC
    assert array.cast(pa.int64()).to_pylist() == [EPOCH_2026, None, EPOCH_2026, EPOCH_2026 + 7]


def test_naive_datetimes_none_and_other_types_take_the_typed_path() -> None:
    naive = native_array([dt.datetime(2026, 1, 1), None], UTC)  # a timestamp column: as UTC
    assert naive.type == UTC and naive.cast(pa.int64()).to_pylist() == [EPOCH_2026, None]
    nothing = native_array([None, None], UTC)
    assert nothing.type == UTC and nothing.null_count == 2
    assert native_array([1, None], pa.int32()).to_pylist() == [1, None]
    assert native_array(["a"], pa.string()).type == pa.string()
    ms = pa.timestamp("ms", tz="UTC")  # another unit: cast from the instants
    at = native_array([dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)], ms)
    assert at.type == ms and at.cast(pa.int64()).to_pylist() == [EPOCH_2026 // 1000]
