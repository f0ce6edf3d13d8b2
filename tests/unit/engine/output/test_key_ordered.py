"""output.mode=key-ordered: the rows of one key leave in input order, rows of other keys are not
held back by a slow key, and the rows are those of ``ordered`` (Flink's FLIP-519)."""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookup_source.engine.kept.worker import forget_worker
from lookup_source.engine.runner import run_lookups
from lookup_source.errors import PermanentError
from lookup_source.settings import CacheSettings
from lookup_source.testing.clock import VirtualTimeLoop
from tests.fakes import (
    FakeClient,
    FakeColumnarClient,
    FakeStore,
    key_batch,
    looked_up,
    make_config,
    make_options,
    make_spec,
)

TABLE = {i: {"name": f"user-{i}", "n": i} for i in range(50)}


def run(spec: Any, batches: list[pa.RecordBatch], store: FakeStore, client: Any = FakeClient):
    return looked_up(batches, spec, store, client)


def by_key(rows: list[dict[str, Any]], key: str = "k") -> dict[Any, list[int]]:
    order: dict[Any, list[int]] = defaultdict(list)
    for row in rows:
        order[row[key]].append(row["row"])
    return order


def batches_of(keys: list[Any], size: int, first_row: int = 0) -> list[pa.RecordBatch]:
    """``keys`` in batches of ``size`` rows, numbered from ``first_row`` (column ``row``)."""
    out = []
    for start in range(0, len(keys), size):
        batch = key_batch(keys[start : start + size])
        rows = pa.array(range(first_row + start, first_row + start + batch.num_rows), pa.int64())
        out.append(batch.set_column(1, "row", rows))
    return out


@pytest.mark.parametrize("client", [FakeClient, FakeColumnarClient])
def test_a_slow_key_holds_back_its_own_rows_only(client: Any) -> None:
    store = FakeStore(TABLE)
    store.latency = lambda keys: 0.3 if 0 in keys else 0.002
    spec = make_spec(make_options(capacity=20, batch_size=1, output_mode="key-ordered"))
    keys = [0, 1, 2, 0, 3, 4, 0, 5, 1, 6]  # one batch: the slow key first, and again later
    rows = run(spec, [key_batch(keys)], store, client)
    assert [r["k"] for r in rows][-3:] == [0, 0, 0]  # every other key passed it
    assert by_key(rows)[0] == [0, 3, 6]  # its own rows in input order
    assert by_key(rows)[1] == [1, 8]
    assert sorted(r["row"] for r in rows) == list(range(len(keys)))
    assert all(r["name"] == f"user-{r['k']}" for r in rows)


def test_the_order_of_one_key_holds_across_batches() -> None:
    store = FakeStore(TABLE)
    store.latency = lambda keys: 0.2 if 7 in keys else 0.001
    spec = make_spec(make_options(capacity=50, batch_size=2, output_mode="key-ordered"))
    keys = [7, 1, 2, 3, 7, 4, 5, 6, 8, 7, 9, 10]
    rows = run(spec, batches_of(keys, 4), store)
    assert by_key(rows)[7] == [0, 4, 9]
    assert [r["k"] for r in rows].index(7) > [r["k"] for r in rows].index(10)
    assert sorted(r["row"] for r in rows) == list(range(len(keys)))


@settings(max_examples=25, deadline=None)
@given(
    keys=st.lists(st.one_of(st.none(), st.integers(0, 60)), min_size=1, max_size=120),
    batch_rows=st.integers(1, 40),
    batch_size=st.integers(1, 7),
    how=st.sampled_from(["left", "inner"]),
    seed=st.integers(0, 1000),
)
def test_same_rows_as_ordered_and_each_key_in_input_order(
    keys: list[int | None], batch_rows: int, batch_size: int, how: str, seed: int
) -> None:
    rng = random.Random(seed)
    delays = {k: rng.choice([0.0, 0.0, 0.001, 0.01]) for k in range(61)}
    outputs = {}
    for mode in ("ordered", "key-ordered"):
        store = FakeStore(TABLE)
        store.latency = lambda asked: max(delays[k] for k in asked)
        spec = make_spec(make_options(capacity=5, batch_size=batch_size, output_mode=mode), how=how)
        outputs[mode] = run(spec, batches_of(keys, batch_rows), store)
    ordered, keyed = outputs["ordered"], outputs["key-ordered"]
    assert sorted(ordered, key=lambda r: r["row"]) == sorted(keyed, key=lambda r: r["row"])
    for key, rows in by_key(keyed).items():
        assert rows == sorted(rows), key  # (a null key's rows too)


