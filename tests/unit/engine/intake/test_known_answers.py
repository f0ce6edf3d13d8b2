"""What a task knows of a batch's keys before asking the store (:class:`KnownAnswers`): the
worker's cache answers what it holds (hits, misses and known-missing keys counted), then the
shared tier answers some of the rest (and the cache keeps what it gave); the positions left are
what the store is asked; the output queue hears which keys have their answer; and what the store
answered is kept by both."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from lookup_source.engine.intake.batches import BatchEntry
from lookup_source.engine.intake.known_answers import KnownAnswers
from lookup_source.engine.kept.cache import PartialCache
from lookup_source.engine.kept.cache_layer import PartialCacheLayer
from lookup_source.engine.kept.identity import LookupIdentity
from lookup_source.engine.kept.shared_cache import SharedTier
from lookup_source.engine.metrics import LookupMetrics
from lookup_source.engine.output.queue import KeyOrderedQueue
from lookup_source.engine.request.answers import MISSING, RecordAnswer, gather
from lookup_source.testing.clock import VirtualTimeLoop
from tests.fakes import key_batch, make_config, make_options, make_spec

SPEC = make_spec(make_options())
FIELDS = list(SPEC.value_fields)


class MemoryStore:
    """A shared tier's store in a dict: bytes in, bytes out."""

    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}
        self.reads: list[int] = []

    async def lookup(self, keys: Sequence[Any]) -> Mapping[Any, Any]:
        self.reads.append(len(keys))
        return {key: self.data[key] for key in keys if key in self.data}

    async def store(self, items: Sequence[tuple[bytes, bytes]], ttl_s: float) -> None:
        self.data.update(items)


def tier(store: MemoryStore, metrics: LookupMetrics) -> SharedTier:
    return SharedTier(
        store,  # type: ignore[arg-type]  # (duck-typed: lookup and store)
        LookupIdentity.of(make_config(SPEC)),
        FIELDS,
        metrics,
        ttl_s=60.0,
        timeout_s=1.0,
        cache_missing=False,
        max_value_bytes=1 << 16,
    )


def cache_layer(entries: Sequence[tuple[Any, Any]] = ()) -> PartialCacheLayer:
    cache = PartialCache(max_rows=100)
    cache.put_many(entries)
    return PartialCacheLayer(cache, FIELDS, cache_missing=True)


def entry(keys: Sequence[Any]) -> BatchEntry:
    return BatchEntry.of(0, key_batch(list(keys)), SPEC, ["k"])


def rows(job: BatchEntry) -> dict[int, list[dict[str, Any]]]:
    """The values gathered by ``job``, by its key position."""
    matches = gather(job.parts, FIELDS)
    out: dict[int, list[dict[str, Any]]] = {}
    for position, value in zip(matches.key_index.tolist(), matches.values.to_pylist()):
        out.setdefault(position, []).append(value)
    return out


def released(queue: KeyOrderedQueue) -> list[list[int]]:
    out = []
    for release in queue.pop_ready():
        assert release.positions is not None
        out.append(release.positions.tolist())
    return out


def run(coroutine: Any) -> Any:
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(coroutine)
    finally:
        loop.close()


def test_without_a_cache_every_key_is_to_fetch() -> None:
    metrics, queue = LookupMetrics(), KeyOrderedQueue()
    known = KnownAnswers(None, None, metrics, queue)
    job = entry([5, 6, 5, None])
    queue.put(job)
    queue.pop_ready()
    assert known.from_cache(job).tolist() == [0, 1]
    assert job.parts == [] and metrics.cache_hits == 0 and metrics.cache_misses == 0
    assert not queue.has_ready()


def test_the_cache_answers_what_it_holds() -> None:
    metrics, queue = LookupMetrics(), KeyOrderedQueue()
    cache = cache_layer([(1, {"name": "one", "n": 1}), (3, MISSING)])
    known = KnownAnswers(cache, None, metrics, queue)
    job = entry([1, 2, 3, 4, 1])  # 1, 2, 3, 4 at 0, 1, 2, 3
    queue.put(job)
    queue.pop_ready()
    wanted = known.from_cache(job)
    assert wanted.tolist() == [1, 3]
    assert rows(job) == {0: [{"name": "one", "n": 1}]}  # (3 is known to be missing: no row)
    assert (metrics.cache_hits, metrics.cache_misses, metrics.missing_keys) == (2, 2, 1)
    assert released(queue) == [[0, 2]]  # the keys it knew have their answer


def test_a_batch_without_keys_asks_nothing_of_the_cache() -> None:
    metrics, queue = LookupMetrics(), KeyOrderedQueue()
    known = KnownAnswers(cache_layer([(1, {"name": "one", "n": 1})]), None, metrics, queue)
    job = entry([None, None])
    assert known.from_cache(job).tolist() == []
    assert metrics.cache_hits == metrics.cache_misses == 0


