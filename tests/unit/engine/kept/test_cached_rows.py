"""What a cache keeps of a columnar answer (lookup_source.engine.kept.cached_rows): per key its
rows in one compact batch (``CachedRows``), ``MISSING`` for a key the store lacks when missing
keys are cached, and nothing for a key whose value was malformed."""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pytest

from lookup_source.connector_api import Matches
from lookup_source.engine.kept.cached_rows import MISSING, CachedError, CachedRows, cache_rows


def names(entry: CachedRows) -> list[str]:
    """The names of a cached key's rows."""
    rows = entry.values.slice(entry.start, entry.count)
    return rows.column("name").to_pylist()


def answer(index: list[int], values: list[str], errors: list[str | None] | None = None) -> Matches:
    return Matches(
        index,
        pa.record_batch({"name": pa.array(values, pa.string())}),
        None if errors is None else pa.array(errors, pa.string()),
    )


def test_each_key_with_matches_gets_its_rows_in_order_of_the_keys() -> None:
    keys = ["a", "b", "c"]
    matches = answer([2, 0, 2, 0], ["c1", "a1", "c2", "a2"])
    found = np.array([True, False, True])
    items = cache_rows(keys, matches, found, cache_missing=False)
    assert [key for key, _ in items] == ["a", "c"]
    (_, a), (_, c) = items
    assert isinstance(a, CachedRows) and isinstance(c, CachedRows)
    assert (a.start, a.count, c.start, c.count) == (0, 2, 2, 2)
    assert names(a) == ["a1", "a2"] and names(c) == ["c1", "c2"]  # each key's rows, in order
    assert a.values is c.values and a.values.num_rows == 4  # one compact batch for the answer


def test_keys_without_matches_are_cached_as_missing_only_when_asked() -> None:
    keys = [10, 20, 30]
    matches = answer([1], ["twenty"])
    found = np.array([False, True, False])
    without = cache_rows(keys, matches, found, cache_missing=False)
    assert [key for key, _ in without] == [20]
    with_missing = cache_rows(keys, matches, found, cache_missing=True)
    assert [key for key, _ in with_missing] == [20, 10, 30]
    assert [value is MISSING for _, value in with_missing] == [False, True, True]


def test_an_empty_answer_caches_nothing_or_every_key_as_missing() -> None:
    keys = [1, 2]
    empty = answer([], [])
    found = np.zeros(2, dtype=bool)
    assert cache_rows(keys, empty, found, cache_missing=False) == []
    assert cache_rows(keys, empty, found, cache_missing=True) == [(1, MISSING), (2, MISSING)]


def test_a_key_with_a_malformed_value_is_never_cached_nor_its_other_rows() -> None:
    keys = ["good", "bad", "other"]
    matches = answer([0, 1, 1, 2], ["g", "b1", "b2", "o"], [None, None, "not a number", None])
    found = np.array([True, True, True])
    items = cache_rows(keys, matches, found, cache_missing=True)
    assert [key for key, _ in items] == ["good", "other"]  # "bad" not even as missing
    (_, good), (_, other) = items
    assert names(good) == ["g"] and names(other) == ["o"]
    assert good.values.num_rows == 2  # the bad key's rows are not copied into the cache


def test_an_errors_column_of_nulls_rejects_nothing() -> None:
    keys = [1, 2]
    matches = answer([0, 1], ["one", "two"], [None, None])
    items = cache_rows(keys, matches, np.array([True, True]), cache_missing=False)
    assert [(key, names(value)) for key, value in items] == [(1, ["one"]), (2, ["two"])]


def test_a_cached_entry_is_immutable_and_rows_are_compared_by_identity() -> None:
    batch = pa.record_batch({"name": ["x"]})
    rows = CachedRows(batch, 0, 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        rows.start = 1  # type: ignore[misc]
    assert rows != CachedRows(batch, 0, 1) and rows == rows  # eq=False: by identity
    assert CachedError("bad") == CachedError("bad") != CachedError("worse")
    with pytest.raises(dataclasses.FrozenInstanceError):
        CachedError("bad").message = "fine"  # type: ignore[misc]
