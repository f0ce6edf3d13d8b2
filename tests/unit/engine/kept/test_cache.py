"""The lookup cache, retry on miss, and metrics, with the in-process fake store."""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import pyarrow as pa
import pytest

from lookup_source.engine.kept.cache import MISSING, FullCache, PartialCache
from lookup_source.engine.kept.worker import forget_worker
from lookup_source.engine.metrics import LookupMetrics
from lookup_source.engine.runner import run_lookups
from lookup_source.errors import LookupFailedError, OptionError
from lookup_source.settings import CacheSettings, parse_options
from lookup_source.spark.plan import LookupPlan
from tests.fakes import FakeClient, FakeStore, key_batch, make_config, make_options, make_spec

TABLE = {i: {"name": f"user-{i}", "n": i} for i in range(100)}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def fresh_caches() -> None:
    forget_worker()


def run(
    spec: Any, batches: list[Any], store: FakeStore, stats: list[LookupMetrics] | None = None
) -> list[dict[str, Any]]:
    out = run_lookups(
        batches,
        spec,
        make_config(spec),
        client_factory=lambda c: FakeClient(c, store),
        on_metrics=stats.append if stats is not None else None,
    )
    return [row for batch in out for row in batch.to_pylist()]


def cached(**cache: Any) -> Any:
    return make_options(cache=CacheSettings(**cache))


def test_partial_cache_lru_and_ttl() -> None:
    clock = Clock()
    cache = PartialCache(max_rows=2, ttl_s=10, clock=clock)
    cache.put_many([(1, {"v": 1}), (2, MISSING)])
    assert cache.get_many([1, 2, 3]) == {1: {"v": 1}, 2: MISSING}
    cache.get_many([1])  # 1 is now the most recently used
    cache.put_many([(3, {"v": 3})])
    assert set(cache.get_many([1, 2, 3])) == {1, 3}  # 2 was evicted
    clock.now = 10.0
    assert cache.get_many([1, 3]) == {}  # expired 10 s after they were written


def test_cache_hits_send_no_request_and_misses_are_cached() -> None:
    store = FakeStore(TABLE)
    spec = make_spec(cached(max_rows=1000))
    stats: list[LookupMetrics] = []
    first = run(spec, [key_batch([1, 2, 500])], store, stats)
    second = run(spec, [key_batch([2, 1, 500, 3])], store, stats)
    assert [r["name"] for r in first] == ["user-1", "user-2", None]
    assert [r["name"] for r in second] == ["user-2", "user-1", None, "user-3"]
    assert [k for request in store.requests for k in request] == [1, 2, 500, 3]
    assert stats[1].cache_hits == 3 and stats[1].cache_misses == 1
    assert stats[1].requests == 1


def test_a_lookup_with_other_cache_settings_has_a_cache_of_its_own() -> None:
    store = FakeStore(TABLE)
    run(make_spec(cached(max_rows=1000)), [key_batch([1, 2])], store)
    run(make_spec(cached(max_rows=1000)), [key_batch([1, 2])], store)  # the same cache: hits
    run(make_spec(cached(max_rows=2)), [key_batch([1, 2, 3])], store)  # its own, of 2 rows
    run(make_spec(cached(max_rows=2)), [key_batch([1])], store)  # 1 was evicted by 3
    assert store.requests == [[1, 2], [1, 2, 3], [1]]


def test_missing_keys_not_cached_when_asked() -> None:
    store = FakeStore(TABLE)
    spec = make_spec(cached(max_rows=1000, missing_keys=False))
    run(spec, [key_batch([500])], store)
    run(spec, [key_batch([500])], store)
    assert store.requests == [[500], [500]]


def test_two_lookup_tables_never_share_entries() -> None:
    store_a = FakeStore({1: {"name": "from a", "n": 1}})
    store_b = FakeStore({1: {"name": "from b", "n": 1}})
    spec = make_spec(cached(max_rows=10))
    config_b = dataclasses.replace(make_config(spec), url="fake://other-store")
    run(spec, [key_batch([1])], store_a)
    out = run_lookups(
        [key_batch([1])], spec, config_b, client_factory=lambda c: FakeClient(c, store_b)
    )
    assert next(out).to_pylist()[0]["name"] == "from b"


def test_errors_are_not_cached() -> None:
    from lookup_source.errors import TransientError

    store = FakeStore(TABLE)
    store.failures = [TransientError("503")]
    spec = make_spec(
        dataclasses.replace(
            cached(max_rows=10), on_error="null", retry=make_options(max_attempts=1).retry
        )
    )
    assert run(spec, [key_batch([1])], store)[0]["name"] is None
    assert run(spec, [key_batch([1])], store)[0]["name"] == "user-1"


