"""``fetch_many=`` answering in columns: an Arrow record batch or table carrying its keys,
converted once per answer (lookup_source.connector_api.values.arrow_to_matches)."""

from __future__ import annotations

import datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from lookup_source.connector_api.values import arrow_to_matches
from lookup_source.engine.metrics import LookupMetrics
from lookup_source.errors import LookupFailedError
from lookup_source.functions import LookupFunction
from tests.unit.test_functions import SCHEMA, run

NAMES = {i: f"user {i}" for i in range(1, 100)}


def columns(keys: list[int], **extra: Any) -> pa.Table:
    found = [k for k in keys if k in NAMES]
    return pa.table(
        {
            "id": pa.array(found, pa.int64()),
            "name": [NAMES[k] for k in found],
            "tier": pa.array([k % 3 for k in found], pa.int64()),  # cast to int
            **extra,
        }
    )


def test_a_table_carrying_its_keys_gives_the_same_rows_as_records() -> None:
    async def as_columns(keys: list[int]) -> pa.Table:
        return columns(keys)

    async def as_records(keys: list[int]) -> dict[int, Any]:
        return {k: {"name": NAMES[k], "tier": k % 3} for k in keys if k in NAMES}

    keys = [5, None, 7, 5, 500, 99, 1]
    metrics: list[LookupMetrics] = []
    got = run(LookupFunction.of(fetch_many=as_columns), keys, {"batch.size": "2"}, metrics=metrics)
    assert got == run(LookupFunction.of(fetch_many=as_records), keys, {"batch.size": "2"})
    assert [r["name"] for r in got] == [
        "user 5",
        None,
        "user 7",
        "user 5",
        None,
        "user 99",
        "user 1",
    ]
    assert metrics[0].missing_keys == 1 and metrics[0].requests == 3


def test_several_matches_unasked_and_null_keys_and_a_record_batch() -> None:
    async def answer(keys: list[int]) -> pa.RecordBatch:
        ids = [*keys, *keys, 12345, None]  # every key twice, a key not asked, a null key
        return pa.RecordBatch.from_pydict(
            {
                "name": [f"n{k}" for k in ids],
                "id": pa.array(ids, pa.int32()),  # another integer type: cast to the keys'
                "ignored": ["x"] * len(ids),
            }
        )

    got = run(LookupFunction.of(fetch_many=answer), [3, 4], {"batch.size": "10"})
    assert sorted((r["id"], r["name"], r["tier"]) for r in got) == [
        (3, "n3", None),
        (3, "n3", None),
        (4, "n4", None),
        (4, "n4", None),
    ]


def test_a_value_that_does_not_fit_fails_its_key_only() -> None:
    async def answer(keys: list[int]) -> pa.Table:
        return pa.table({"id": keys, "name": ["a"] * len(keys), "tier": ["1", "x"][: len(keys)]})

    got = run(LookupFunction.of(fetch_many=answer), [1, 2], {"on.error": "column"})
    assert got[0]["tier"] == 1 and got[0]["_lookup_error"] is None
    assert got[1]["tier"] is None and "key 2" in got[1]["_lookup_error"]


def test_composite_keys_in_columns() -> None:
    async def answer(keys: list[tuple[str, int]]) -> pa.Table:
        return pa.table(
            {
                "g": [k[0] for k in keys],
                "n": [k[1] for k in keys],
                "v": [f"{k[0]}{k[1]}" for k in keys],
            }
        )

    got = run(
        LookupFunction.of(fetch_many=answer),
        [("a", 1), ("b", 2), None],
        {"key.column": "g,n"},
        schema="g string, n long, v string",
    )
    assert [r["v"] for r in got] == ["a1", "b2", None]


def test_an_answer_without_its_keys_fails_naming_the_column() -> None:
    async def no_keys(keys: list[int]) -> pa.Table:
        return pa.table({"name": ["a"] * len(keys)})

    with pytest.raises(LookupFailedError, match="without the key column 'id'"):
        run(LookupFunction.of(fetch_many=no_keys), [1, 2])

    async def odd_keys(keys: list[int]) -> pa.Table:
        return pa.table({"id": [datetime.date(2024, 1, 1)] * len(keys)})

    with pytest.raises(LookupFailedError, match="cannot be compared"):
        run(LookupFunction.of(fetch_many=odd_keys), [1])

    async def twice(keys: list[int]) -> pa.Table:
        return pa.Table.from_arrays([pa.array(keys), pa.array(keys)], names=["id", "id"])

    with pytest.raises(LookupFailedError, match="key column 'id' 2 times"):
        run(LookupFunction.of(fetch_many=twice), [1])


def test_fetch_may_answer_one_key_with_a_table_of_its_matches() -> None:
    async def fetch(key: int) -> pa.Table | None:
        if key > 50:
            return None
        return pa.table({"name": [f"a{key}", f"b{key}"], "tier": [1, 2]})

    got = run(LookupFunction.of(fetch=fetch), [3, 60], schema=SCHEMA)
    assert [(r["id"], r["name"], r["tier"]) for r in got] == [
        (3, "a3", 1),
        (3, "b3", 2),
        (60, None, None),
    ]


def test_arrow_to_matches_directly() -> None:
    keys = pa.RecordBatch.from_pydict({"id": pa.array([10, 20, 30], pa.int64())})
    fields = [pa.field("name", pa.string())]
    answer = pa.table({"id": [30, 10, 40], "name": ["c", "a", "d"]})
    matches = arrow_to_matches(answer, keys, fields, what="f")
    assert matches.key_index.tolist() == [2, 0]
    assert matches.values.column(0).to_pylist() == ["c", "a"]
    empty = arrow_to_matches(answer.slice(0, 0), keys, fields, what="f")
    assert empty.num_rows == 0


def test_matches_put_together_and_taken_apart_keep_keys_values_and_errors() -> None:
    from lookup_source.connector_api import Matches

    fields = [pa.field("name", pa.string())]
    found = Matches([0, 2], pa.record_batch({"name": ["Ada", "Bob"]}))
    failing = Matches(
        [1, 1], pa.record_batch({"name": [None, "Cy"]}), pa.array(["bad value", None])
    )
    empty = Matches.none(fields)
    both = Matches.concat([found, empty, failing], fields)
    assert both.key_index.tolist() == [0, 2, 1, 1]
    assert both.values.column("name").to_pylist() == ["Ada", "Bob", None, "Cy"]
    assert both.errors is not None and both.errors.to_pylist() == [None, None, "bad value", None]
    assert Matches.concat([empty, found], fields) is found  # one part with rows: itself
    nothing = Matches.concat([], fields)
    assert nothing.num_rows == 0 and nothing.values.schema.names == ["name"]
    taken = both.rows(np.array([3, 0]))
    assert taken.key_index.tolist() == [1, 0]
    assert taken.values.column("name").to_pylist() == ["Cy", "Ada"]
    assert taken.errors is not None and taken.errors.to_pylist() == [None, None]
    renamed = both.rows(np.array([1]), key_index=np.array([7, 8, 9, 9]))
    assert renamed.key_index.tolist() == [8] and renamed.values.column("name").to_pylist() == [
        "Bob"
    ]
