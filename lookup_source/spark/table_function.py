"""The lookup-join table function of a registered lookup table: ``<name>_lookup(TABLE(t), 'key')``.

A Python UDTF with ``analyze`` (its output schema is the input table's columns plus the value
columns) whose ``eval`` receives the ``TABLE`` argument as Arrow batches and runs the async
engine on them, one :class:`~lookup_source.engine.runner.LookupTask` per instance. Needs
PySpark 4.1 (Arrow UDTFs); :func:`lookup_source.register_lookup_table` checks that first.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.types import StructType
from pyspark.sql.udtf import AnalyzeArgument, AnalyzeResult, PartitioningColumn

from lookup_source.connector_api.client import TableFacts
from lookup_source.engine.intake.ranges import pushed_ranges
from lookup_source.engine.output.match_conditions import parse_match_conditions
from lookup_source.engine.runner import ClientFactory, LookupTask
from lookup_source.engine.spec import DEFAULT_OUTPUT_ROWS, HOW_ALIASES, HOWS
from lookup_source.errors import SchemaError
from lookup_source.spark import not_in as not_in_input
from lookup_source.spark.declared_output import DeclaredOutput
from lookup_source.spark.join_checks import (
    RuleFacts,
    decided,
    describe_failure,
    for_sql_join,
    not_in_refusal,
    refusal,
    untravelled,
    veto,
)
from lookup_source.spark.join_markers import NOT_IN, SQL_JOIN
from lookup_source.spark.plan import LookupPlan, output_rows
from lookup_source.spark.shape import TABLE_ARGUMENT, output_schema, resolve_on
from lookup_source.spark.strategy import sql_join_decision
from lookup_source.spark.versions import is_connect


@dataclass
class LookupAnalyzeResult(AnalyzeResult):
    """What ``analyze`` hands to each instance of the table function."""

    on: tuple[str, ...] = ()
    how: str = "left"
    input_schema: StructType | None = None
    matched: str | None = None
    sql_join: bool = False
    conditions: str = ""
    """Conditions on each pair of a row and a match, as JSON (:mod:`.match_conditions`)."""
    not_in: bool = False
    """A SQL ``NOT IN`` the extension rewrote: its rows depend on the table when it runs."""


def _constant(argument: AnalyzeArgument | None, what: str, default: str | None = None) -> str:
    if argument is None:
        if default is None:
            raise SchemaError(f"the lookup table function needs {what}")
        return default
    if argument.isTable or not isinstance(argument.value, str):
        raise SchemaError(f"{what} must be a constant string")
    return argument.value


def _analyze(
    plan: LookupPlan,
    buckets: int,
    table: AnalyzeArgument,
    keys: AnalyzeArgument | None,
    how: AnalyzeArgument | None,
    matched: AnalyzeArgument | None = None,
    mode: AnalyzeArgument | None = None,
    conditions: AnalyzeArgument | None = None,
    facts: AnalyzeArgument | None = None,
) -> LookupAnalyzeResult:
    """The lookup table function's ``analyze``. Called by the SQL extension for a JOIN it
    rewrites (``mode`` ``'sql-join'``, and ``facts``: what the rule knows of the query), it
    never raises: it refuses instead, when the table's ``strategy`` leaves the join to Spark or
    the lookup could not give Spark's join's rows (:mod:`.join_checks`); else it says why the
    join runs as lookups."""
    sql_join = mode is not None and _constant(mode, "the mode").strip() == SQL_JOIN
    if not sql_join:
        return _analyzed(plan, buckets, table, keys, how, matched, conditions)
    try:
        not_in = how is not None and _constant(how, "how").strip().lower() == NOT_IN
        if not_in and how is not None:  # the SQL extension's NOT IN: an anti join (its nulls
            how = dataclasses.replace(how, value="anti")  # filtered out by the extension)
        told = RuleFacts.parse(None if facts is None else _constant(facts, "the rule's facts"))
        lookups, decision = sql_join_decision(plan, told.input_rows)
        why = told.disagreement(plan) if lookups else decision
        result = _analyzed(plan, buckets, table, keys, how, matched, conditions)
        why = why or untravelled(result.input_schema or StructType()) or refusal(plan)
        if why is None and not_in:
            not_in_input.checked_input(list((result.input_schema or StructType()).names))
            why = not_in_refusal(plan)
    except Exception as error:  # never fail the query: leave the join to Spark
        why = describe_failure(error)
    if why is not None:
        return LookupAnalyzeResult(schema=veto(why))
    result.schema = decided(result.schema, result.on[0], decision, told.rewrite)
    result.sql_join = True
    result.not_in = not_in
    return result


def _analyzed(
    plan: LookupPlan,
    buckets: int,
    table: AnalyzeArgument,
    keys: AnalyzeArgument | None,
    how: AnalyzeArgument | None,
    matched: AnalyzeArgument | None = None,
    conditions: AnalyzeArgument | None = None,
) -> LookupAnalyzeResult:
    """The lookup table function's output schema (``TABLE(t)``'s columns, then the value
    columns, then the match flag when one is named), the key columns, the join and the
    conditions on its pairs, checked; with ``partition.by-key``, the bucket of the key Spark
    partitions ``TABLE(t)`` by."""
    if not table.isTable or not isinstance(table.dataType, StructType):
        raise SchemaError(
            "the first argument of a lookup table function is a table: "
            "TABLE(events) or TABLE(SELECT ...)"
        )
    on_text = _constant(keys, "the key column(s) of the table, e.g. 'user_id'")
    join = _constant(how, "how ('left', 'inner', 'semi' or 'anti')", "left").lower().strip()
    join = HOW_ALIASES.get(join, join)
    if join not in HOWS:
        raise SchemaError(f"how must be 'left', 'inner', 'semi' or 'anti', got {join!r}")
    flag = None
    if matched is not None:  # (empty: none)
        flag = _constant(matched, "the name of the match flag column").strip() or None
    on = tuple(resolve_on(table.dataType, on_text, plan, TABLE_ARGUMENT))
    pairs = "" if conditions is None else _constant(conditions, "the match conditions")
    checked_conditions(pairs, table.dataType, plan)
    # partition.by-key: Spark hash-partitions TABLE(t) by a bucket of the key. Not by the key
    # itself: PySpark starts a new instance of the function (a new client) for each distinct
    # value of what it partitions by; a bucket per shuffle partition keeps that to about one
    # instance per task.
    bucket = f"pmod(hash({', '.join(map(_quoted, on))}), {buckets})"
    return LookupAnalyzeResult(
        schema=output_schema(table.dataType, plan, TABLE_ARGUMENT, matched_column=flag, how=join),
        partitionBy=(PartitioningColumn(bucket),) if plan.options.partition_by_key else (),
        on=on,
        how=join,
        input_schema=table.dataType,
        matched=flag,
        conditions=pairs,
    )


def lookup_table_function(
    plan: LookupPlan,
    metrics: Any = None,
    spark: Any = None,
    client_factory: ClientFactory | None = None,
    name: str = "",
) -> Any:
    """A Python UDTF that performs the lookup join of ``plan`` from SQL, on Arrow batches;
    ``name`` (the registered table's) names the lookup in its metrics and log lines."""
    handler = lookup_handler(
        plan,
        buckets=_shuffle_partitions(spark),
        rows_per_batch=output_rows(spark) if spark is not None else DEFAULT_OUTPUT_ROWS,
        metrics=metrics,
        client_factory=client_factory,
        name=name,
    )
    return _arrow_table_function(handler, spark)


def lookup_handler(
    plan: LookupPlan,
    *,
    buckets: int = 200,
    rows_per_batch: int = DEFAULT_OUTPUT_ROWS,
    metrics: Any = None,
    client_factory: ClientFactory | None = None,
    name: str = "",
) -> type:
    """The class a lookup table function runs: ``analyze`` (static), then per instance
    ``eval`` on each Arrow batch of ``TABLE(t)``, ``terminate`` and ``cleanup``. Its arguments:
    ``TABLE(t)``, the key column(s), optionally ``'left'`` (default), ``'inner'``, ``'semi'``
    (the rows whose key exists, once, without the value columns) or ``'anti'`` (those whose
    key does not), and, as the SQL extension calls it for a JOIN, the name of a match flag
    column to add (empty: none) and the mode ``'sql-join'`` (Spark's equality of keys, every
    match of a key, a key the store cannot hold a miss; refuse what could not give Spark's
    join's rows)."""

    class LookupJoinFunction(_LookupRuns):
        lookup = _Lookup(plan, rows_per_batch, metrics, client_factory, name)

        @staticmethod
        def analyze(
            table: AnalyzeArgument,
            keys: AnalyzeArgument | None = None,
            how: AnalyzeArgument | None = None,
            matched: AnalyzeArgument | None = None,
            mode: AnalyzeArgument | None = None,
            conditions: AnalyzeArgument | None = None,
            facts: AnalyzeArgument | None = None,
        ) -> AnalyzeResult:
            return _analyze(plan, buckets, table, keys, how, matched, mode, conditions, facts)

    return LookupJoinFunction


@dataclass(frozen=True)
class _Lookup:
    """What every instance of a lookup table function runs with."""

    plan: LookupPlan
    rows_per_batch: int
    metrics: Any
    client_factory: ClientFactory | None
    name: str


class _LookupRuns:
    """An instance of a lookup table function (:func:`lookup_handler` adds its ``lookup`` and
    its ``analyze``): one :class:`LookupTask` over the Arrow batches of its input."""

    lookup: _Lookup

    def __init__(self, analyze_result: LookupAnalyzeResult) -> None:
        lookup = self.lookup
        joined = for_sql_join(lookup.plan) if analyze_result.sql_join else lookup.plan
        if not analyze_result.conditions:  # (conditions on the pairs read the values)
            joined = joined.for_how(analyze_result.how)
        self.config = joined.connector_config()
        self.spec = joined.engine_spec(
            analyze_result.on,
            how=analyze_result.how,
            output_rows=lookup.rows_per_batch,
            name=lookup.name,
            matched_column=analyze_result.matched,
        )
        self.conditions = analyze_result.conditions
        self.not_in = analyze_result.not_in
        self.table_facts: TableFacts | None = None
        """A NOT IN's: what the store says its table holds, asked at this task's first batch."""
        self.output = DeclaredOutput(analyze_result.schema)
        """Each batch handed back cast to the schema PySpark declared for it."""
        self.input_schema = pa.schema([])
        self.task: LookupTask | None = None
        self.failed = False

    def eval(
        self,
        table: pa.RecordBatch,
        keys: pa.Array,
        how: pa.Array | None = None,
        matched: pa.Array | None = None,
        mode: pa.Array | None = None,
        conditions: pa.Array | None = None,
        facts: pa.Array | None = None,
    ) -> Iterator[pa.RecordBatch]:
        try:
            if self.task is None:
                metrics = self.lookup.metrics
                spec = self.spec
                if self.conditions:  # their types: the input's, as Arrow brings it
                    pairs = parse_match_conditions(self.conditions, table.schema, spec.value_fields)
                    spec = dataclasses.replace(spec, match_conditions=pairs)
                    ranges = pushed_ranges(pairs, table.schema)  # a validity range, if any
                    spec = dataclasses.replace(spec, pushed_ranges=ranges)
                self.task = LookupTask(
                    spec,
                    self.config,
                    client_factory=self.lookup.client_factory,
                    on_metrics=metrics.add if metrics is not None else None,
                )
            self.input_schema = table.schema
            if self.not_in:
                if self.table_facts is None:
                    self.table_facts = not_in_input.asked(self.task, self.lookup.name)
                table = not_in_input.kept(table, self.table_facts)
            yield from self.output.conform(self.task.submit(table), table.schema)
        except Exception:
            self.failed = True
            raise

    def terminate(self) -> Iterator[pa.RecordBatch]:
        # the end of this instance's input: under PARTITION BY, PySpark then starts another
        # instance for the next partition and calls cleanup on the last one only, so each
        # instance hands its client back here (the worker keeps it for the next one)
        if self.task is not None:
            try:
                yield from self.output.conform(self.task.finish(), self.input_schema)
            except Exception:
                self.failed = True
                raise
            finally:
                self.task.close(failed=self.failed)

    def cleanup(self) -> None:
        if self.task is not None:
            self.task.close(failed=self.failed)


def checked_conditions(text: str, input_schema: StructType, plan: LookupPlan) -> None:
    """Conditions on the pairs (JSON, :mod:`~lookup_source.engine.output.match_conditions`)
    that name ``TABLE(t)``'s columns and the value columns, each comparing one Spark type with
    itself; a SchemaError naming what is wrong otherwise."""
    if not text.strip():
        return
    from pyspark.sql.types import StructType as Struct

    values = Struct(list(plan.value_fields))
    try:
        items = json.loads(text)
    except ValueError as error:
        raise SchemaError(f"the match conditions are not JSON: {error}") from None
    for item in items if isinstance(items, list) else [items]:
        kinds = [
            _operand_type(item.get(side) if isinstance(item, dict) else None, input_schema, values)
            for side in ("left", "right")
        ]
        known = [k for k in kinds if k is not None]
        if not known or any(k != known[0] for k in known):
            raise SchemaError(f"a match condition must compare two operands of one type: {item}")


def _operand_type(spec: Any, input_schema: StructType, values: StructType) -> Any:
    for side, schema in (("input", input_schema), ("value", values)):
        if isinstance(spec, dict) and side in spec:
            for field in schema.fields:
                if field.name == spec[side]:
                    return field.dataType
            raise SchemaError(f"a match condition names no {side} column {spec[side]!r}")
    if isinstance(spec, dict) and spec.get("literal") is not None:
        return None
    raise SchemaError(f"a match condition's operand is not a column or a literal: {spec!r}")


def _arrow_table_function(handler: type, spark: Any = None) -> Any:
    """``handler`` as an Arrow UDTF: ``eval`` receives the TABLE argument as whole Arrow batches
    and yields Arrow batches, with no Python object per row.

    ``pyspark.sql.functions.arrow_udtf`` refuses a class with ``analyze`` (SPARK-53286, open
    in 4.3), although the worker runs one as it runs any UDTF's; the lookup table function
    needs ``analyze`` to take its output schema from ``TABLE(t)``. So the UDTF is built the way
    ``arrow_udtf`` builds it, without that one check.
    """
    from pyspark.util import PythonEvalType

    if spark is not None and is_connect(spark):
        from pyspark.sql.connect.udtf import UserDefinedTableFunction as ConnectUDTF

        return ConnectUDTF(handler, None, evalType=PythonEvalType.SQL_ARROW_UDTF)
    from pyspark.sql.udtf import UserDefinedTableFunction

    return UserDefinedTableFunction(handler, None, evalType=PythonEvalType.SQL_ARROW_UDTF)


def _shuffle_partitions(spark: Any) -> int:
    """spark.sql.shuffle.partitions (200 when unknown, or not a number)."""
    try:
        return max(1, int(spark.conf.get("spark.sql.shuffle.partitions")))
    except Exception:
        return 200


def _quoted(column: str) -> str:
    return "`" + column.replace("`", "``") + "`"
