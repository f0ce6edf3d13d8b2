"""While a task's lookups run, the garbage collector's youngest generation waits for
``gc.threshold`` new objects; what was there before comes back when the last task ends."""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

import lookup_source.engine.kept.gc_tuning as gc_tuning
from lookup_source.engine.kept.worker import forget_worker
from lookup_source.engine.runner import run_lookups
from lookup_source.errors import OptionError
from lookup_source.settings import parse_options
from tests.fakes import FakeClient, FakeStore, key_batch, make_config, make_options, make_spec


@pytest.fixture(autouse=True)
def python_default() -> Iterator[None]:
    forget_worker()
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*before)


class SeesThreshold(FakeClient):
    seen: list[int] = []

    async def lookup(self, keys: Sequence[Any]) -> Any:
        SeesThreshold.seen.append(gc.get_threshold()[0])
        return await super().lookup(keys)


def lookups(threshold: int) -> list[dict[str, Any]]:
    spec = make_spec(make_options(gc_threshold=threshold))
    store = FakeStore({i: {"name": f"user-{i}", "n": i} for i in range(50)})
    out = run_lookups(
        [key_batch(list(range(60)))],
        spec,
        make_config(spec),
        client_factory=lambda c: SeesThreshold(c, store),
    )
    return [row for batch in out for row in batch.to_pylist()]


def test_a_task_collects_less_often_while_it_runs_then_restores_pythons_setting() -> None:
    SeesThreshold.seen = []
    rows = lookups(10_000)
    assert [r["name"] for r in rows] == [f"user-{i}" for i in range(50)] + [None] * 10
    assert SeesThreshold.seen and set(SeesThreshold.seen) == {10_000}
    assert gc.get_threshold() == (700, 10, 10)


def test_zero_leaves_the_collector_alone_and_a_higher_setting_is_kept() -> None:
    SeesThreshold.seen = []
    lookups(0)
    assert set(SeesThreshold.seen) == {700}
    gc.set_threshold(50_000, 10, 10)  # the user's own, higher
    SeesThreshold.seen = []
    lookups(10_000)
    assert set(SeesThreshold.seen) == {50_000}
    assert gc.get_threshold() == (50_000, 10, 10)


def test_a_disabled_collector_stays_disabled() -> None:
    held = gc_tuning.GcHold()
    gc.disable()
    try:
        assert not held.hold(10_000)
        assert gc.get_threshold()[0] == 700 and not gc.isenabled()
    finally:
        gc.enable()


def test_overlapping_tasks_restore_only_when_the_last_ends() -> None:
    held = gc_tuning.GcHold()
    assert held.hold(10_000)
    assert held.hold(20_000)  # a second task: the first one's raise serves it
    assert gc.get_threshold()[0] == 10_000
    held.release()
    assert gc.get_threshold()[0] == 10_000  # the other task still runs
    held.release()
    assert gc.get_threshold() == (700, 10, 10)
    assert held.hold(5_000)
    assert gc.get_threshold()[0] == 5_000
    held.release()
    assert gc.get_threshold()[0] == 700


def test_the_option_takes_a_count_of_objects() -> None:
    base = {"connector": "redis", "url": "redis://localhost"}
    assert parse_options(base).gc_threshold == 10_000
    assert parse_options({**base, "gc.threshold": "0"}).gc_threshold == 0
    with pytest.raises(OptionError, match="gc.threshold"):
        parse_options({**base, "gc.threshold": "-1"})
