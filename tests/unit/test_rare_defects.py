"""Six rare defects found in the fourth pass over the house (issue 52), and a seventh found with
the native HTTP transport (issue 53), each shown by a test that failed before its fix."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pytest

from lookup_source.engine.kept import clients as lifetime
from lookup_source.engine.kept.cache import FullCache
from lookup_source.engine.kept.identity import LookupIdentity
from lookup_source.engine.kept.shared_cache import SharedTier, StoreHealth
from lookup_source.engine.kept.worker import current_worker, forget_worker
from lookup_source.engine.metrics import LookupMetrics
from lookup_source.engine.request.answers import CachedRows
from lookup_source.engine.runner import LookupTask, run_lookups
from lookup_source.errors import LookupFailedError
from lookup_source.settings import CacheSettings
from tests.fakes import FakeClient, FakeStore, key_batch, make_config, make_options, make_spec

TABLE_ONE = {1: {"name": "one", "n": 1}}


class Interrupted(BaseException):
    """Stands for KeyboardInterrupt or SystemExit: never a store's failure to swallow."""


class InterruptingStore:
    """A shared tier's store whose every call is interrupted."""

    async def lookup(self, keys: Sequence[Any]) -> Mapping[Any, Any]:
        raise Interrupted

    async def store(self, items: Sequence[tuple[bytes, bytes]], ttl_s: float) -> None:
        raise Interrupted


def shared_tier(store: Any) -> SharedTier:
    config = make_config(make_spec(make_options()))
    return SharedTier(
        store,
        LookupIdentity.of(config),
        [pa.field("name", pa.string())],
        LookupMetrics(),
        ttl_s=60.0,
        timeout_s=1.0,
        cache_missing=False,
        max_value_bytes=1 << 16,
    )


def test_4_the_shared_tier_never_swallows_an_interrupt() -> None:
    tier = shared_tier(InterruptingStore())
    with pytest.raises(Interrupted):
        asyncio.run(tier.lookup([1, 2]))
    assert tier.metrics.shared_errors == 0  # not counted as the store's failure

    tier._pending = [(b"k", b"v")]  # a write under way
    with pytest.raises(Interrupted):
        asyncio.run(tier._write_pending())
    assert tier.metrics.shared_errors == 0


class UnreferencedStore(FakeClient):
    """A store client that cannot be weak-referenced (as some extension types cannot)."""

    __slots__ = ("config", "store")


