"""A worker's kept caches (lookup_source.engine.kept.caches): one cache per lookup and settings,
pinned for the tasks that use it; a full cache loaded once and reloaded in the background (a
reload whose client closes badly still installs and fits); hedging windows kept like caches;
and the caches of concurrent lookups within the smallest memory budget."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pyarrow as pa
import pytest

from lookup_source.connector_api import ConnectorConfig
from lookup_source.engine.kept import clients as lifetime
from lookup_source.engine.kept.cache import FullCache, PartialCache
from lookup_source.engine.kept.cache_layer import PartialCacheLayer, ReadingLayer
from lookup_source.engine.kept.cached_rows import MISSING
from lookup_source.engine.kept.caches import KeptCaches
from lookup_source.engine.kept.identity import LookupIdentity
from lookup_source.engine.kept.worker import current_worker, forget_worker
from lookup_source.engine.loop import TaskLoop
from lookup_source.engine.request.answers import CachedRows
from lookup_source.engine.request.hedge import Hedging
from lookup_source.engine.runner import LookupTask
from lookup_source.settings import CacheSettings
from lookup_source.settings.attempts import HedgeAfter, HedgeSettings
from tests.fakes import FakeClient, FakeStore, make_config, make_options, make_spec

KEY_FIELDS = [pa.field("k", pa.int64())]
VALUE_FIELDS = [pa.field("name", pa.string()), pa.field("n", pa.int64())]


class ClosingBadly(FakeClient):
    """A scanning client whose close hangs (ignoring its cancellation) or fails."""

    supports_scan = True
    close_hangs = False

    async def scan(self, partition: int = 0, partitions: int = 1):  # type: ignore[override]
        for key, record in self.store.table.items():
            yield key, record

    async def close(self) -> None:
        await super().close()
        if not self.close_hangs:
            raise ConnectionResetError("the store went away while closing")
        while True:  # a close that never ends, and ignores being told to
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                continue


@pytest.mark.parametrize("hangs", [False, True], ids=["fails", "hangs"])
def test_a_reload_whose_client_closes_badly_still_installs_and_fits(
    hangs: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lifetime, "CLOSE_TIMEOUT_S", 0.2)
    forget_worker()
    worker = current_worker()
    fits: list[str | None] = []
    monkeypatch.setattr(worker.caches, "fit", lambda protect=None: fits.append(protect))
    cache = FullCache(reload_s=60)
    cache.install({1: CachedRows(pa.record_batch({"name": ["old"]}), 0, 1)})
    backing = FakeStore({1: {"name": "new"}, 2: {"name": "two"}})
    config = make_config(make_spec(make_options()))
    ClosingBadly.close_hangs = hangs
    worker.kept.reload(
        cache,
        "the-key",
        lambda: ClosingBadly(config, backing),
        [pa.field("k", pa.int64())],
        [pa.field("name", pa.string())],
    )
    worker.close()  # waits for the reload; returns at all: a hanging close is abandoned
    assert backing.closed == 1
    assert sorted(cache.get_many([1, 2])) == [1, 2] and cache.loads == 2  # the new table
    assert fits == ["the-key"]  # and the worker's caches fitted to their budget after it
    forget_worker()


def test_concurrent_lookups_keep_within_the_smallest_memory_budget() -> None:
    forget_worker()
    worker = current_worker()
    store = FakeStore({1: {"name": "one", "n": 1}})

    def task(max_mb: int) -> LookupTask:
        cache = CacheSettings(mode="partial", max_rows=100, worker_max_mb=max_mb)
        spec = make_spec(make_options(cache=cache))
        return LookupTask(spec, make_config(spec), client_factory=lambda c: FakeClient(c, store))

    strict = task(1)
    assert worker.caches.max_bytes == 2**20
    generous = task(512)  # begins while the strict one runs: the strict budget still holds
    assert worker.caches.max_bytes == 2**20
    strict.close()
    assert worker.caches.max_bytes == 512 * 2**20  # the budget of what still runs
    generous.close()
    later = task(64)
    assert worker.caches.max_bytes == 64 * 2**20
    later.close()
    forget_worker()


# -- KeptCaches, directly ---------------------------------------------------------------------


class Scanning(FakeClient):
    """A fake client that scans its store's table (counted in ``scans``)."""

    supports_scan = True

    def __init__(self, config: ConnectorConfig, store: FakeStore | None = None) -> None:
        super().__init__(config, store)
        self.scans = 0

    async def scan(  # type: ignore[override]
        self, partition: int = 0, partitions: int = 1
    ) -> AsyncIterator[tuple[Any, Any]]:
        self.scans += 1
        for key, record in self.store.table.items():
            yield key, record