def test_composite_keys_one_to_many_and_nulls() -> None:
    table = {
        ("a", 1): [{"name": "a1-x", "n": 1}, {"name": "a1-y", "n": 2}],
        ("b", 2): {"name": "b2", "n": 3},
    }
    store = FakeStore(table)
    store.latency = lambda keys: 0.2 if ("a", 1) in keys else 0.001
    spec = make_spec(
        make_options(capacity=10, batch_size=1, output_mode="key-ordered"),
        key_columns=("t", "u"),
    )
    batch = pa.RecordBatch.from_pydict(
        {
            "t": ["a", "b", None, "a", "c"],
            "u": [1, 2, 5, 1, 3],
            "row": [0, 1, 2, 3, 4],
        }
    )
    rows = run(spec, [batch], store)
    pairs = [(r["row"], r["name"]) for r in rows]
    assert pairs[0] == (2, None)  # a null part: never asked, leaves at once
    assert set(pairs[1:3]) == {(1, "b2"), (4, None)}  # (4: missing)
    assert pairs[3:] == [(0, "a1-x"), (0, "a1-y"), (3, "a1-x"), (3, "a1-y")]


def test_failures_cache_hits_and_max_matches_under_key_order() -> None:
    table: dict[Any, Any] = dict(TABLE)
    table[9] = [{"name": "many", "n": i} for i in range(3)]
    store = FakeStore(table)
    store.fail_keys[4] = PermanentError("refused")
    store.latency = lambda keys: 0.1 if 2 in keys else 0.001
    spec = make_spec(
        make_options(
            capacity=10,
            batch_size=1,
            output_mode="key-ordered",
            on_error="column",
            max_matches=2,
            cache=CacheSettings(max_rows=100),
        )
    )
    config = make_config(spec)
    forget_worker()
    for run_number in range(2):  # the second run is answered by the worker's cache
        metrics: list[Any] = []
        out = run_lookups(
            batches_of([1, 2, 4, 9, 1], 5) + batches_of([1, 2, 3], 3, first_row=5),
            spec,
            config,
            client_factory=lambda c: FakeClient(c, store),
            on_metrics=metrics.append,
            loop_factory=VirtualTimeLoop,
        )
        rows = [row for batch in out for row in batch.to_pylist()]
        errors = {r["k"]: r["_lookup_error"] for r in rows}
        assert errors[1] is None and errors[2] is None and errors[3] is None
        assert "refused" in errors[4] and "more than lookup.max-matches=2" in errors[9]
        assert by_key(rows)[2] == [1, 6] and by_key(rows)[1] == [0, 4, 5]
        assert sorted(r["row"] for r in rows) == list(range(8))
        assert metrics[0].failed_keys == 2
        if run_number == 0:
            assert [r["k"] for r in rows].index(2) > [r["k"] for r in rows].index(9)
        else:
            assert metrics[0].cache_hits == 6  # 1, 2, 9, then 1, 2, 3 (4 failed: not cached)
    forget_worker()


def test_composite_keys_keep_their_order_when_an_earlier_batch_holds_one() -> None:
    """A composite key held by an earlier, slower batch holds back its own rows in a later
    batch (the held keys were a table's chunked columns, which the match refused: the task
    failed on any composite key held back)."""
    store = FakeStore({(k, k % 2): {"name": f"user-{k}", "n": k} for k in range(10)})
    store.latency = lambda keys: 0.5 if (1, 1) in keys else 0.01  # the first batch is slow
    spec = make_spec(make_options(output_mode="key-ordered", batch_size=2), key_columns=("k", "p"))
    batches = [
        pa.record_batch(
            {
                "k": pa.array(keys, pa.int64()),
                "p": pa.array([k % 2 for k in keys], pa.int64()),
                "row": pa.array(rows, pa.int64()),
            }
        )
        for keys, rows in (([1, 2], [0, 1]), ([1, 3], [2, 3]))
    ]
    rows = run(spec, batches, store, FakeColumnarClient)
    assert sorted(r["row"] for r in rows) == [0, 1, 2, 3]
    assert by_key(rows)[1] == [0, 2]  # key (1, 1): the first batch's row leaves first
    assert [r["name"] for r in rows if r["k"] == 1] == ["user-1", "user-1"]
