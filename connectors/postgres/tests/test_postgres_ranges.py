"""A lookup that sends each key's ranges to Postgres (``ranged_query``): a point-in-time join's
versions valid at the visits, a superset of what the engine keeps, never fewer."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import pyarrow as pa
import pytest
from asynclookup_postgres.client import PostgresLookupClient
from asynclookup_postgres.ranged_query import BOUND_LIMITS

from lookup_source.connector_api import KeyRange
from lookup_source.spark.plan import LookupPlan

DAY = 86_400_000_000  # microseconds
START = 1_767_225_600_000_000  # 2026-01-01 00:00 UTC
INSTANT = pa.timestamp("us", tz="Europe/Paris")  # Spark's input: the session's zone


@pytest.fixture
def versions(pg: Any, table_name: str) -> str:
    """Users 1..3, each with versions v0..v3 valid for 30 days from 2026-01-01 (user 3 has a
    last version whose end is null), also numbered and dated."""
    pg(
        f"CREATE TABLE {table_name} (uid bigint, v int, valid_from timestamptz, "
        "valid_to timestamptz, day date, name text, PRIMARY KEY (uid, v))"
    )
    rows = []
    for uid in (1, 2, 3):
        for v in range(4):
            start = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(days=30 * v)
            end = None if (uid == 3 and v == 3) else start + dt.timedelta(days=30)
            rows.append((uid, v, start, end, start.date(), f"u{uid}v{v}"))
    pg.many(f"INSERT INTO {table_name} VALUES ($1, $2, $3, $4, $5, $6)", rows)
    yield table_name
    pg(f"DROP TABLE {table_name}")


def ask(url: str, table: str, keys: pa.RecordBatch, **options: str) -> list[tuple[Any, ...]]:
    """(asked key's position, name) of every row the lookup of ``keys`` returns, sorted."""
    plan = LookupPlan.build(
        {
            "connector": "postgres",
            "url": url,
            "postgres.table": table,
            "key.column": "uid",
            **options,
        },
        "uid long, v int, valid_from timestamp, valid_to timestamp, day date, name string",
    )
    config = plan.connector_config()
    assert PostgresLookupClient.takes_ranges(config)

    async def run() -> Any:
        client = PostgresLookupClient(config)
        await client.open()
        try:
            return await client.lookup_arrow(keys)
        finally:
            await client.close()

    matches = asyncio.run(run())
    names = matches.values.column("name").to_pylist()
    return sorted(zip(matches.key_index.tolist(), names))


def keys_with(*ranges: tuple[KeyRange, pa.Array], uids: list[int] | None = None) -> pa.RecordBatch:
    fields = [pa.field("uid", pa.int64())]
    columns = [pa.array(uids or [1, 2, 3], pa.int64())]
    for key_range, bounds in ranges:
        fields.append(key_range.field(bounds.type))
        columns.append(bounds)
    return pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields))


def instants(*days: float | None) -> pa.Array:
    return pa.array([None if d is None else START + int(d * DAY) for d in days], INSTANT)


@pytest.mark.parametrize("equality", ["store", "spark"])
def test_each_key_gets_only_its_versions_within_its_bounds(
    postgres_srv: Any, versions: str, equality: str
) -> None:
    # user 1 visits on days 10 and 70 (lo <= 70, hi > 10): v0, v1, v2; user 2 on day 35: v1;
    # user 3 on day 200 (past every end but the open one's): v3, whose end is null — kept by
    # the store only if null compares true, which it does not (the engine judges the same)
    latest = KeyRange("valid_from", "le", "__asynclookup_range_0")
    earliest = KeyRange("valid_to", "gt", "__asynclookup_range_1")
    keys = keys_with((latest, instants(70, 35, 200)), (earliest, instants(10, 35, 200)))
    got = ask(postgres_srv.url, versions, keys, **{"key.equality": equality})
    assert got == [(0, "u1v0"), (0, "u1v1"), (0, "u1v2"), (1, "u2v1")]
    plain = ask(postgres_srv.url, versions, keys_with())  # no range: every version
    assert len(plain) == 12