class ScanningClient(FakeClient):
    supports_scan = True

    async def scan(self, partition: int = 0, partitions: int = 1):  # type: ignore[override]
        self.store.requests.append(["<scan>"])
        for key, record in self.store.table.items():
            yield str(key), record  # like Redis: keys come back as text


def test_full_cache_loads_once_and_answers_locally() -> None:
    store = FakeStore(TABLE)
    spec = make_spec(cached(mode="full"))
    spec = dataclasses.replace(spec, key_types=(key_batch([1]).schema.field("k").type,))
    run_full = lambda keys: [  # noqa: E731
        row
        for batch in run_lookups(
            [key_batch(keys)],
            spec,
            make_config(spec),
            client_factory=lambda c: ScanningClient(c, store),
        )
        for row in batch.to_pylist()
    ]
    assert [r["name"] for r in run_full([1, 2, 500])] == ["user-1", "user-2", None]
    assert [r["name"] for r in run_full([99])] == ["user-99"]
    assert store.requests == [["<scan>"]]  # loaded once, no lookup request at all


def test_full_cache_reloads_in_the_background() -> None:
    clock = Clock()
    cache = FullCache(reload_s=5, clock=clock)
    cache.install({1: {"v": "old"}})
    assert not cache.claim_reload()
    clock.now = 6
    assert cache.claim_reload() and not cache.claim_reload()  # one reloader at a time
    cache.install({1: {"v": "new"}})
    assert cache.get_many([1, 2]) == {1: {"v": "new"}, 2: MISSING} and cache.loads == 2


def test_full_cache_needs_a_connector_that_scans() -> None:
    with pytest.raises(OptionError, match="option 'cache.mode': is full, but the http connector"):
        LookupPlan.build(
            {"connector": "http", "url": "http://h/{key}", "cache.mode": "full"},
            "id long, v string",
        )


def test_retry_on_miss_finds_late_rows() -> None:
    store = FakeStore(TABLE)
    calls = 0
    original = FakeClient.lookup

    async def late(self, keys):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        if calls == 2:
            store.table[777] = {"name": "late", "n": 777}  # the row arrives after the fact
        return await original(self, keys)

    spec = make_spec(make_options(max_attempts=3, retry_on_miss=True))
    stats: list[LookupMetrics] = []
    FakeClient.lookup = late  # type: ignore[method-assign]
    try:
        out = run(spec, [key_batch([1, 777])], store, stats)
    finally:
        FakeClient.lookup = original  # type: ignore[method-assign]
    assert [r["name"] for r in out] == ["user-1", "late"]
    assert store.requests == [[1, 777], [777]]  # only the missing key is asked again
    assert stats[0].retries == 1
    store.requests.clear()
    out = run(spec, [key_batch([888])], store)
    assert out[0]["name"] is None and len(store.requests) == 3  # then it is really missing


def test_metrics_merge_and_percentiles() -> None:
    a, b = LookupMetrics(tasks=1, requests=3, peak_in_flight=4), LookupMetrics(tasks=1)
    for ms in (1, 2, 3, 4, 100):
        a.record_latency(ms / 1000)
    b.record_latency(0.010)
    b.requests = 1
    b.peak_in_flight = 9
    merged = pickle.loads(pickle.dumps(a)).merge(b)
    assert merged.tasks == 2 and merged.requests == 4 and merged.peak_in_flight == 9
    assert 2.7 <= merged.p50_ms <= 4.4 and merged.latency_max_ms == pytest.approx(100)
    assert 90 <= merged.p99_ms <= 100
    assert "4 requests" in str(merged)


def test_cache_options_parse() -> None:
    options = parse_options(
        {
            "connector": "redis",
            "url": "redis://h",
            "cache.max-rows": "5",
            "cache.ttl.ms": "1000",
            "cache.missing-keys": "false",
            "retry.on-miss": "true",
        }
    )
    assert options.cache == CacheSettings("partial", 5, 1.0, False, 0.0)
    assert options.retry.on_miss


