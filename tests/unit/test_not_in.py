"""A rewritten SQL ``NOT IN``'s rows, chosen at each run by what the store says its table holds
(:mod:`lookup_source.spark.not_in`): none for a null key, all for no row, else those whose value
is not null; a store that cannot tell fails the run, naming the table."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lookup_source.connector_api.client import TableFacts
from lookup_source.errors import SchemaError
from lookup_source.spark import not_in
from lookup_source.spark.join_markers import NOT_IN_NULL

BATCH = pa.RecordBatch.from_pydict(
    {
        "id": [1, 2, 3, 4],
        "__asynclookup_k0": [10, None, None, 40],  # id 3: a value the key cannot hold
        NOT_IN_NULL: [False, True, False, None],  # (a missing flag: taken as null)
    }
)


@pytest.mark.parametrize(
    ("facts", "ids"),
    [
        (TableFacts(null_key=False, any_row=True), [1, 3]),
        (TableFacts(null_key=True, any_row=True), []),
        (TableFacts(null_key=False, any_row=False), [1, 2, 3, 4]),
    ],
)
def test_the_rows_looked_up_follow_the_table_now(facts: TableFacts, ids: list[int]) -> None:
    kept = not_in.kept(BATCH, facts)
    assert kept.schema == BATCH.schema
    assert kept.column(0).to_pylist() == ids


class Task:
    """What not_in asks of a lookup task: the store's answer for a run."""

    def __init__(self, facts: TableFacts) -> None:
        self.facts = facts
        self.runs: list[str] = []

    def table_facts(self, run: str) -> TableFacts:
        self.runs.append(run)
        return self.facts


def test_a_store_that_cannot_tell_fails_the_run_naming_the_table() -> None:
    task = Task(TableFacts(null_key=False))
    with pytest.raises(RuntimeError, match="NOT IN over blocklist: the store cannot tell"):
        not_in.asked(task, "blocklist", "stage 1.0")  # type: ignore[arg-type]
    task.facts = TableFacts(null_key=False, any_row=True)
    assert not_in.asked(task, "blocklist", "stage 1.0") == task.facts  # type: ignore[arg-type]
    assert task.runs == ["stage 1.0", "stage 1.0"]


def test_outside_a_spark_task_each_ask_is_a_run_of_its_own() -> None:
    task = Task(TableFacts(null_key=False, any_row=True))
    not_in.asked(task, "blocklist")  # type: ignore[arg-type]
    not_in.asked(task, "blocklist")  # type: ignore[arg-type]
    assert len(set(task.runs)) == 2


def test_the_input_must_say_which_values_are_null() -> None:
    not_in.checked_input(["id", NOT_IN_NULL])
    with pytest.raises(SchemaError, match=NOT_IN_NULL):
        not_in.checked_input(["id", "__asynclookup_k0"])