def test_a_null_or_far_bound_sends_no_range_for_its_key(postgres_srv: Any, versions: str) -> None:
    latest = KeyRange("valid_from", "le", "__asynclookup_range_0")
    far = -BOUND_LIMITS["timestamp"][0] + 1  # before the earliest sent
    bounds = pa.array([None, START + 40 * DAY, -far], INSTANT)  # user 2: v0, v1
    got = ask(postgres_srv.url, versions, keys_with((latest, bounds)))
    names = [name for _, name in got]
    assert names == [f"u1v{v}" for v in range(4)] + ["u2v0", "u2v1"] + [f"u3v{v}" for v in range(4)]


def test_integer_and_date_ranges_and_ranges_it_cannot_send(
    postgres_srv: Any, versions: str
) -> None:
    numbered = KeyRange("v", "ge", "__asynclookup_range_0")  # an int4 column, int64 bounds
    got = ask(postgres_srv.url, versions, keys_with((numbered, pa.array([3, 2**40, 0]))))
    assert [name for _, name in got] == ["u1v3"] + [f"u3v{v}" for v in range(4)]
    dated = KeyRange("day", "lt", "__asynclookup_range_0")
    days = pa.array([dt.date(2026, 1, 31), None, dt.date(2026, 1, 1)], pa.date32())
    got = ask(postgres_srv.url, versions, keys_with((dated, days)))
    assert [name for _, name in got] == ["u1v0"] + [f"u2v{v}" for v in range(4)]
    # a range on text (ordered by collation) or on a column not in the lookup: not sent
    named = KeyRange("name", "lt", "__asynclookup_range_0")
    unknown = KeyRange("other", "lt", "__asynclookup_range_1")
    texts, numbers = pa.array(["a", "a", "a"]), pa.array([0, 0, 0])
    got = ask(postgres_srv.url, versions, keys_with((named, texts), (unknown, numbers)))
    assert len(got) == 12


def test_a_composite_key_with_a_range(postgres_srv: Any, versions: str) -> None:
    latest = KeyRange("valid_from", "le", "__asynclookup_range_0")
    keys = pa.RecordBatch.from_arrays(
        [pa.array([1, 1, 2], pa.int64()), pa.array([0, 2, 3], pa.int32()), instants(70, 50, None)],
        schema=pa.schema(
            [pa.field("uid", pa.int64()), pa.field("v", pa.int32()), latest.field(INSTANT)]
        ),
    )
    got = ask(postgres_srv.url, versions, keys, **{"key.column": "uid,v"})
    assert got == [(0, "u1v0"), (2, "u2v3")]  # u1v2 starts on day 60, after day 50


def test_bounds_are_exact_to_the_microsecond_and_early_ones_send_no_range(
    postgres_srv: Any, pg: Any, table_name: str
) -> None:
    """An instant past 2^53 microseconds from 1970 (2255 on) reaches Postgres exact (a product
    of microseconds and an interval is rounded there by up to 16 µs: a version starting at the
    visit's very microsecond was lost); a time before Postgres's first (4713 BC), or a day, is
    sent as no range for its key — never a failed key, its versions lost."""
    pg(
        f"CREATE TABLE {table_name} (uid bigint, v int, valid_from timestamptz, "
        "valid_to timestamptz, day date, name text)"
    )
    try:
        pg(
            f"INSERT INTO {table_name} VALUES "
            "(1, 0, '2300-01-01 00:00:00.000001+00', 'infinity', '2300-01-01', 'future'), "
            "(2, 0, '2026-01-01 00:00:00+00', '2027-01-01 00:00:00+00', '2026-01-01', 'now')"
        )
        latest = KeyRange("valid_from", "le", "__asynclookup_range_0")
        earliest = KeyRange("valid_to", "gt", "__asynclookup_range_1")
        visit = 10_413_792_000_000_001  # 2300-01-01 00:00:00.000001 UTC
        ancient = -250_000_000_000_000_000  # about 5950 BC: Spark holds it, Postgres does not
        keys = keys_with(
            (latest, pa.array([visit, START], INSTANT)),
            (earliest, pa.array([visit, ancient], INSTANT)),
            uids=[1, 2],
        )
        assert ask(postgres_srv.url, table_name, keys) == [(0, "future"), (1, "now")]
        dated = KeyRange("day", "ge", "__asynclookup_range_0")
        days = pa.array([-2_600_000, None], pa.date32())  # before 4713 BC: no range
        assert ask(postgres_srv.url, table_name, keys_with((dated, days), uids=[1, 2])) == [
            (0, "future"),
            (1, "now"),
        ]
    finally:
        pg(f"DROP TABLE {table_name}")
