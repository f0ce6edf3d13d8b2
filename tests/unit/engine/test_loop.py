"""The event loop a task runs on (option ``loop``, lookup_source.engine.loop): asyncio's or
uvloop's, chosen per connector by ``loop=auto``; a worker keeps one of each kind per thread."""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import pytest

from lookup_source.connector_api import ConnectorConfig
from lookup_source.engine.kept.worker import current_worker, forget_worker
from lookup_source.engine.loop import LoopUnavailable, loop_kind
from lookup_source.engine.runner import run_lookups
from lookup_source.errors import OptionError
from lookup_source.settings import parse_options
from tests.fakes import FakeClient, FakeStore, key_batch, make_config, make_options, make_spec

uvloop = pytest.importorskip("uvloop", reason="the uvloop extra is not installed")

TABLE = {i: {"name": f"user-{i}", "n": i} for i in range(10)}


class LoopRecording(FakeClient):
    """A fake client that notes the type of the loop each lookup runs on."""

    seen: ClassVar[list[str]] = []

    async def lookup(self, keys: Sequence[Any]) -> Any:
        running = asyncio.get_running_loop()
        LoopRecording.seen.append("uvloop" if isinstance(running, uvloop.Loop) else "asyncio")
        return await super().lookup(keys)


class PrefersUvloop(LoopRecording):
    preferred_loop: ClassVar[str] = "uvloop"


@pytest.fixture(autouse=True)
def fresh_worker() -> Iterator[None]:
    forget_worker()
    LoopRecording.seen.clear()
    yield
    forget_worker()


def run_task(client_class: type[FakeClient], loop: str, store: FakeStore) -> list[Any]:
    spec = make_spec(make_options(loop=loop))

    def factory(config: ConnectorConfig) -> FakeClient:
        return client_class(config, store)

    factory.identity = client_class.__name__  # type: ignore[attr-defined]  # kept by the worker
    factory.preferred_loop = client_class.preferred_loop  # type: ignore[attr-defined]
    out = run_lookups(
        [key_batch([1, 2, 99, None])],
        spec,
        make_config(spec),
        client_factory=factory,
        keep_client=True,
    )
    return [row["name"] for batch in out for row in batch.to_pylist()]


@pytest.mark.parametrize(
    ("client_class", "setting", "expected"),
    [
        (LoopRecording, "auto", "asyncio"),
        (PrefersUvloop, "auto", "uvloop"),
        (PrefersUvloop, "asyncio", "asyncio"),
        (LoopRecording, "uvloop", "uvloop"),
    ],
)
def test_the_loop_is_the_option_or_the_connectors_preference(
    client_class: type[FakeClient], setting: str, expected: str
) -> None:
    store = FakeStore(TABLE)
    assert run_task(client_class, setting, store) == ["user-1", "user-2", None, None]
    assert LoopRecording.seen and set(LoopRecording.seen) == {expected}


def test_a_worker_keeps_a_loop_of_each_kind_per_thread_and_closes_both_with_it() -> None:
    store = FakeStore(TABLE)
    loops: dict[str, Any] = {}

    def work() -> None:
        for _ in range(3):  # task after task: each kind's client opened once
            assert run_task(LoopRecording, "asyncio", store)[0] == "user-1"
            assert run_task(LoopRecording, "uvloop", store)[1] == "user-2"
        worker = current_worker()
        loops.update(asyncio=worker.clients("asyncio").loop, uvloop=worker.clients("uvloop").loop)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    gc.collect()
    assert LoopRecording.seen == ["asyncio", "uvloop"] * 3
    assert isinstance(loops["uvloop"]._loop, uvloop.Loop)
    assert not isinstance(loops["asyncio"]._loop, uvloop.Loop)
    assert store.opened == 2 and store.closed == 2  # one client per loop, closed with the thread
    assert loops["asyncio"].closed and loops["uvloop"].closed