class Failing(Scanning):
    """A scanning client whose scan fails part-way."""

    async def scan(  # type: ignore[override]
        self, partition: int = 0, partitions: int = 1
    ) -> AsyncIterator[tuple[Any, Any]]:
        raise ConnectionResetError("the store went away mid-scan")
        yield  # (an async generator)


@pytest.fixture
def loop() -> Iterator[TaskLoop]:
    with TaskLoop() as made:
        yield made


def config_of(url: str = "fake://user:secret@store:1") -> ConnectorConfig:
    """The fake's configuration (its key an int64), at ``url``."""
    config = make_config(make_spec(make_options()))
    return dataclasses.replace(config, url=url, key_types=(pa.int64(),))


def task_cache(
    kept: KeptCaches,
    settings: CacheSettings,
    loop: TaskLoop,
    *,
    store: FakeStore | None = None,
    config: ConnectorConfig | None = None,
    factory: Any = None,
    pins: list[str] | None = None,
) -> Any:
    config = config or config_of()
    store = store if store is not None else FakeStore({})
    factory = factory or (lambda c: Scanning(c, store))
    return kept.task_cache(
        settings,
        config,
        factory(config),
        loop,
        factory,
        VALUE_FIELDS,
        LookupIdentity.of(config),
        [] if pins is None else pins,
    )


def test_no_cache_is_made_when_the_settings_ask_for_none(loop: TaskLoop) -> None:
    kept = KeptCaches(lambda: 0.0)
    pins: list[str] = []
    assert task_cache(kept, CacheSettings(mode="partial", max_rows=0), loop, pins=pins) is None
    assert pins == [] and len(kept.caches) == 0


def test_a_partial_cache_is_kept_per_lookup_and_settings_and_pinned_for_the_task(
    loop: TaskLoop,
) -> None:
    kept = KeptCaches(lambda: 0.0)
    settings = CacheSettings(mode="partial", max_rows=10, ttl_s=5.0, missing_keys=False)
    first_pins: list[str] = []
    first = task_cache(kept, settings, loop, pins=first_pins)
    assert isinstance(first, PartialCacheLayer) and isinstance(first.cache, PartialCache)
    assert first.cache_missing is False
    assert len(first_pins) == 1 and kept.caches.pinned() == first_pins

    second_pins: list[str] = []
    again = task_cache(kept, settings, loop, pins=second_pins)
    assert again.cache is first.cache and second_pins == first_pins  # the same lookup's

    other_settings = dataclasses.replace(settings, max_rows=20)
    other = task_cache(kept, other_settings, loop)
    another_lookup = task_cache(kept, settings, loop, config=config_of("fake://elsewhere"))
    assert len({id(first.cache), id(other.cache), id(another_lookup.cache)}) == 3
    assert len(kept.caches) == 3 and len(kept.caches.pinned()) == 3

    kept.caches.unpin(first_pins + second_pins)
    assert first_pins[0] not in kept.caches.pinned() and len(kept.caches.pinned()) == 2


