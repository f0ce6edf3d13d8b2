"""output.mode=key-ordered on Spark: under an adversarial latency (one slow key among fast
ones), the rows of each key leave in input order and the other keys pass the slow one — through
lookup_join and the SQL table function — with the same rows as ``ordered``."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

import pytest

from lookup_source import lookup_join, register_lookup_table
from lookup_source.spark.versions import TABLE_FUNCTION
from tests.helpers import needs

SCHEMA = "user_id long, name string"
SLOW = 7


async def profile(user_id: int) -> Any:
    """Every key answers at once but one, which takes half a second."""
    await asyncio.sleep(0.5 if user_id == SLOW else 0.001)
    return None if user_id >= 40 else {"name": f"user {user_id}"}


def updates(spark: Any) -> Any:
    """One partition (one task, so its output order is the output order): the slow key first,
    then again and again between the others; a null key; missing keys (40..44)."""
    keys = [SLOW, 1, 2, SLOW, 3, 4, 5, SLOW, 6, None, 8, 41, 9, 10, SLOW, 44]
    rows = [(event, key) for event, key in enumerate(keys)]
    return spark.createDataFrame(rows, "event_id long, user_id long").coalesce(1)


def by_event(rows: list[Any]) -> list[tuple[Any, ...]]:
    return sorted((tuple(row) for row in rows), key=lambda row: row[0])


def check(rows: list[Any], ordered: list[Any]) -> None:
    assert by_event(rows) == by_event(ordered)  # the same rows as ordered
    per_key: dict[Any, list[int]] = defaultdict(list)
    for row in rows:
        per_key[row.user_id].append(row.event_id)
    assert all(events == sorted(events) for events in per_key.values())  # each key in order
    users = [row.user_id for row in rows]
    first_slow = users.index(SLOW)
    assert set(users[:first_slow]) >= {1, 2, 3, 4, 5, 6, 8, 9, 10}  # the others passed it
    assert users[first_slow:] == [SLOW] * 4
    assert [r.event_id for r in ordered] == sorted(r.event_id for r in ordered)  # (ordered)


def test_key_ordered_lookup_join(spark: Any) -> None:
    results = {}
    for mode in ("ordered", "key-ordered"):
        out = lookup_join(
            updates(spark),
            "user_id",
            schema=SCHEMA,
            fetch=profile,
            options={"output.mode": mode, "capacity": "20"},
        )
        results[mode] = out.select("event_id", "user_id", "name").collect()
    rows = results["key-ordered"]
    check(rows, results["ordered"])
    for row in rows:
        known = row.user_id is not None and row.user_id < 40
        assert row.name == (f"user {row.user_id}" if known else None)


@needs(TABLE_FUNCTION)
def test_key_ordered_table_function(spark: Any) -> None:
    results = {}
    updates(spark).createOrReplaceTempView("key_ordered_updates")
    for mode in ("ordered", "key-ordered"):
        name = f"slow_users_{mode.replace('-', '_')}"
        register_lookup_table(
            spark, name, schema=SCHEMA, fetch=profile, options={"output.mode": mode}
        )
        out = spark.sql(f"SELECT * FROM {name}_lookup(TABLE(key_ordered_updates), 'user_id')")
        results[mode] = out.select("event_id", "user_id", "name").collect()
    check(results["key-ordered"], results["ordered"])


@pytest.mark.parametrize("how", ["left", "inner"])
def test_key_ordered_on_composite_keys_with_several_matches(spark: Any, how: str) -> None:
    async def orders(key: tuple[str, int]) -> Any:
        tenant, user = key
        await asyncio.sleep(0.4 if user == 1 else 0.001)
        if user >= 5:
            return None
        return [{"item": f"{tenant}-{user}-a"}, {"item": f"{tenant}-{user}-b"}]

    keys = [("x", 1), ("x", 2), ("y", 1), ("x", 1), ("y", 3), ("x", 9), ("y", 1), ("x", 4)]
    df = spark.createDataFrame(
        [(e, t, u) for e, (t, u) in enumerate(keys)], "event_id long, tenant string, user long"
    ).coalesce(1)
    out = lookup_join(
        df,
        ["tenant", "user"],
        schema="tenant string, user long, item string",
        fetch=orders,
        options={"output.mode": "key-ordered", "key.column": "tenant,user"},
        how=how,
    )
    rows = out.select("event_id", "tenant", "user", "item").collect()
    expected = []
    for event, (tenant, user) in enumerate(keys):
        if user >= 5:
            if how == "left":
                expected.append((event, tenant, user, None))
            continue
        expected += [(event, tenant, user, f"{tenant}-{user}-{m}") for m in "ab"]
    assert sorted(tuple(r) for r in rows) == sorted(expected)
    slow = [i for i, r in enumerate(rows) if r.user == 1]
    assert min(slow) > max(i for i, r in enumerate(rows) if r.user != 1)  # the others passed
    for tenant in ("x", "y"):
        events = [r.event_id for r in rows if (r.tenant, r.user) == (tenant, 1)]
        assert events == sorted(events)
