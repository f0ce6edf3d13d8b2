"""Clients of a worker's threads (lookup_source.engine.kept.clients): an overflow client's task
closed from another thread is closed by its own thread, and a close deferred to a thread that
ends first still runs."""

from __future__ import annotations

import asyncio
import gc
import threading
from typing import Any

import pytest

from lookup_source.engine.kept import clients as lifetime
from lookup_source.engine.kept.worker import current_worker, forget_worker
from lookup_source.engine.runner import LookupTask
from lookup_source.settings import CacheSettings
from tests.fakes import FakeClient, FakeStore, key_batch, make_config, make_options, make_spec

TABLE_ONE = {1: {"name": "one", "n": 1}}


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


def test_an_overflow_clients_task_closed_from_another_thread_is_closed_by_its_own(
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


def test_a_close_deferred_to_a_thread_that_ends_first_still_runs() -> None:
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
