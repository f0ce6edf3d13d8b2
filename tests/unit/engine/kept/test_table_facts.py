"""What a store says of its whole table, asked once per run in a worker
(lookup_source.engine.kept.table_facts): the tasks of one run share one answer, asked by the
first through its own client; the next run, or another lookup, asks again; an answer the
store could not give is not kept; the most recent runs only are kept."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from lookup_source.connector_api import TableFacts
from lookup_source.engine.kept.table_facts import MAX_KEPT_RUNS, KeptTableFacts
from lookup_source.engine.kept.worker import Worker
from lookup_source.engine.runner import LookupTask
from lookup_source.testing.clock import virtual_worker
from tests.fakes import FakeClient, FakeStore, StoreFactory, make_config, make_options, make_spec

HOLDS_ROWS = TableFacts(null_key=False, any_row=True)


class Store:
    def __init__(self, *answers: TableFacts) -> None:
        self.answers = list(answers)
        self.asked = 0

    def __call__(self) -> TableFacts:
        self.asked += 1
        return self.answers.pop(0)


def test_one_answer_per_lookup_and_run() -> None:
    kept = KeptTableFacts(clock=lambda: 0.0)
    store = Store(HOLDS_ROWS, TableFacts(null_key=True, any_row=True), HOLDS_ROWS)
    assert kept.get("users", "stage 1.0", store) == HOLDS_ROWS
    assert kept.get("users", "stage 1.0", store) == HOLDS_ROWS  # the same run: kept
    assert store.asked == 1
    assert kept.get("users", "stage 2.0", store).null_key is True  # the next run asks
    assert kept.get("orders", "stage 2.0", store) == HOLDS_ROWS  # so does another lookup
    assert store.asked == 3 and len(kept) == 3


def test_an_answer_the_store_could_not_give_is_asked_again() -> None:
    kept = KeptTableFacts(clock=lambda: 0.0)
    store = Store(TableFacts(null_key=False), HOLDS_ROWS)
    assert not kept.get("users", "stage 1.0", store).known
    assert kept.get("users", "stage 1.0", store) == HOLDS_ROWS
    assert store.asked == 2 and len(kept) == 1


def test_only_the_most_recent_runs_are_kept() -> None:
    kept = KeptTableFacts(clock=lambda: 0.0)
    store = Store(*[HOLDS_ROWS] * (MAX_KEPT_RUNS + 2))
    for run in range(MAX_KEPT_RUNS + 1):
        kept.get("users", f"stage {run}.0", store)
    assert len(kept) == MAX_KEPT_RUNS
    kept.get("users", "stage 0.0", store)  # the oldest went: asked again
    assert store.asked == MAX_KEPT_RUNS + 2


class FactsClient(FakeClient):
    """A fake store that says what its table holds, counting how often it is asked."""

    async def table_facts(self) -> TableFacts:
        asked = getattr(self.store, "facts_asked", 0)
        self.store.facts_asked = asked + 1  # type: ignore[attr-defined]
        table = self.store.table
        return TableFacts(null_key=None in table, any_row=bool(table))


class FactsFactory(StoreFactory):
    def __call__(self, config: Any) -> FactsClient:
        return FactsClient(config, self.store)


@pytest.fixture
def worker() -> Iterator[Worker]:
    made = virtual_worker()
    yield made
    made.close()


def test_tasks_of_a_run_ask_their_store_once_through_their_client(worker: Worker) -> None:
    store = FakeStore({1: {"name": "a"}})
    spec = make_spec(make_options())

    def task_facts(run: str) -> TableFacts:
        factory = FactsFactory(store)
        task = LookupTask(spec, make_config(spec), client_factory=factory, worker=worker)
        try:
            return task.table_facts(run)
        finally:
            task.close()

    assert task_facts("stage 4.0") == HOLDS_ROWS
    store.table.clear()  # the table emptied: the run's next task keeps the run's answer...
    assert task_facts("stage 4.0") == HOLDS_ROWS
    assert store.facts_asked == 1  # type: ignore[attr-defined]
    assert task_facts("stage 5.0") == TableFacts(null_key=False, any_row=False)  # ...not the next
    store.table[None] = {"name": "n"}
    assert task_facts("stage 6.0") == TableFacts(null_key=True, any_row=True)
    assert store.facts_asked == 3  # type: ignore[attr-defined]