def test_the_cache_keeps_what_the_store_answered() -> None:
    metrics, queue = LookupMetrics(), KeyOrderedQueue()
    cache = cache_layer()
    known = KnownAnswers(cache, None, metrics, queue)
    known.keep(RecordAnswer([{"name": "seven", "n": 7}, None], [7, 8], FIELDS))
    job = entry([7, 8, 9])
    assert known.from_cache(job).tolist() == [2]  # 8: kept as missing (cache_missing)
    assert rows(job) == {0: [{"name": "seven", "n": 7}]}
    assert (metrics.cache_hits, metrics.cache_misses, metrics.missing_keys) == (2, 1, 1)


def test_without_a_shared_tier_the_wanted_keys_stay_wanted() -> None:
    known = KnownAnswers(None, None, LookupMetrics(), KeyOrderedQueue())
    wanted = np.array([0, 2])
    assert run(known.from_shared(entry([1, 2, 3]), wanted)) is wanted


def test_the_shared_tier_answers_some_wanted_keys_and_the_cache_keeps_them() -> None:
    store = MemoryStore()

    async def scenario() -> None:
        writer = tier(store, LookupMetrics())  # another task's tier wrote key 20
        writer.store(RecordAnswer([{"name": "twenty", "n": 20}, None], [20, 30], FIELDS))
        await writer.aclose(flush=True)
        assert len(store.data) == 1  # (a miss is not shared: cache_missing=False)

        metrics, queue, cache = LookupMetrics(), KeyOrderedQueue(), cache_layer()
        shared = tier(store, metrics)
        known = KnownAnswers(cache, shared, metrics, queue)
        job = entry([10, 20, 30, 40])  # 10, 20, 30, 40 at 0, 1, 2, 3
        queue.put(job)
        queue.pop_ready()
        wanted = known.from_cache(job)
        assert wanted.tolist() == [0, 1, 2, 3]
        still = await known.from_shared(job, np.array([1, 2, 3]))  # (10 was shared meanwhile)
        assert still.tolist() == [2, 3]
        assert store.reads == [3]
        assert rows(job) == {1: [{"name": "twenty", "n": 20}]}  # at the batch's position
        assert (metrics.shared_hits, metrics.shared_misses) == (1, 2)
        assert released(queue) == [[1]]
        again = entry([20, 30])
        assert known.from_cache(again).tolist() == [1]  # the worker's cache kept 20
        assert rows(again) == {0: [{"name": "twenty", "n": 20}]}
        await known.aclose(flush=True)

    run(scenario())


def test_nothing_wanted_asks_nothing_of_the_shared_tier() -> None:
    store = MemoryStore()

    async def scenario() -> None:
        known = KnownAnswers(None, tier(store, LookupMetrics()), LookupMetrics(), KeyOrderedQueue())
        still = await known.from_shared(entry([1]), np.zeros(0, dtype=np.int64))
        assert still.tolist() == []
        assert store.reads == []

    run(scenario())


def test_keep_writes_the_answer_to_the_cache_and_the_tier() -> None:
    store = MemoryStore()

    async def scenario() -> None:
        metrics = LookupMetrics()
        cache = cache_layer()
        known = KnownAnswers(cache, tier(store, metrics), metrics, KeyOrderedQueue())
        known.keep(RecordAnswer([{"name": "one", "n": 1}], [1], FIELDS))
        await known.aclose(flush=True)
        assert len(store.data) == 1
        assert cache.cache.get_many([1]) == {1: {"name": "one", "n": 1}}

    run(scenario())


def test_closing_without_a_flush_drops_the_pending_writes() -> None:
    store = MemoryStore()

    async def scenario() -> None:
        known = KnownAnswers(None, tier(store, LookupMetrics()), LookupMetrics(), KeyOrderedQueue())
        known.keep(RecordAnswer([{"name": "one", "n": 1}], [1], FIELDS))
        await known.aclose(flush=False)  # a failed task: the write is cancelled
        assert store.data == {}

    run(scenario())


def test_without_cache_or_tier_keep_and_close_do_nothing() -> None:
    known = KnownAnswers(None, None, LookupMetrics(), KeyOrderedQueue())
    known.keep(RecordAnswer([{"name": "one", "n": 1}], [1], FIELDS))
    run(known.aclose(flush=True))
    assert known.cache is None and known.shared is None


def test_the_answers_are_in_the_value_schema() -> None:
    cache = cache_layer([(1, {"name": "one", "n": 1})])
    known = KnownAnswers(cache, None, LookupMetrics(), KeyOrderedQueue())
    job = entry([1])
    known.from_cache(job)
    assert gather(job.parts, FIELDS).values.schema == pa.schema(FIELDS)