def test_without_uvloop_auto_falls_back_and_uvloop_is_one_clear_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # as on an executor without it
    assert loop_kind("auto", "uvloop") == "asyncio"
    store = FakeStore(TABLE)
    assert run_task(PrefersUvloop, "auto", store) == ["user-1", "user-2", None, None]
    assert LoopRecording.seen == ["asyncio"]
    with pytest.raises(LoopUnavailable, match=r"^loop=uvloop: uvloop is not installed") as failed:
        run_task(LoopRecording, "uvloop", store)
    assert "\n" not in str(failed.value)


def test_an_unknown_loop_names_the_option() -> None:
    with pytest.raises(OptionError, match=r"'loop'.*tokio"):
        parse_options({"connector": "redis", "url": "redis://localhost", "loop": "tokio"})
    assert parse_options({"connector": "redis", "url": "redis://localhost"}).loop == "auto"


class SubMillisecond(LoopRecording):
    """Answers in 0.3 ms of work, without giving the loop a turn meanwhile."""

    preferred_loop: ClassVar[str] = "uvloop"

    async def lookup(self, keys: Sequence[Any]) -> Any:
        import time

        until = time.perf_counter() + 0.0003
        while time.perf_counter() < until:
            pass
        return await super().lookup(keys)


def test_a_sub_millisecond_answer_is_timed_as_such_on_uvloop() -> None:
    """uvloop's own clock counts whole milliseconds, cached per turn of the loop: a Redis
    answer of 0.3 ms would read 0 ms in the latencies, the hedging window and the limit."""
    from lookup_source.engine.loop import loop_factory_of

    loop = loop_factory_of("uvloop")()
    try:
        assert isinstance(loop, uvloop.Loop)
        first = loop.time()
        import time

        until = time.perf_counter() + 0.0002
        while time.perf_counter() < until:
            pass
        assert 0.0001 < loop.time() - first < 0.25  # above: a unit slip, not a busy machine
    finally:
        loop.close()
    metrics: list[Any] = []
    spec = make_spec(make_options(loop="auto", batch_size=1))

    def factory(config: ConnectorConfig) -> FakeClient:
        return SubMillisecond(config, FakeStore(TABLE))

    factory.preferred_loop = "uvloop"  # type: ignore[attr-defined]
    rows = run_lookups(
        [key_batch([1, 2, 3])],
        spec,
        make_config(spec),
        client_factory=factory,
        on_metrics=metrics.append,
    )
    assert [r["name"] for b in rows for r in b.to_pylist()] == ["user-1", "user-2", "user-3"]
    assert LoopRecording.seen == ["uvloop"] * 3
    assert 0.2 < metrics[0].p50_ms < 250 and 0.2 < metrics[0].latency_max_ms < 250


def test_a_task_loop_counts_the_time_it_did_not_run_for_every_task_it_started() -> None:
    """Between two runs of a TaskLoop (Spark holding the task) answers may arrive unread: the
    time the loop did not run is seen by every coroutine on it, those a previous run started
    included, and by nothing outside it; two loops keep their own."""
    import time as clock

    from lookup_source.engine.loop import TaskLoop, time_paused

    seen: list[float] = []
    started_tasks: list[asyncio.Future[None]] = []
    with TaskLoop() as one, TaskLoop() as other:

        async def started() -> asyncio.Future[None]:
            go = asyncio.get_running_loop().create_future()

            async def later() -> None:
                await go
                seen.append(time_paused())

            started_tasks.append(asyncio.ensure_future(later()))
            return go

        async def now() -> float:
            return time_paused()

        go = one.run(started())
        assert one.run(now()) < 0.05
        clock.sleep(0.2)
        go.set_result(None)
        one.run(asyncio.sleep(0.01))  # the task the first run started reads it
        assert seen and seen[0] >= 0.19, seen
        assert one.run(now()) >= 0.19
        assert other.run(now()) < 0.05  # a loop of its own
    assert time_paused() == 0.0  # outside a TaskLoop

    async def on_a_plain_loop() -> float:
        return time_paused()

    assert asyncio.run(on_a_plain_loop()) == 0.0  # a loop not run by a TaskLoop
