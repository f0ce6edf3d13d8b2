"""Clients that live as long as the Python worker (lookup_source.engine.kept.clients, .worker):
one loop and one opened client per configuration, reused task after task, never across
settings, replaced when idle too long or after a failed task, closed by the sweeper once idle."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from typing import Any, ClassVar

import pyarrow as pa
import pytest

from lookup_source.connector_api import ConnectorConfig
from lookup_source.engine.clock import Clocks
from lookup_source.engine.kept import clients as lifetime
from lookup_source.engine.kept.clients import WorkerClients, client_key, factory_identity
from lookup_source.engine.kept.identity import LookupIdentity
from lookup_source.engine.kept.worker import Worker, current_worker, lease_client
from lookup_source.engine.runner import run_lookups
from lookup_source.errors import LookupFailedError, PermanentError
from tests.fakes import (
    FakeClient,
    FakeStore,
    StoreFactory,
    key_batch,
    make_config,
    make_options,
    make_spec,
)


def key_of(factory_id: str, config: ConnectorConfig) -> str:
    return client_key(factory_id, config, LookupIdentity.of(config))


TABLE = {i: {"name": f"user-{i}", "n": i} for i in range(100)}


def run_task(spec: Any, keys: list[Any], factory: Any, *, keep: bool | None = True) -> list[Any]:
    out = run_lookups(
        [key_batch(keys)], spec, make_config(spec), client_factory=factory, keep_client=keep
    )
    return [row for batch in out for row in batch.to_pylist()]


def test_one_client_serves_task_after_task_on_one_loop() -> None:
    store = FakeStore(TABLE)
    factory = StoreFactory(store)
    spec = make_spec(make_options(capacity=4, batch_size=3))
    loops = set()
    for task in range(20):  # twenty micro-batches
        rows = run_task(spec, [task, task + 1, None, 500], factory)
        assert [r["name"] for r in rows] == [f"user-{task}", f"user-{task + 1}", None, None]
        loops.add(id(current_worker().clients().loop))
    assert store.opened == 1 and store.closed == 0
    assert len(loops) == 1 and len(current_worker().clients()) == 1


def test_clients_are_never_shared_across_settings() -> None:
    store = FakeStore(TABLE)
    factory = StoreFactory(store)
    spec = make_spec(make_options(capacity=4))
    config = make_config(spec)
    variants = [
        config,
        dataclasses.replace(config, url="fake://other:secret@store:1"),
        dataclasses.replace(config, options={"fake.user": "reader"}),
        dataclasses.replace(config, options={"fake.password.env": "OTHER"}),
        dataclasses.replace(config, capacity=5),
        dataclasses.replace(config, value_columns=("name",), value_types=(pa.string(),)),
        dataclasses.replace(config, timeout_s=3.0),
    ]
    keys = {key_of("x", v) for v in variants}
    assert len(keys) == len(variants)
    assert key_of("x", config) != key_of("y", config)  # another factory
    assert key_of("x", config) == key_of("x", dataclasses.replace(config))
    for variant in variants:
        lease = lease_client(
            factory, variant, identity=LookupIdentity.of(variant), max_idle_s=60, keep=True
        )
        lease.release(reusable=True)
    assert store.opened == len(variants) and store.closed == 0
    for key in keys:  # a digest: no URL, password or option in it
        assert "secret" not in key and "fake" not in key and len(key) == 64


def test_a_client_idle_past_the_limit_is_replaced_and_others_closed() -> None:
    now = [0.0]
    clients = WorkerClients(clock=lambda: now[0])
    store = FakeStore(TABLE)
    factory = StoreFactory(store)
    config = make_config(make_spec(make_options()))
    other = dataclasses.replace(config, url="fake://elsewhere")

    first = clients.lease("a", factory, config, 10.0)
    first.release(reusable=True)
    clients.lease("b", factory, other, 10.0).release(reusable=True)
    now[0] = 9.0
    again = clients.lease("a", factory, config, 10.0)
    assert again.client is first.client and store.opened == 2  # trusted within the limit
    again.release(reusable=True)
    now[0] = 19.5  # "b" idled 19.5 s, "a" 10.5 s: both past the limit
    fresh = clients.lease("a", factory, config, 10.0)
    assert fresh.client is not first.client
    assert store.opened == 3 and store.closed == 2 and len(clients) == 1
    fresh.release(reusable=True)


def test_a_client_older_than_its_max_age_is_replaced_even_while_held() -> None:
    now = [0.0]
    clients = WorkerClients(clock=lambda: now[0])
    store = FakeStore(TABLE)
    factory = StoreFactory(store)
    config = make_config(make_spec(make_options()))
    first = clients.lease("a", factory, config, 60.0, 10.0)
    first.release(reusable=True)
    now[0] = 9.0
    held = clients.lease("a", factory, config, 60.0, 10.0)
    assert held.client is first.client
    now[0] = 10.5  # older than its max age: the next lease gets a new one, the holder keeps it
    fresh = clients.lease("a", factory, config, 60.0, 10.0)
    assert fresh.client is not first.client and store.opened == 2 and store.closed == 0
    held.release(reusable=True)  # its last holder hands it back: closed now
    assert store.closed == 1
    fresh.release(reusable=True)
    now[0] = 100.0  # no age limit: kept however old (idle within its limit)
    clients.lease("b", factory, config, 1000.0, 0.0).release(reusable=True)
    now[0] = 1000.0
    clients.lease("b", factory, config, 1000.0, 0.0).release(reusable=True)
    assert store.opened == 3


def test_a_changed_secret_or_certificate_on_the_executor_is_a_new_client(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert = tmp_path / "client.pem"
    cert.write_text("first certificate")
    monkeypatch.setenv("FAKE_TOKEN", "first")
    store = FakeStore(TABLE)
    factory = StoreFactory(store)
    config = dataclasses.replace(
        make_config(make_spec(make_options())),
        options={"fake.tls.cert-file": str(cert), "fake.token.env": "FAKE_TOKEN"},
    )

    def lease() -> Any:
        leased = lease_client(
            factory, config, identity=LookupIdentity.of(config), max_idle_s=60, keep=True
        )
        leased.release(reusable=True)
        return leased.client

    first = lease()
    assert lease() is first  # nothing changed: kept
    cert.write_text("renewed certificate")  # the same path, another content
    renewed = lease()
    assert renewed is not first
    monkeypatch.setenv("FAKE_TOKEN", "rotated")  # the same variable, another value
    rotated = lease()
    assert rotated is not renewed and store.opened == 3
    key = key_of("x", config)
    assert "rotated" not in key and "renewed" not in key


def test_a_threads_clients_and_loop_are_closed_when_it_ends() -> None:
    import gc
    import threading

    store = FakeStore(TABLE)
    factory = StoreFactory(store)
    spec = make_spec(make_options())
    loops: list[Any] = []

    def work() -> None:
        assert run_task(spec, [1, 2], factory)[1]["name"] == "user-2"
        loops.append(current_worker().clients().loop)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    gc.collect()
    assert store.opened == 1 and store.closed == 1  # closed with its thread, not kept open
    assert loops[0].closed


def test_a_failed_task_closes_its_client_and_the_next_opens_a_new_one() -> None:
    store = FakeStore(TABLE)
    factory = StoreFactory(store)
    spec = make_spec(make_options(max_attempts=1))
    assert run_task(spec, [1], factory)[0]["name"] == "user-1"
    store.fail_keys[7] = PermanentError("no such thing")
    with pytest.raises(LookupFailedError):
        run_task(spec, [7], factory)
    assert store.opened == 1 and store.closed == 1 and len(current_worker().clients()) == 0
    assert run_task(spec, [2], factory)[0]["name"] == "user-2"
    assert store.opened == 2 and store.closed == 1


def test_output_abandoned_without_requests_in_flight_keeps_the_client() -> None:
    store = FakeStore(TABLE)
    factory = StoreFactory(store)
    spec = make_spec(make_options(batch_size=2))
    config = make_config(spec)
    out = run_lookups(
        [key_batch([1, 2]), key_batch([3, 4])],
        spec,
        config,
        client_factory=factory,
        keep_client=True,
    )
    first = next(out)
    assert first.column("name").to_pylist() == ["user-1", "user-2"]
    out.close()  # Spark stops reading (a limit)
    assert store.opened == 1 and store.closed == 0
    assert run_task(spec, [5], factory)[0]["name"] == "user-5" and store.opened == 1


class Stubborn(FakeClient):
    """Ignores cancellation for a while: a driver stuck on a dead connection."""

    name: ClassVar[str] = "stubborn"

    async def lookup(self, keys: Any) -> Any:
        if 666 in keys:
            for _ in range(40):
                try:
                    await asyncio.sleep(0.05)
                except asyncio.CancelledError:
                    continue
        return await super().lookup(keys)


def test_a_task_that_left_a_request_behind_does_not_hand_its_client_on() -> None:
    from lookup_source.testing.clock import virtual_worker

    store = FakeStore(TABLE)

    class Factory:
        identity = "stubborn"

        def __call__(self, config: ConnectorConfig) -> FakeClient:
            return Stubborn(config, store)

    worker = virtual_worker()  # the stuck driver's two seconds pass on the worker's one clock
    spec = make_spec(make_options(timeout_ms=50, max_attempts=1, on_error="null", batch_size=1))
    out = run_lookups(
        [key_batch([666, 1])],
        spec,
        make_config(spec),
        client_factory=Factory(),
        keep_client=True,
        worker=worker,
    )
    rows = [row for batch in out for row in batch.to_pylist()]
    assert [r["name"] for r in rows] == [None, "user-1"]  # the stuck key timed out
    assert store.opened == 1 and store.closed == 1  # the client in doubt was let go
    assert len(worker.clients()) == 0
    assert worker.clock() >= 0.05  # virtual seconds
    worker.close()


def test_without_worker_reuse_each_task_has_its_own_loop_and_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = FakeStore(TABLE)
    factory = StoreFactory(store)
    spec = make_spec(make_options())
    monkeypatch.delenv(lifetime.REUSE_VARIABLE, raising=False)
    for key in range(3):
        assert run_task(spec, [key], factory, keep=None)[0]["name"] == f"user-{key}"
    assert store.opened == 3 and store.closed == 3
    monkeypatch.setenv(lifetime.REUSE_VARIABLE, "1")  # what Spark sets in a reused worker
    for key in range(3):
        assert run_task(spec, [key], factory, keep=None)[0]["name"] == f"user-{key}"
    assert store.opened == 4 and store.closed == 3


def test_what_is_never_kept() -> None:
    store = FakeStore(TABLE)
    config = make_config(make_spec(make_options()))

    class PerTask(FakeClient):
        reusable: ClassVar[bool] = False

    cases = [
        (lambda c: FakeClient(c, store), 60.0),  # a closure: nothing tells two apart
        (StoreFactory(store), 0.0),  # connection.max-idle.ms=0
    ]
    assert factory_identity(cases[0][0]) is None
    for factory, idle in cases:
        lease = lease_client(
            factory, config, identity=LookupIdentity.of(config), max_idle_s=idle, keep=True
        )
        assert not lease.kept
        lease.release(reusable=True)
    assert store.opened == 2 and store.closed == 2
    assert factory_identity(PerTask) == f"class:{PerTask.__module__}.{PerTask.__qualname__}"
    lease = lease_client(
        PerTask, config, identity=LookupIdentity.of(config), max_idle_s=60, keep=True
    )
    assert not lease.kept
    lease.release(reusable=True)


def test_a_client_held_by_a_task_is_not_closed_under_it() -> None:
    now = [0.0]
    clients = WorkerClients(clock=lambda: now[0])
    store = FakeStore(TABLE)
    factory = StoreFactory(store)
    config = make_config(make_spec(make_options()))
    held = clients.lease("a", factory, config, 1.0)
    now[0] = 100.0
    other = clients.lease("a", factory, config, 1.0)  # a second task in the same process
    assert other.client is held.client and store.closed == 0
    other.release(reusable=False)  # one task failed: the client is let go ...
    assert store.closed == 0  # ... once the other task is done with it
    held.release(reusable=True)
    assert store.closed == 1 and len(clients) == 0


def test_a_worker_keeps_at_most_so_many_clients(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lifetime, "MAX_KEPT_CLIENTS", 3)
    clock = itertools.count()
    clients = WorkerClients(clock=lambda: float(next(clock)))
    store = FakeStore(TABLE)
    factory = StoreFactory(store)
    config = make_config(make_spec(make_options()))
    leases = {}
    for name in "abcde":
        leases[name] = clients.lease(name, factory, config, 1e9)
        leases[name].release(reusable=True)
    assert len(clients) == 3 and store.opened == 5 and store.closed == 2
    again = clients.lease("e", factory, config, 1e9)
    assert again.client is leases["e"].client  # the most recent are the ones kept
    again.release(reusable=True)


def test_a_forked_child_forgets_its_parents_clients(monkeypatch: pytest.MonkeyPatch) -> None:
    store = FakeStore(TABLE)
    factory = StoreFactory(store)
    config = make_config(make_spec(make_options()))
    parent = lease_client(
        factory, config, identity=LookupIdentity.of(config), max_idle_s=60, keep=True
    )
    parent.release(reusable=True)
    parent_clients = current_worker().clients()
    monkeypatch.setattr(lifetime.os, "getpid", lambda: parent_clients.pid + 1)
    child = lease_client(
        factory, config, identity=LookupIdentity.of(config), max_idle_s=60, keep=True
    )
    assert child.client is not parent.client and child.loop is not parent.loop
    assert store.closed == 0  # the parent's sockets are the parent's: not closed by the child
    child.release(reusable=True)
    monkeypatch.undo()
    assert current_worker().clients() is not parent_clients  # (the child's replaced the parent's)


def test_the_worker_loop_survives_between_tasks_with_nothing_left_running() -> None:
    store = FakeStore(TABLE)
    store.latency = lambda keys: 0.001
    factory = StoreFactory(store)
    spec = make_spec(make_options(capacity=8, batch_size=2))
    for task in range(5):
        keys = list(range(task * 10, task * 10 + 10))
        rows = run_task(spec, keys, factory)
        assert [r["n"] for r in rows] == keys
        loop = current_worker().clients().loop._loop
        assert not loop.is_closed() and not loop.is_running()
        assert not [t for t in asyncio.all_tasks(loop) if not t.done()]


def test_when_every_kept_client_is_in_use_a_task_gets_one_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lifetime, "MAX_KEPT_CLIENTS", 2)
    clients = WorkerClients(clock=lambda: 0.0)
    store = FakeStore(TABLE)
    factory = StoreFactory(store)
    config = make_config(make_spec(make_options()))
    held = [clients.lease(name, factory, config, 60.0) for name in "ab"]
    extra = clients.lease("c", factory, config, 60.0)  # both kept ones busy: the cap holds
    assert not extra.kept and extra.loop is clients.loop and len(clients) == 2
    assert [lease.kept for lease in held] == [True, True]
    extra.release(reusable=True)
    assert store.opened == 3 and store.closed == 1  # the task's own, closed when it ended
    for lease in held:
        lease.release(reusable=True)
    again = clients.lease("c", factory, config, 60.0)  # room again: kept
    assert again.kept and len(clients) == 2 and store.closed == 2
    again.release(reusable=True)


def test_idle_clients_are_closed_without_waiting_for_the_next_task() -> None:
    now = [0.0]
    clients = WorkerClients(clock=lambda: now[0])
    store = FakeStore(TABLE)
    factory = StoreFactory(store)
    config = make_config(make_spec(make_options()))
    clients.lease("a", factory, config, 5.0).release(reusable=True)
    held = clients.lease("b", factory, config, 5.0)
    now[0] = 10.0
    assert clients.sweep() == 0  # a task holds a lease: its loop may be running
    held.release(reusable=True)
    now[0] = 12.0  # "a" idled 12 s, "b" 2 s
    assert clients.sweep() == 1 and store.closed == 1 and len(clients) == 1
    now[0] = 20.0
    assert clients.sweep() == 1 and store.closed == 2 and len(clients) == 0
    assert not clients.loop.closed  # the loop stays for the next task


def test_the_workers_sweeper_closes_idle_clients_between_tasks() -> None:
    import time

    now = [0.0]
    worker = Worker(clocks=Clocks(monotonic=lambda: now[0]), sweep_every_s=0.01)
    store = FakeStore(TABLE)
    config = make_config(make_spec(make_options()))
    identity = LookupIdentity.of(config)
    try:
        lease = worker.lease_client(
            StoreFactory(store), config, identity=identity, max_idle_s=5.0, keep=True
        )
        assert lease.kept
        lease.release(reusable=True)
        now[0] = 6.0  # past its idle limit; no task comes
        waited = 0.0
        while store.closed == 0 and waited < 5.0:  # (the sweeper thread's own pace)
            time.sleep(0.01)
            waited += 0.01
        assert store.opened == 1 and store.closed == 1
        assert len(worker.clients()) == 0
    finally:
        worker.close()


def test_closing_the_worker_stops_its_sweeper_and_flushes_its_exporter() -> None:
    worker = Worker(sweep_every_s=0.01)
    store = FakeStore(TABLE)
    config = make_config(make_spec(make_options()))
    lease = worker.lease_client(
        StoreFactory(store), config, identity=LookupIdentity.of(config), max_idle_s=5.0, keep=True
    )
    lease.release(reusable=True)
    sweeper = worker._sweeper
    assert sweeper is not None and sweeper.is_alive()

    class Exporter:
        flushed = 0

        def flush(self) -> None:
            Exporter.flushed += 1

    worker._exporter = Exporter()
    worker.close()
    assert not sweeper.is_alive() and worker._sweeper is None
    assert Exporter.flushed == 1 and worker._exporter is None
    assert store.closed == 1  # and the kept client with it


def test_a_close_that_hangs_holds_the_sweeper_back_no_longer_than_its_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import time

    monkeypatch.setattr(lifetime, "SWEEP_CLOSE_TIMEOUT_S", 0.05)

    class Hanging(FakeClient):
        async def close(self) -> None:
            while True:  # ignores its cancellation: a driver stuck on a dead socket
                try:
                    await asyncio.sleep(1)
                except asyncio.CancelledError:
                    continue

    now = [0.0]
    clients = WorkerClients(clock=lambda: now[0])
    store = FakeStore(TABLE)
    config = make_config(make_spec(make_options()))
    clients.lease("a", lambda c: Hanging(c, store), config, 5.0).release(reusable=True)
    clients.lease("b", StoreFactory(store), config, 5.0).release(reusable=True)
    now[0] = 10.0
    started = time.monotonic()
    assert clients.sweep() == 1  # one at a time: a task may come in between
    # abandoned after its limit (0.05 s), not awaited (it would never end): any finite bound
    # shows it, a generous one holds on a busy machine
    assert time.monotonic() - started < 10.0
    assert clients.sweep() == 1 and len(clients) == 0 and store.closed == 1
    fresh = clients.lease("a", StoreFactory(store), config, 5.0)  # the loop still serves
    assert run_rows(fresh) == ["user-1"]
    fresh.release(reusable=True)


def run_rows(lease: Any) -> list[Any]:
    found = lease.loop.run(lease.client.lookup([1]))
    return [found[1]["name"]]


def test_a_task_closed_from_another_thread_is_closed_by_its_own() -> None:
    """The cyclic collector may finalize an abandoned task's generator in any thread (the
    sweeper's): its close, on the worker's loop, waits for the task's thread."""
    import threading

    from lookup_source.engine.runner import LookupTask

    store = FakeStore(TABLE)
    factory = StoreFactory(store)
    spec = make_spec(make_options())
    task = LookupTask(spec, make_config(spec), client_factory=factory, keep_client=True)
    rows = [row for out in task.submit(key_batch([1, 2])) for row in out.to_pylist()]
    rows += [row for out in task.finish() for row in out.to_pylist()]
    assert [r["name"] for r in rows] == ["user-1", "user-2"]
    elsewhere = threading.Thread(target=task.close)
    elsewhere.start()
    elsewhere.join()
    assert task.metrics is not None and task.metrics.rows == 2
    assert not task._closed  # deferred: the loop may be running in the task's thread
    assert run_task(spec, [3], factory)[0]["name"] == "user-3"  # the next task closes it first
    assert task._closed and store.opened == 1 and store.closed == 0  # handed back, kept
