"""A SQL ``NOT IN (SELECT key FROM table)`` the extension rewrote, answered as Spark's join at
every run, whatever the table held when the query was analyzed.

Spark's answer depends on the whole table: one null key and no row is ``NOT IN`` it (the
comparison with null is unknown); an empty table and every row is, null values too; else the
rows whose value is not null and not a key. A DataFrame is collected again, a stream runs for
days, a cached plan is read again: the table function asks the store at each run (two
probes that stop at the first row, once per worker and run: the tasks of a Spark stage share
one answer, :mod:`~lookup_source.engine.kept.table_facts`) and keeps the rows Spark would.
The rewrite hands it each row's value's nullness (:data:`~.join_markers.NOT_IN_NULL`: its key
may be null for a value the table's key cannot hold, which is simply not in the table).
"""

from __future__ import annotations

import uuid

import pyarrow as pa
import pyarrow.compute as pc

from lookup_source.connector_api.client import TableFacts
from lookup_source.engine.runner import LookupTask
from lookup_source.errors import SchemaError
from lookup_source.spark.join_markers import NOT_IN_NULL


def checked_input(names: list[str]) -> None:
    """A ``NOT IN``'s input must carry :data:`NOT_IN_NULL` (the rewrite adds it)."""
    if NOT_IN_NULL not in names:
        raise SchemaError(f"a NOT IN's input has no column {NOT_IN_NULL}")


def current_run() -> str:
    """The run this task belongs to: its Spark stage (ids are never reused in an application:
    the query run again, or a stream's next micro-batch, is a new stage); outside a Spark task,
    a run of its own."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return uuid.uuid4().hex
    return f"stage {context.stageId()}"


def asked(task: LookupTask, table: str, run: str | None = None) -> TableFacts:
    """What the store says its table holds in this run (``run``, by default
    :func:`current_run`), asked through ``task``'s client; an error naming ``table`` if it
    cannot tell (the rewrite was made where it could: a store that stops answering fails the
    query)."""
    facts = task.table_facts(current_run() if run is None else run)
    if not facts.known:
        raise RuntimeError(
            f"NOT IN over {table}: the store cannot tell now whether its table holds a null key "
            "or any row, which decides the answer"
        )
    return facts


def kept(batch: pa.RecordBatch, facts: TableFacts) -> pa.RecordBatch:
    """The rows of ``batch`` to look up (an anti join keeps those whose key no row has): none
    where the table holds a null key; all where it holds no row; else those whose value is not
    null."""
    if facts.null_key:
        return batch.slice(0, 0)
    if not facts.any_row:
        return batch
    is_null = batch.column(batch.schema.get_field_index(NOT_IN_NULL))
    return batch.filter(pc.invert(pc.fill_null(is_null, True)))