def test_a_partial_cache_layer_fits_the_workers_caches_when_it_grew(
    loop: TaskLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = KeptCaches(lambda: 0.0)
    fits: list[str | None] = []
    monkeypatch.setattr(kept.caches, "fit", lambda protect=None: fits.append(protect))
    pins: list[str] = []
    layer = task_cache(kept, CacheSettings(mode="partial", max_rows=10), loop, pins=pins)
    assert layer.grew is not None
    layer.grew()
    assert fits == pins  # its own cache protected while the others are dropped


def test_a_full_cache_is_loaded_once_by_the_tasks_client_and_read_from(loop: TaskLoop) -> None:
    kept = KeptCaches(lambda: 0.0)
    store = FakeStore({1: {"name": "one", "n": 1}, 2: {"name": "two", "n": 2}})
    made: list[Scanning] = []

    def factory(config: ConnectorConfig) -> Scanning:
        made.append(Scanning(config, store))
        return made[-1]

    settings = CacheSettings(mode="full")
    pins: list[str] = []
    layer = task_cache(kept, settings, loop, factory=factory, pins=pins)
    assert isinstance(layer, ReadingLayer) and isinstance(layer.cache, FullCache)
    assert layer.cache.loads == 1 and made[0].scans == 1
    assert kept.caches.pinned() == pins
    known = layer.cache.get_many([1, 2, 3])
    assert isinstance(known[1], CachedRows) and known[3] is MISSING
    answer = layer.lookup([1, 3])
    assert answer.hits == 2 and answer.missing == 1 and answer.misses == 0

    again = task_cache(kept, settings, loop, factory=factory)
    assert again.cache is layer.cache and again.cache.loads == 1  # loaded once
    assert [client.scans for client in made] == [1, 0]  # the second task's client not asked


def test_a_due_full_cache_is_reloaded_in_the_background_by_a_client_of_its_own(
    loop: TaskLoop,
) -> None:
    now = [0.0]
    kept = KeptCaches(lambda: now[0])
    store = FakeStore({1: {"name": "one", "n": 1}})
    settings = CacheSettings(mode="full", reload_s=60.0)
    layer = task_cache(kept, settings, loop, store=store)
    assert layer.cache.loads == 1 and store.opened == 0  # the task's client, opened by it

    now[0] = 59.0  # not due yet
    task_cache(kept, settings, loop, store=store)
    assert not kept._reloads and layer.cache.loads == 1

    store.table[2] = {"name": "two", "n": 2}
    now[0] = 60.0
    task_cache(kept, settings, loop, store=store)  # due: reloaded in a thread
    kept.close(join_s=30.0)  # waits for the reload, then drops every cache
    assert layer.cache.loads == 2 and isinstance(layer.cache.get_many([2])[2], CachedRows)
    assert store.opened == 1 and store.closed == 1  # the reload's own client, closed
    assert not kept._reloads and len(kept.caches) == 0


def test_a_failed_reload_keeps_the_old_table_and_may_be_claimed_again() -> None:
    now = [0.0]
    kept = KeptCaches(lambda: now[0])
    store = FakeStore({1: {"name": "one", "n": 1}})
    cache = FullCache(10.0, clock=lambda: now[0])
    cache.install({1: CachedRows(pa.record_batch({"name": ["old"], "n": [1]}), 0, 1)})
    now[0] = 10.0
    assert cache.claim_reload() and not cache.claim_reload()  # one reload at a time
    kept.reload(cache, "key", lambda: Failing(config_of(), store), KEY_FIELDS, VALUE_FIELDS)
    kept.close(join_s=30.0)
    assert cache.loads == 1 and isinstance(cache.get_many([1])[1], CachedRows)  # the old one
    assert store.opened == 1 and store.closed == 1
    assert cache.claim_reload()  # released: the next task tries again


def test_hedging_is_kept_per_lookup_and_settings_and_pinned() -> None:
    kept = KeptCaches(lambda: 0.0)
    identity = LookupIdentity.of(config_of())
    settings = HedgeSettings(after=HedgeAfter(seconds=0.05), budget=0.1)
    pins: list[str] = []
    hedging = kept.hedging(identity, settings, pins)
    assert isinstance(hedging, Hedging) and hedging.after_s == 0.05
    assert kept.hedging(identity, settings, pins) is hedging
    assert len(pins) == 2 and pins[0] == pins[1] and kept.caches.pinned() == pins[:1]
    other = kept.hedging(identity, dataclasses.replace(settings, budget=0.2), pins)
    assert other is not hedging and len(kept.caches) == 2
    elsewhere = LookupIdentity.of(config_of("fake://elsewhere"))
    assert kept.hedging(elsewhere, settings, []) is not hedging
