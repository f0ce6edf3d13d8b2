"""The columnar engine: Arrow answers, one-to-many joins, shared in-flight requests.

Every test runs the engine over an in-process fake store; the record form and the columnar
form of the same answers must give the same rows.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from lookup_source.connector_api import Matches
from lookup_source.connector_api.keys import encode_rows, match_rows, python_keys
from lookup_source.engine.intake.keys import distinct_keys
from lookup_source.engine.lookup_engine import LookupEngine
from lookup_source.engine.output.joined_rows import JoinedRows
from lookup_source.errors import LookupFailedError, PermanentError, RecordError
from lookup_source.redaction import Redactor
from lookup_source.testing import clock as virtual_time
from tests.fakes import (
    FakeClient,
    FakeColumnarClient,
    FakeStore,
    flat,
    key_batch,
    looked_up,
    make_config,
    make_options,
    make_spec,
)

CLIENTS = {"record": FakeClient, "columnar": FakeColumnarClient}


def joined(*args: Any, **kwargs: Any) -> pa.RecordBatch:
    return JoinedRows(*args, **kwargs).whole()


def run(spec: Any, batches: list[pa.RecordBatch], store: FakeStore, form: str) -> list[dict]:
    return looked_up(batches, spec, store, CLIENTS[form])


@pytest.mark.parametrize("how", ["left", "inner"])
@pytest.mark.parametrize("mode", ["ordered", "unordered"])
def test_columnar_and_record_forms_give_the_same_rows(how: str, mode: str) -> None:
    rng = random.Random(3)
    table = {i: {"name": f"user-{i}", "n": i * 3} for i in range(0, 300, 2)}
    keys = [rng.choice([*range(400), None]) for _ in range(2_000)]
    batches = [key_batch(keys[i : i + 250]) for i in range(0, 2_000, 250)]
    spec = make_spec(make_options(capacity=4, batch_size=17, output_mode=mode), how=how)
    record = run(spec, batches, FakeStore(table), "record")
    columnar = run(spec, batches, FakeStore(table), "columnar")
    assert sorted(record, key=repr) == sorted(columnar, key=repr)
    expected = [k for k in keys if how == "left" or k in table]
    assert sorted(r["k"] for r in columnar if r["k"] is not None) == sorted(
        k for k in expected if k is not None
    )
    for row in columnar:
        found = table.get(row["k"])
        assert row["name"] == (found["name"] if found else None)
        assert row["n"] == (found["n"] if found else None)
    if mode == "ordered":
        assert [r["k"] for r in columnar] == expected


@pytest.mark.parametrize("form", ["record", "columnar"])
@pytest.mark.parametrize("how", ["left", "inner"])
def test_one_key_with_several_matches_gives_one_row_per_match(form: str, how: str) -> None:
    table = {
        1: [{"name": "a", "n": 1}, {"name": "b", "n": 2}, {"name": "c", "n": 3}],
        2: {"name": "only", "n": 20},
        3: [],  # a list with no record: no match
    }
    store = FakeStore(table)
    spec = make_spec(make_options(batch_size=2), how=how)
    out = run(spec, [key_batch([2, 1, 9, None, 3, 1])], store, form)
    rows = [(r["row"], r["k"], r["name"]) for r in out]
    matched = [
        (0, 2, "only"),
        (1, 1, "a"),
        (1, 1, "b"),
        (1, 1, "c"),
        (5, 1, "a"),
        (5, 1, "b"),
        (5, 1, "c"),
    ]
    if how == "inner":
        assert rows == matched
    else:  # every input row stays, in order, the unmatched ones with nulls
        assert rows == [*matched[:4], (2, 9, None), (3, None, None), (4, 3, None), *matched[4:]]


@pytest.mark.parametrize("form", ["record", "columnar"])
def test_a_key_with_a_malformed_match_fails_as_one_row(form: str) -> None:
    store = FakeStore(
        {1: [{"name": "fine", "n": 1}, RecordError("broken"), {"name": "also", "n": 2}]}
    )
    spec = make_spec(make_options(on_error="column"), how="inner")
    out = run(spec, [key_batch([1, 1])], store, form)
    assert [(r["k"], r["name"], r["n"]) for r in out] == [(1, None, None), (1, None, None)]
    assert all(r["_lookup_error"] == "key 1: broken" for r in out)
    with pytest.raises(LookupFailedError, match="key 1: broken"):
        run(make_spec(make_options()), [key_batch([1])], store, form)


def test_columnar_values_are_converted_to_the_declared_types_or_reported() -> None:
    store = FakeStore({1: {"name": "a", "n": 5}, 2: {"name": "b", "n": 2**40}})
    spec = make_spec(
        make_options(on_error="column"), values=(("name", pa.string()), ("n", pa.int8()))
    )
    out = {r["k"]: r for r in run(spec, [key_batch([1, 2])], store, "columnar")}
    assert out[1]["n"] == 5 and out[1]["_lookup_error"] is None
    assert out[2]["n"] is None and out[2]["name"] is None
    assert out[2]["_lookup_error"].startswith("key 2: column 'n' expects tinyint")


@pytest.mark.parametrize("form", ["record", "columnar"])
def test_a_key_in_flight_for_an_earlier_batch_is_not_asked_again(form: str) -> None:
    table = {i: {"name": f"user-{i}", "n": i} for i in range(100)}
    store = FakeStore(table)
    store.latency = lambda keys: 0.2 if 1 in keys else 0.0
    spec = make_spec(make_options(capacity=10, batch_size=50))
    client = CLIENTS[form](make_config(spec), store)

    async def drive() -> list[pa.RecordBatch]:
        engine = LookupEngine(client, spec, redact=Redactor())
        out = flat(await engine.submit(key_batch([1, 2, 3])))
        out += flat(await engine.submit(key_batch([3, 4, 1, 1])))  # 1 and 3 are in flight
        out += flat(await engine.finish())
        stats.append(engine.metrics)
        return out

    stats: list[Any] = []
    out = virtual_time.run(drive())
    rows = [(r["k"], r["name"]) for b in out for r in b.to_pylist()]
    assert rows == [(k, f"user-{k}") for k in [1, 2, 3, 3, 4, 1, 1]]
    assert sorted(k for request in store.requests for k in request) == [1, 2, 3, 4]
    assert stats[0].shared_keys == 2 and stats[0].keys == 6 and stats[0].requests == 2


@pytest.mark.parametrize("on_error", ["column", "fail"])
def test_a_shared_request_that_fails_fails_for_every_batch_sharing_it(on_error: str) -> None:
    store = FakeStore({i: {"name": f"u{i}", "n": i} for i in range(10)})
    store.latency = lambda keys: 0.1 if 1 in keys else 0.0
    store.fail_keys = {1: PermanentError("boom")}
    spec = make_spec(make_options(on_error=on_error, capacity=10, batch_size=5))

    async def drive() -> list[pa.RecordBatch]:
        engine = LookupEngine(FakeColumnarClient(make_config(spec), store), spec, redact=Redactor())
        try:
            out = flat(await engine.submit(key_batch([1, 2])))
            out += flat(await engine.submit(key_batch([5, 1])))
            return out + flat(await engine.finish())
        finally:
            await engine.aclose()

    if on_error == "fail":
        with pytest.raises(LookupFailedError, match="boom"):
            virtual_time.run(drive())
        return
    rows = [r for b in virtual_time.run(drive()) for r in b.to_pylist()]
    assert [(r["k"], r["name"]) for r in rows] == [(1, None), (2, None), (5, "u5"), (1, None)]
    errors = [r["_lookup_error"] for r in rows]
    assert (
        errors[0] == errors[1] == errors[3] == "fake-columnar lookup failed: PermanentError: boom"
    )
    assert errors[2] is None


@pytest.mark.parametrize("form", ["record", "columnar"])
def test_cache_serves_one_to_many_and_misses_without_a_request(form: str) -> None:
    from lookup_source.engine.kept.cache import PartialCache
    from lookup_source.engine.kept.cache_layer import PartialCacheLayer

    store = FakeStore({1: [{"name": "a", "n": 1}, {"name": "b", "n": 2}], 2: {"name": "c", "n": 3}})
    spec = make_spec(make_options(batch_size=10))
    cache = PartialCacheLayer(PartialCache(max_rows=100), spec.value_fields, cache_missing=True)
    config = make_config(spec)
    client = CLIENTS[form](config, store)

    async def drive(keys: list[Any]) -> list[tuple[Any, ...]]:
        engine = LookupEngine(client, spec, cache=cache, redact=Redactor())
        out = flat(await engine.submit(key_batch(keys))) + flat(await engine.finish())
        return [(r["k"], r["name"]) for b in out for r in b.to_pylist()]

    first = virtual_time.run(drive([1, 2, 3]))
    again = virtual_time.run(drive([3, 2, 1]))
    assert first == [(1, "a"), (1, "b"), (2, "c"), (3, None)]
    assert again == [(3, None), (2, "c"), (1, "a"), (1, "b")]
    assert len(store.requests) == 1  # the second batch was answered by the cache alone


def test_join_matches_edge_cases() -> None:
    fields = [pa.field("v", pa.string())]
    none = Matches.none(fields)
    empty = pa.record_batch({"k": pa.array([], pa.int64())})
    out = joined(
        empty, pa.array([], pa.int32()), 0, none, how="left", error_column=None, fields=fields
    )
    assert out.num_rows == 0 and out.schema.names == ["k", "v"]
    nulls = pa.record_batch({"k": pa.array([None, None], pa.int64())})
    indices = pa.array([None, None], pa.int32())
    left = joined(nulls, indices, 0, none, how="left", error_column="e", fields=fields)
    assert left.to_pylist() == [{"k": None, "v": None, "e": None}] * 2
    inner = joined(nulls, indices, 0, none, how="inner", error_column=None, fields=fields)
    assert inner.num_rows == 0


def test_distinct_composite_keys_and_matching() -> None:
    tenant = pa.array(["a", "b", "a", None, "a", "b"])
    user = pa.array([1, 1, 1, 1, 2, 1])
    distinct = distinct_keys([tenant, user], ["t", "u"])
    assert sorted(python_keys(distinct.keys)) == [("a", 1), ("a", 2), ("b", 1)]
    keys = python_keys(distinct.keys)
    per_row = [None if i is None else keys[i] for i in distinct.indices.to_pylist()]
    assert per_row == [("a", 1), ("b", 1), ("a", 1), None, ("a", 2), ("b", 1)]
    codes = encode_rows([tenant, user])
    assert codes[0] == codes[2] and codes[1] == codes[5] and codes[3] == -1
    found = match_rows(
        [pa.array(["b", "a", "z"]), pa.array([1, 2, 1])], [pa.array(["a", "b"]), pa.array([2, 1])]
    )
    assert found.tolist() == [1, 0, -1]
    assert match_rows([pa.array([3, 1, 7])], [pa.array([1, 2, 3])]).tolist() == [2, 0, -1]


def test_matches_checks_its_lengths() -> None:
    with pytest.raises(ValueError, match="key_index has 1 entries for 2 rows"):
        Matches([0], pa.record_batch({"v": [1, 2]}))
    m = Matches(np.array([1, 0]), pa.record_batch({"v": [1, 2]}))
    assert m.key_index.dtype == np.int64 and m.num_rows == 2