def test_6_a_stores_health_is_kept_with_its_client_never_by_its_address() -> None:
    forget_worker()
    worker = current_worker()
    backing = FakeStore({})
    config = make_config(make_spec(make_options()))

    def factory(config: Any) -> UnreferencedStore:
        return UnreferencedStore(config, backing)

    factory.identity = "unreferenced-store"  # type: ignore[attr-defined]  # kept by the worker

    def lease() -> Any:
        return worker.lease_client(
            factory,
            config,
            identity=LookupIdentity.of(config),
            max_idle_s=60.0,
            keep=True,
        )

    first = lease()
    health = first.beside.setdefault("health", StoreHealth())
    health.unavailable_until = float("inf")  # the store failed: left alone
    again = lease()
    assert again.beside["health"] is health  # the kept client's health, for every task
    again.release(reusable=True)
    first.release(reusable=False)  # the client is closed; a new one comes next
    del first, again, health
    fresh = lease()
    assert "health" not in fresh.beside  # whatever its address, a new client starts healthy
    fresh.release(reusable=True)
    forget_worker()


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
def test_3_a_reload_whose_client_closes_badly_still_installs_and_fits(
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
    started = time.monotonic()
    worker.kept.reload(
        cache,
        "the-key",
        lambda: ClosingBadly(config, backing),
        [pa.field("k", pa.int64())],
        [pa.field("name", pa.string())],
    )
    worker.close()  # waits for the reload
    assert time.monotonic() - started < 5  # the hanging close was abandoned
    assert backing.closed == 1
    assert sorted(cache.get_many([1, 2])) == [1, 2] and cache.loads == 2  # the new table
    assert fits == ["the-key"]  # and the worker's caches fitted to their budget after it
    forget_worker()


def test_5_concurrent_lookups_keep_within_the_smallest_memory_budget() -> None:
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


class Config2Factory:
    """Makes fake clients of one store, known by ``identity`` (so the worker keeps them)."""

    def __init__(self, store: FakeStore, identity: str) -> None:
        self.store = store
        self.identity = identity

    def __call__(self, config: Any) -> FakeClient:
        return FakeClient(config, self.store)


def opened_task(factory: Any, **options: Any) -> tuple[LookupTask, list[Any]]:
    """A task kept by the worker, its one batch looked up; and what it reports when closed."""
    spec = make_spec(make_options(**options))
    reported: list[Any] = []
    task = LookupTask(
        spec,
        make_config(spec),
        client_factory=factory,
        keep_client=True,
        on_metrics=reported.append,
    )
    rows = [r for out in task.submit(key_batch([1, 2])) for r in out.to_pylist()]
    rows += [r for out in task.finish() for r in out.to_pylist()]
    assert [r["name"] for r in rows] == ["one", None]
    return task, reported


def test_1_an_overflow_clients_task_closed_from_another_thread_is_closed_by_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The 17th client of a thread runs on the thread's loop too: a close seen in another
    thread (the collector's) waits for the task's thread, like a kept client's."""
    monkeypatch.setattr(lifetime, "MAX_KEPT_CLIENTS", 1)
    forget_worker()
    kept_store, extra_store = FakeStore(TABLE_ONE), FakeStore(TABLE_ONE)
    holder, _ = opened_task(Config2Factory(kept_store, "kept"))  # holds the one kept client
    extra, reported = opened_task(Config2Factory(extra_store, "extra"))
    assert (
        not extra._resources.lease.kept and extra._loop is holder._loop
    )  # the overflow: shared loop

    async def collected_elsewhere() -> None:  # while the loop runs in this thread
        await asyncio.to_thread(extra.close)

    holder._loop.run(collected_elsewhere())
    holder.close()
    assert extra_store.closed == 0 and not reported  # deferred to the task's thread
    current_worker().clients()  # the thread's next call: what was deferred runs
    assert extra_store.opened == 1 and extra_store.closed == 1
    assert len(reported) == 1 and reported[0].rows == 2
    forget_worker()


def test_2_a_close_deferred_to_a_thread_that_ends_first_still_runs() -> None:
    """A task's close seen in another thread waits for its thread; if that thread ends
    first, the close runs as it ends: its caches unpinned, the collector's threshold given
    back, its metrics reported."""
    forget_worker()
    worker = current_worker()
    store = FakeStore(TABLE_ONE)
    made: list[tuple[LookupTask, list[Any]]] = []
    ready, finish = threading.Event(), threading.Event()

    def task_thread() -> None:
        made.append(
            opened_task(
                Config2Factory(store, "ends-first"),
                cache=CacheSettings(mode="partial", max_rows=10),
                gc_threshold=50_000,
            )
        )
        ready.set()
        finish.wait(10)

    thread = threading.Thread(target=task_thread)
    thread.start()
    ready.wait(10)
    task, reported = made[0]
    task.close()  # seen here, not in its thread: deferred to it
    assert not task._closed and worker.caches.pinned() and worker.gc._holders == 1
    finish.set()
    thread.join()
    made.clear()
    gc.collect()  # the thread's storage goes: what it kept closes, and what it was left
    assert task._closed and len(reported) == 1 and reported[0].rows == 2
    assert not worker.caches.pinned() and worker.gc._holders == 0
    assert store.closed == 1
    forget_worker()


class CancelsItself(FakeClient):
    """A client that ends a request in a cancellation of its own (as a client whose own timer
    raced the attempt's limit could leave behind): never asked for by the engine."""

    async def lookup(self, keys: Sequence[Any]) -> Any:
        if 2 in keys:
            raise asyncio.CancelledError("the client's own")
        return await super().lookup(keys)


@pytest.mark.parametrize("on_error", ["column", "fail"])
def test_7_a_request_cancelled_not_by_the_engine_fails_its_keys_never_silently(
    on_error: str,
) -> None:
    """Found with the native HTTP transport (issue 53): a request task ended by a cancellation
    the engine had not asked for completed its rows with no value and no error."""
    spec = make_spec(make_options(on_error=on_error, batch_size=1, max_attempts=1))
    store = FakeStore({1: {"name": "one", "n": 1}, 2: {"name": "two", "n": 2}})
    batches = [key_batch([1, 2, 3])]

    def run() -> list[dict[str, Any]]:
        out = run_lookups(
            batches, spec, make_config(spec), client_factory=lambda c: CancelsItself(c, store)
        )
        return [row for batch in out for row in batch.to_pylist()]

    if on_error == "fail":
        with pytest.raises(LookupFailedError, match="cancelled, though not by asynclookup"):
            run()
        return
    rows = run()
    assert [(r["k"], r["name"]) for r in rows] == [(1, "one"), (2, None), (3, None)]
    assert rows[0]["_lookup_error"] is None and rows[2]["_lookup_error"] is None
    assert "cancelled, though not by asynclookup" in rows[1]["_lookup_error"]
