"""What the engine sees of a cache (lookup_source.engine.kept.cache_layer): which of a batch's
keys it still has to fetch, the hits as answers at the batch's positions, and the counts; a
reading layer keeps nothing, a partial cache's layer keeps what the store answered (within a
shorter time to live when asked) and says it grew."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from lookup_source.engine.kept.cache import FullCache, PartialCache
from lookup_source.engine.kept.cache_layer import (
    CacheAnswer,
    PartialCacheLayer,
    ReadingLayer,
    known_answer,
)
from lookup_source.engine.kept.cached_rows import MISSING, CachedError, CachedRows
from lookup_source.engine.request.answers import RecordAnswer, gather

FIELDS = [pa.field("name", pa.string()), pa.field("n", pa.int64())]


def gathered(answer: CacheAnswer) -> list[tuple[int, str | None, str | None]]:
    """The hits of ``answer``: (the batch's key position, name, error), by position."""
    matches = gather(answer.parts, FIELDS)
    names = matches.values.column("name").to_pylist()
    errors = matches.errors.to_pylist() if matches.errors is not None else [None] * len(names)
    return sorted(zip(matches.key_index.tolist(), names, errors))


def test_a_cache_that_knows_nothing_wants_every_key() -> None:
    answer = known_answer(["a", "b", "c"], {}, FIELDS)
    assert answer.wanted.tolist() == [0, 1, 2] and answer.wanted.dtype == np.int64
    assert (answer.hits, answer.misses, answer.missing, answer.parts) == (0, 3, 0, [])
    assert answer.ttl_s is None


def test_hits_of_every_kind_are_placed_at_their_positions() -> None:
    segment = pa.record_batch({"name": ["x", "c1", "c2"], "n": [0, 1, 2]})
    keys = ["record", "gone", "rows", "unknown", "bad"]
    known: dict[Any, Any] = {
        "record": {"name": "r", "n": 7},
        "gone": MISSING,
        "rows": CachedRows(segment, 1, 2),
        "bad": CachedError("a malformed value"),
    }
    answer = known_answer(keys, known, FIELDS)
    assert answer.wanted.tolist() == [3]  # only the key the cache does not hold
    assert (answer.hits, answer.misses, answer.missing) == (4, 1, 1)
    assert len(answer.parts) == 2  # the columnar hits, the records
    assert gathered(answer) == [
        (0, "r", None),
        (2, "c1", None),
        (2, "c2", None),
        (4, None, "key 'bad': a malformed value"),
    ]


def test_a_reading_layer_answers_from_its_cache_and_keeps_nothing() -> None:
    full = FullCache(0.0)
    full.install({1: CachedRows(pa.record_batch({"name": ["one"], "n": [1]}), 0, 1)})
    layer = ReadingLayer(full, FIELDS)
    empty = layer.lookup([])
    assert empty.wanted.tolist() == [] and empty.hits == empty.misses == 0
    answer = layer.lookup([1, 2])  # a full cache holds the whole table: 2 is missing
    assert answer.wanted.tolist() == [] and (answer.hits, answer.missing) == (2, 1)
    assert gathered(answer) == [(0, "one", None)]
    layer.store(RecordAnswer([{"name": "two", "n": 2}], [2], FIELDS))
    assert full.get_many([2])[2] is MISSING  # nothing kept


def test_a_partial_layer_keeps_what_the_store_answered_and_says_it_grew() -> None:
    now = [0.0]
    grew: list[int] = []
    cache = PartialCache(10, ttl_s=60.0, clock=lambda: now[0])
    layer = PartialCacheLayer(cache, FIELDS, cache_missing=True, grew=lambda: grew.append(1))
    assert layer.lookup([1]).wanted.tolist() == [0]
    layer.store(RecordAnswer([{"name": "one", "n": 1}, None], [1, 2], FIELDS))
    assert grew == [1] and len(cache) == 2
    answer = layer.lookup([1, 2, 3])
    assert answer.wanted.tolist() == [2] and (answer.hits, answer.missing) == (2, 1)
    assert gathered(answer) == [(0, "one", None)]
    now[0] = 60.0  # the cache's own time to live
    assert layer.lookup([1, 2]).wanted.tolist() == [0, 1]


def test_a_partial_layer_keeps_an_answer_no_longer_than_it_may() -> None:
    now = [0.0]
    cache = PartialCache(10, ttl_s=60.0, clock=lambda: now[0])
    layer = PartialCacheLayer(cache, FIELDS, cache_missing=False)
    layer.store(RecordAnswer([{"name": "one", "n": 1}, None], [1, 2], FIELDS), ttl_s=5.0)
    assert len(cache) == 1  # a missing key left out when missing keys are not cached
    now[0] = 4.9
    assert layer.lookup([1]).hits == 1
    now[0] = 5.0  # the shorter time to live the answer had left
    assert layer.lookup([1]).wanted.tolist() == [0]


def test_a_partial_layer_with_nothing_to_keep_does_not_grow() -> None:
    grew: list[int] = []
    cache = PartialCache(10)
    layer = PartialCacheLayer(cache, FIELDS, cache_missing=False, grew=lambda: grew.append(1))
    layer.store(RecordAnswer([None, []], [1, 2], FIELDS))
    assert len(cache) == 0 and grew == []
