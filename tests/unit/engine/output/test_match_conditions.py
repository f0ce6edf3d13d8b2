"""Conditions on each pair of a row and one of its key's matches (a validity range): judged
before the join, so that a LEFT join keeps a row none of whose matches pass (with nulls), a
semi join a row some of whose matches pass, an anti join the others."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from lookup_source.engine.output.match_conditions import pairs_passing, parse_match_conditions
from lookup_source.engine.runner import run_lookups
from lookup_source.errors import SchemaError
from lookup_source.testing.clock import VirtualTimeLoop
from tests.fakes import FakeClient, FakeStore, make_config, make_options, make_spec

VERSIONS = {  # user -> its tier over time, [lo, hi)
    1: [{"lo": 0, "hi": 10, "tier": "free"}, {"lo": 10, "hi": 20, "tier": "plus"}],
    2: [{"lo": 5, "hi": 15, "tier": "pro"}],
    3: [{"lo": None, "hi": 50, "tier": "open"}],  # a null bound: never true
}
RANGE = (
    '[{"op": "ge", "left": {"input": "t"}, "right": {"value": "lo"}},'
    ' {"op": "lt", "left": {"input": "t"}, "right": {"value": "hi"}}]'
)
VISITS = [(1, 3), (1, 12), (1, 25), (2, 7), (2, 1), (3, 4), (4, 4), (None, 4), (1, None)]


def run(how: str, conditions: str = RANGE) -> list[tuple[Any, ...]]:
    spec = make_spec(
        make_options(),
        values=(("lo", pa.int32()), ("hi", pa.int32()), ("tier", pa.string())),
        how=how,
    )
    batch = pa.record_batch(
        {
            "k": pa.array([k for k, _ in VISITS], pa.int64()),
            "t": pa.array([t for _, t in VISITS], pa.int32()),
        }
    )
    pairs = parse_match_conditions(conditions, batch.schema, spec.value_fields)
    spec = dataclasses.replace(spec, match_conditions=pairs)
    out = run_lookups(
        [batch.slice(0, 4), batch.slice(4)],
        spec,
        make_config(spec),
        client_factory=lambda c: FakeClient(c, FakeStore(VERSIONS)),
        loop_factory=VirtualTimeLoop,
    )
    return [tuple(r.values()) for b in out for r in b.to_pylist()]


def tiers(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [(k, t, row[-1]) for (k, t, *row) in rows]


def test_a_left_join_on_a_validity_range() -> None:
    assert tiers(run("left")) == [
        (1, 3, "free"),
        (1, 12, "plus"),
        (1, 25, None),  # no version valid then: one row of nulls
        (2, 7, "pro"),
        (2, 1, None),
        (3, 4, None),  # a null bound is not true
        (4, 4, None),
        (None, 4, None),
        (1, None, None),  # a null input: no version matches
    ]


def test_inner_semi_and_anti_joins_on_a_validity_range() -> None:
    assert tiers(run("inner")) == [(1, 3, "free"), (1, 12, "plus"), (2, 7, "pro")]
    assert run("semi") == [(1, 3), (1, 12), (2, 7)]
    assert run("anti") == [(1, 25), (2, 1), (3, 4), (4, 4), (None, 4), (1, None)]


def test_a_literal_and_every_operator() -> None:
    tier = '[{"op": "ne", "left": {"value": "tier"}, "right": {"literal": "free"}}]'
    assert tiers(run("inner", tier)) == [
        (1, 3, "plus"),
        (1, 12, "plus"),
        (1, 25, "plus"),
        (2, 7, "pro"),
        (2, 1, "pro"),
        (3, 4, "open"),
        (1, None, "plus"),
    ]
    for op, kept in (("eq", [10]), ("lt", [0]), ("le", [0, 10]), ("gt", []), ("ge", [10])):
        text = f'[{{"op": "{op}", "left": {{"value": "lo"}}, "right": {{"literal": 10}}}}]'
        rows = run("inner", text)
        assert sorted({r[2] for r in rows if r[0] == 1}) == kept, op


def test_conditions_that_name_no_column_or_mix_types_are_refused() -> None:
    schema = pa.schema([("k", pa.int64()), ("t", pa.int32())])
    fields = [pa.field("lo", pa.int32()), pa.field("tier", pa.string())]
    with pytest.raises(SchemaError, match="names no column"):
        parse_match_conditions(
            '[{"op": "eq", "left": {"input": "x"}, "right": {"value": "lo"}}]', schema, fields
        )
    with pytest.raises(SchemaError, match="compares"):
        parse_match_conditions(
            '[{"op": "eq", "left": {"input": "t"}, "right": {"value": "tier"}}]', schema, fields
        )
    with pytest.raises(SchemaError, match="op"):
        parse_match_conditions(
            '[{"op": "like", "left": {"input": "t"}, "right": {"value": "lo"}}]', schema, fields
        )
    assert parse_match_conditions("", schema, fields) == ()


def test_instants_compare_whatever_time_zone_names_them() -> None:
    """Spark sends an input's timestamps in the session's time zone (``Etc/UTC`` on a machine
    so set, ``Europe/Paris``), the lookup's values come in UTC: both are instants, compared as
    such (a validity range on timestamps failed the task on such a machine)."""
    micros = 1_767_225_600_000_000  # 2026-01-01 00:00 UTC
    day = 86_400_000_000
    rows = pa.record_batch(
        {"ts": pa.array([micros + day, micros + 40 * day], pa.timestamp("us", tz="Europe/Paris"))}
    )
    utc = pa.timestamp("us", tz="UTC")
    matches = pa.record_batch(
        {"valid_from": pa.array([micros], utc), "valid_to": pa.array([micros + 30 * day], utc)}
    )
    text = (
        '[{"op": "ge", "left": {"input": "ts"}, "right": {"value": "valid_from"}},'
        ' {"op": "lt", "left": {"input": "ts"}, "right": {"value": "valid_to"}}]'
    )
    conditions = parse_match_conditions(text, rows.schema, list(matches.schema))
    passing = pairs_passing(conditions, rows, matches, np.array([0, 1]), np.array([0, 0]))
    assert passing.tolist() == [True, False]
    naive = pa.schema([("ts", pa.timestamp("us"))])  # a timestamp_ntz is no instant
    with pytest.raises(SchemaError, match="compares"):
        parse_match_conditions(text, naive, list(matches.schema))
    other_unit = pa.schema([("ts", pa.timestamp("ns", tz="UTC"))])
    with pytest.raises(SchemaError, match="compares"):
        parse_match_conditions(text, other_unit, list(matches.schema))