def test_full_cache_reports_malformed_values_and_keeps_every_match() -> None:
    from lookup_source.errors import RecordError

    store = FakeStore(
        {
            1: {"name": "one", "n": 1},
            2: RecordError("not valid JSON"),
            3: {"name": "three", "n": "not a number"},
            4: [{"name": "four-a", "n": 4}, {"name": "four-b", "n": 44}],
        }
    )
    spec = make_spec(dataclasses.replace(cached(mode="full"), on_error="column"))
    spec = dataclasses.replace(spec, key_types=(key_batch([1]).schema.field("k").type,))
    out = [
        row
        for batch in run_lookups(
            [key_batch([1, 2, 3, 4, 5])],
            spec,
            make_config(spec),
            client_factory=lambda c: ScanningClient(c, store),
        )
        for row in batch.to_pylist()
    ]
    assert [(r["k"], r["name"], r["n"]) for r in out] == [
        (1, "one", 1),
        (2, None, None),
        (3, None, None),
        (4, "four-a", 4),
        (4, "four-b", 44),
        (5, None, None),
    ]
    errors = {r["k"]: r["_lookup_error"] for r in out}
    assert errors[2] == "key 2: not valid JSON"  # named by the key as it was asked
    assert errors[3].startswith("key 3: column 'n' expects bigint, got str 'not a number'")
    assert errors[1] is errors[4] is errors[5] is None
    assert store.requests == [["<scan>"]]


def test_scanned_keys_that_do_not_convert_are_reported_by_the_scan() -> None:
    from lookup_source.connector_api import Matches
    from lookup_source.engine.output.scan_rows import scan_rows

    keys = pa.record_batch({"id": pa.array(["1", "abc", "3"])})  # Redis keys come back as text
    values = pa.record_batch({"v": pa.array(["a", "b", "c"])})
    fields = dict(
        key_fields=[pa.field("id", pa.int64())], value_fields=[pa.field("v", pa.string())]
    )
    out = scan_rows(
        keys, Matches([0, 1, 2], values), **fields, on_error="column", connector="c", address=None
    )
    assert out.to_pylist() == [
        {"id": 1, "v": "a", "_lookup_error": None},
        {"id": None, "v": None, "_lookup_error": out.column("_lookup_error")[1].as_py()},
        {"id": 3, "v": "c", "_lookup_error": None},
    ]
    assert (
        out.column("_lookup_error")[1]
        .as_py()
        .startswith("key 'abc': column 'id' expects bigint, got str 'abc'")
    )
    with pytest.raises(LookupFailedError, match="failed for 1 key .*'abc'"):
        scan_rows(
            keys, Matches([0, 1, 2], values), **fields, on_error="fail", connector="c", address=None
        )


def test_task_loop_closes_an_abandoned_async_iterator() -> None:
    from lookup_source.engine.loop import TaskLoop

    closed = []

    async def numbers():  # type: ignore[no-untyped-def]
        try:
            for i in range(10):
                yield i
        finally:
            closed.append(True)

    with TaskLoop() as loop:
        items = loop.iterate(numbers())
        assert [next(items), next(items)] == [0, 1]
        items.close()
        assert closed == [True]
    assert loop.closed


def test_a_workers_caches_keep_within_their_memory_budget() -> None:
    import sys

    from lookup_source.engine.kept.cache import WorkerCaches

    def fill(cache: PartialCache, name: str) -> None:
        cache.put_many([((name, i), {"v": name * 400}) for i in range(150)])

    probe = PartialCache(10_000)
    fill(probe, "p")
    one = probe.nbytes  # about what 150 keys of 400-character records hold
    assert 150 * (400 + sys.getsizeof("")) < one < 150 * 2_000
    caches = WorkerCaches(max_bytes=int(2.5 * one))
    made = {}
    for name in "abcd":  # four lookups' caches
        cache = made[name] = caches.get(name, lambda: PartialCache(10_000))
        fill(cache, name)
        caches.fit()
        assert caches.nbytes <= 2.5 * one
    assert len(caches) == 2 and caches.dropped == 2  # "a" and "b", the least recently used
    assert caches.get("c", lambda: None) is made["c"]  # kept, and now the most recent
    fill(caches.get("e", lambda: PartialCache(10_000)), "e")
    caches.fit()
    assert caches.get("c", lambda: None) is made["c"]  # "d" went: "c" was used since
    caches.max_bytes = one // 3  # the task's own alone is too large: it keeps its newest keys
    caches.fit(protect="c")
    newest = caches.get("c", lambda: None)
    assert len(caches) == 1 and 0 < newest.nbytes <= one // 3
    assert newest.get_many([("c", 149)]) and not newest.get_many([("c", 0)])


