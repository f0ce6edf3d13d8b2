"""Ranges sent to the store with each key (``engine/intake/ranges.py``): which conditions give
one, and each key's bound over the rows of its batch that ask it."""

from __future__ import annotations

import dataclasses
import json
import operator
from typing import Any

import numpy as np
import pyarrow as pa

from lookup_source.connector_api import KeyRange, Matches, key_columns_of, ranges_of
from lookup_source.engine.intake.keys import distinct_keys
from lookup_source.engine.intake.ranges import pushed_ranges, with_bounds
from lookup_source.engine.output.match_conditions import parse_match_conditions
from lookup_source.settings.cache import CacheSettings
from tests.fakes import (
    FakeColumnarClient,
    FakeStore,
    looked_up,
    make_options,
    make_spec,
)

INSTANT = pa.timestamp("us", tz="Etc/UTC")
VALUES = [
    pa.field("lo", pa.timestamp("us", tz="UTC")),
    pa.field("hi", pa.timestamp("us", tz="UTC")),
    pa.field("n", pa.int64()),
    pa.field("s", pa.string()),
]
BATCH = pa.record_batch(
    {
        "k": pa.array([1, 2, 1, None, 3, 1], pa.int64()),
        "ts": pa.array([10, 5, 30, 7, None, None], INSTANT),
        "m": pa.array([4, 8, 2, 1, 9, None], pa.int64()),
        "text": pa.array(["a", "b", "c", "d", "e", "f"]),
    }
)


def conditions(*items: tuple[str, dict[str, str], dict[str, str]]) -> str:
    return json.dumps([{"op": op, "left": left, "right": right} for op, left, right in items])


def pushed(*items: tuple[str, dict[str, str], dict[str, str]]) -> list[tuple[str, str, str]]:
    parsed = parse_match_conditions(conditions(*items), BATCH.schema, VALUES)
    return [(p.range.value, p.range.op, p.bound) for p in pushed_ranges(parsed, BATCH.schema)]


def test_a_validity_range_sends_each_bound_the_way_that_keeps_every_match() -> None:
    visit, lo, hi = {"input": "ts"}, {"value": "lo"}, {"value": "hi"}
    # ts >= lo and ts < hi: lo <= the latest visit, hi > the earliest
    assert pushed(("ge", visit, lo), ("lt", visit, hi)) == [
        ("lo", "le", "max"),
        ("hi", "gt", "min"),
    ]
    # the same written the other way round
    assert pushed(("le", lo, visit), ("gt", hi, visit)) == [
        ("lo", "le", "max"),
        ("hi", "gt", "min"),
    ]
    # BETWEEN's strict and loose forms, and equality: both bounds
    m, n = {"input": "m"}, {"value": "n"}
    assert pushed(("lt", m, n), ("le", n, m)) == [("n", "gt", "min"), ("n", "le", "max")]
    assert pushed(("eq", m, n)) == [("n", "ge", "min"), ("n", "le", "max")]


def test_what_is_not_a_range_of_an_ordered_type_is_not_sent() -> None:
    assert pushed(("ne", {"input": "m"}, {"value": "n"})) == []
    assert pushed(("lt", {"value": "n"}, {"literal": 3})) == []  # a literal: judged after
    assert pushed(("lt", {"input": "text"}, {"value": "s"})) == []  # strings order by collation


def test_each_key_gets_the_extreme_of_its_rows_and_null_without_one() -> None:
    parsed = parse_match_conditions(
        conditions(
            ("ge", {"input": "ts"}, {"value": "lo"}), ("lt", {"input": "ts"}, {"value": "hi"})
        ),
        BATCH.schema,
        VALUES,
    )
    ranges = pushed_ranges(parsed, BATCH.schema)
    distinct = with_bounds(distinct_keys([BATCH.column("k")], ["k"]), BATCH, ranges)
    keys = distinct.keys
    assert keys.column("k").to_pylist() == [1, 2, 3]  # a null key is never asked
    as_numbers = [keys.column(i).cast(pa.int64()).to_pylist() for i in (1, 2)]
    assert as_numbers == [[30, 5, None], [10, 5, None]]  # key 3's only visit has no time
    assert ranges_of(keys) == (
        KeyRange("lo", "le", "__asynclookup_range_0"),
        KeyRange("hi", "gt", "__asynclookup_range_1"),
    )
    assert key_columns_of(keys).schema.names == ["k"]
    assert keys.schema.field(1).type == INSTANT  # the input's own type
    plain = distinct_keys([BATCH.column("k")], ["k"])
    assert with_bounds(plain, BATCH, ()) is plain


VERSIONS = {  # user -> its tier over time, [lo, hi)
    1: [{"lo": 0, "hi": 10, "tier": "free"}, {"lo": 10, "hi": 20, "tier": "plus"}],
    2: [{"lo": 5, "hi": 15, "tier": "pro"}],
}
RANGE = conditions(("ge", {"input": "t"}, {"value": "lo"}), ("lt", {"input": "t"}, {"value": "hi"}))
LEVELS = (("lo", pa.int64()), ("hi", pa.int64()), ("tier", pa.string()))


COMPARE = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge}