def test_a_full_cache_larger_than_the_budget_is_kept_alone_and_said(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from lookup_source.engine.kept.cache import WorkerCaches

    caches = WorkerCaches(max_bytes=10_000)
    caches.get("other", lambda: PartialCache(100)).put_many([(k, {"v": k}) for k in range(50)])
    caches.get("tiny", lambda: PartialCache(100)).put_many([(1, {"v": 1})])  # kept: < 4 kB
    full = caches.get("full", lambda: FullCache(0))
    full.install({i: {"v": "z" * 100} for i in range(500)})
    caches.fit(protect="full")
    caches.fit(protect="full")
    assert full.nbytes > 10_000 and full.get_many([7])[7] == {"v": "z" * 100}
    assert caches.dropped == 1 and caches.get("other", lambda: None) is None  # "other" went
    warnings = [r for r in caplog.records if "cache.worker.max-mb" in r.getMessage()]
    assert len(warnings) == 1  # said once, naming the option


def test_a_worker_keeps_at_most_so_many_lookups() -> None:
    from lookup_source.engine.kept.cache import WorkerCaches

    caches = WorkerCaches(max_entries=3)
    for name in "abcde":
        caches.get(name, lambda: PartialCache(10))
    assert len(caches) == 3 and caches.dropped == 2
    assert caches.get("a", lambda: "new") == "new"  # "a" was dropped


def test_fifty_lookups_in_one_worker_stay_within_the_budget() -> None:
    from lookup_source.engine.kept.worker import current_worker

    store = FakeStore({i: {"name": "n" * 200, "n": i} for i in range(2000)})
    for lookup in range(50):  # fifty lookups with different settings, as in a notebook
        options = cached(max_rows=1000 + lookup, worker_max_mb=1)
        spec = make_spec(options)
        keys = list(range(lookup * 20, lookup * 20 + 400))
        rows = run(spec, [key_batch(keys)], store)
        assert [r["n"] for r in rows] == keys
        assert current_worker().caches.nbytes <= 2**20
    assert current_worker().caches.dropped > 0
    again = make_spec(cached(max_rows=1049, worker_max_mb=1))  # the latest: still cached
    asked = len(store.requests)
    run(again, [key_batch(list(range(980, 1000)))], store)
    assert len(store.requests) == asked


def test_a_cached_arrow_batch_is_counted_whole_while_any_key_points_into_it() -> None:
    from lookup_source.engine.request.answers import CachedRows

    values = pa.RecordBatch.from_pydict({"name": ["x" * 1000] * 500})
    cache = PartialCache(max_rows=1_000)
    cache.put_many([(k, CachedRows(values, k, 1)) for k in range(500)])
    whole = cache.nbytes
    assert whole >= values.nbytes  # the batch once, whole
    cache.put_many([(k, MISSING) for k in range(499)])  # all but one key leave the batch
    assert cache.nbytes >= values.nbytes  # one key still keeps all of it alive
    cache.put_many([(499, MISSING)])
    assert cache.nbytes < values.nbytes // 4  # the last one gone: the batch is not counted


def test_a_task_with_hedging_keeps_its_full_cache_over_the_budget() -> None:
    from lookup_source.engine.kept.worker import current_worker

    table = {i: {"name": "n" * 2_000, "n": i} for i in range(1_000)}  # about 2 MB
    store = FakeStore(table)
    from lookup_source.settings import HedgeAfter, HedgeSettings

    hedge = HedgeSettings(after=HedgeAfter(seconds=0.05), budget=1.0)
    options = make_options(hedge=hedge, cache=CacheSettings(mode="full", worker_max_mb=1))
    spec = dataclasses.replace(make_spec(options), key_types=(pa.int64(),))
    for _ in range(3):  # three tasks: one scan, the cache kept (the hedging window is newer)
        out = run_lookups(
            [key_batch([1, 2])],
            spec,
            make_config(spec),
            client_factory=lambda c: ScanningClient(c, store),
        )
        assert [r["n"] for b in out for r in b.to_pylist()] == [1, 2]
    assert store.requests == [["<scan>"]]
    assert current_worker().caches.nbytes > 2**20  # kept alone, said once


def test_the_workers_cache_budget_option_parses_and_bad_values_name_it() -> None:
    base = {"connector": "redis", "url": "redis://h"}
    assert parse_options(base).cache.worker_max_mb == 1024  # the default
    assert parse_options({**base, "cache.worker.max-mb": "64"}).cache.worker_max_mb == 64
    for bad, why in (("0", "at least 1"), ("lots", "whole number"), ("2000000", "at most")):
        with pytest.raises(OptionError, match=f"cache.worker.max-mb.*{why}") as info:
            parse_options({**base, "cache.worker.max-mb": bad})
        assert info.value.option == "cache.worker.max-mb"