class RangedClient(FakeColumnarClient):
    """The fake store, sending each key's ranges: it returns only the versions within them
    and records what it was asked."""

    name = "fake-ranged"
    asked: list[dict[str, list[Any]]] = []

    @classmethod
    def takes_ranges(cls, config: Any) -> bool:
        return True

    async def lookup_arrow(self, keys: pa.RecordBatch) -> Matches:
        ranges = ranges_of(keys)
        RangedClient.asked.append(keys.to_pydict())
        bare = key_columns_of(keys)
        answer = await super().lookup_arrow(bare)
        keep = []
        for row, position in enumerate(answer.key_index.tolist()):
            record = answer.values.slice(row, 1).to_pylist()[0]
            kept = True
            for key_range in ranges:
                bound = keys.column(key_range.column)[position].as_py()
                value = record[key_range.value]
                if bound is not None and value is not None:
                    kept &= COMPARE[key_range.op](value, bound)
            keep.append(kept)
        return answer.rows(np.flatnonzero(np.array(keep, dtype=bool)))


def run_ranged(
    batches: list[pa.RecordBatch],
    how: str,
    *,
    push: bool,
    client: type[RangedClient] = RangedClient,
    **options: Any,
) -> list[Any]:
    options = make_options(cache=CacheSettings(mode="partial", max_rows=100), **options)
    spec = make_spec(options, values=LEVELS, how=how)
    pairs = parse_match_conditions(RANGE, batches[0].schema, spec.value_fields)
    ranges = pushed_ranges(pairs, batches[0].schema) if push else ()
    spec = dataclasses.replace(spec, match_conditions=pairs, pushed_ranges=ranges)
    store = FakeStore(VERSIONS)
    store.latency = lambda keys: 0.5 if len(keys) == 2 else 0.01  # the first batch is slow
    return [tuple(row.values()) for row in looked_up(batches, spec, store, client)]


def visits(*pairs: tuple[int | None, int | None]) -> pa.RecordBatch:
    return pa.record_batch(
        {
            "k": pa.array([k for k, _ in pairs], pa.int64()),
            "t": pa.array([t for _, t in pairs], pa.int64()),
        }
    )


def test_ranges_sent_give_the_rows_judging_every_version_gives() -> None:
    # the same users in two batches at other times: a cached or shared answer of the first
    # (its range) would lose the second's versions
    batches = [visits((1, 3), (2, 7), (1, 4)), visits((1, 12), (2, 1), (None, 4), (1, None))]
    for how in ("left", "inner", "semi", "anti"):
        RangedClient.asked = []
        sent = run_ranged(batches, how, push=True)
        assert RangedClient.asked[0]["__asynclookup_range_0"] == [4, 7]  # lo <= latest visit
        assert RangedClient.asked[0]["__asynclookup_range_1"] == [3, 7]  # hi > earliest
        assert len(RangedClient.asked) == 2  # each batch asks its own: nothing from a cache
        RangedClient.asked = []
        judged = run_ranged(batches, how, push=False)
        assert all("__asynclookup_range_0" not in a for a in RangedClient.asked)
        assert sent == judged, how
    assert [row[-1] for row in run_ranged(batches, "left", push=True)] == [
        "free",
        "pro",
        "free",
        "plus",
        None,
        None,
        None,
    ]


def test_key_ordered_output_keeps_each_keys_rows_in_order_with_ranges() -> None:
    """Under ``output.mode=key-ordered`` a key's rows in a later batch wait for the earlier
    batch's, whatever bounds each batch sent for it (its bounds are no part of the key)."""
    batches = [visits((1, 3), (2, 7), (1, 4)), visits((1, 12), (3, 1), (4, 2))]
    rows = run_ranged(batches, "left", push=True, output_mode="key-ordered")
    assert [(k, t) for k, t, *_ in rows if k == 1] == [(1, 3), (1, 4), (1, 12)]
    ordered = run_ranged(batches, "left", push=True)
    assert sorted(rows, key=repr) == sorted(ordered, key=repr)


class DecliningClient(RangedClient):
    """A columnar client that takes no ranges: its keys batches carry none."""

    @classmethod
    def takes_ranges(cls, config: Any) -> bool:
        return False


def test_a_client_that_takes_no_ranges_gets_none_and_the_same_rows() -> None:
    batches = [visits((1, 3), (2, 7), (1, 4)), visits((1, 12), (2, 1))]
    RangedClient.asked = []
    rows = run_ranged(batches, "left", push=True, client=DecliningClient)
    assert RangedClient.asked and all(list(a) == ["k"] for a in RangedClient.asked)
    assert rows == run_ranged(batches, "left", push=False)


class LateVersions(RangedClient):
    """User 2's version valid from 15 is written after the first ask (a late dimension row)."""

    calls = 0

    async def lookup_arrow(self, keys: pa.RecordBatch) -> Matches:
        LateVersions.calls += 1
        if LateVersions.calls == 2:
            self.store.table[2] = [*self.store.table[2], {"lo": 15, "hi": 30, "tier": "late"}]
        return await super().lookup_arrow(keys)


def test_under_retry_on_miss_a_version_written_late_is_found() -> None:
    """``retry.on-miss`` asks again a key none of whose versions is valid at the times asked:
    the version written meanwhile is found (sending no range would take the key's older
    versions for an answer, and never ask again)."""
    LateVersions.calls = 0
    RangedClient.asked = []
    store_rows = dict(VERSIONS)
    try:
        rows = run_ranged(
            [visits((2, 20), (1, 3))],
            "left",
            push=True,
            client=LateVersions,
            retry_on_miss=True,
            max_attempts=3,
        )
    finally:
        VERSIONS.clear()
        VERSIONS.update(store_rows)
    assert [row[-1] for row in rows] == ["late", "free"]
    assert [a["k"] for a in RangedClient.asked] == [[2, 1], [2]]  # asked again: user 2 only
