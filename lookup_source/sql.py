"""SQL access: a registered lookup table and a lookup-join table function.

::

    from lookup_source import register_lookup_table

    register_lookup_table(spark, "users", schema="user_id long, name string, tier int",
                          options={"connector": "redis", "url": "redis://localhost:6379/0",
                                   "redis.key.pattern": "user:{key}"})

    spark.sql("SELECT * FROM users WHERE user_id IN (1, 2, 3)")
    spark.sql("SELECT * FROM users_lookup(TABLE(events), 'user_id')")          # left join
    spark.sql("SELECT * FROM users_lookup(TABLE(events), 'user_id', 'inner')")

A SQL ``JOIN`` against ``users`` is planned by Spark as a full scan of the table (join keys are
never pushed into a Python data source), so it works only for stores that can scan and reads
the whole table; the table function looks up just the keys of the events, on each task.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import StructType, TimestampType
from pyspark.sql.udtf import AnalyzeArgument, AnalyzeResult

from lookup_source.errors import OptionError, SchemaError
from lookup_source.join import output_schema, resolve_on
from lookup_source.metrics import new_accumulator
from lookup_source.options import LookupOptions, parse_options
from lookup_source.plan import LookupPlan
from lookup_source.runner import LookupTask

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROWS_PER_BATCH = 5_000
"""Rows the table function gathers into one Arrow batch before looking their keys up."""

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def register_lookup_table(
    spark: SparkSession,
    name: str,
    *,
    options: Mapping[str, Any] | LookupOptions,
    schema: StructType | str | None = None,
    pushdown: bool = False,
) -> None:
    """Register ``name`` (a temporary view over the ``asynclookup`` data source) and the table
    function ``<name>_lookup(TABLE(t), 'key_column[,key_column]' [, 'left' | 'inner'])``.

    Without ``schema``, the store describes the table (Postgres) and its primary key is the key.

    ``pushdown=True`` lets ``WHERE key IN (...)`` fetch just those keys (with
    ``spark.sql.python.filterPushdown.enabled=true``). It is off by default because Spark 4.3
    caches the pushed-down key list per view and reuses it for a later query on the view whose
    filters it cannot push (``SELECT *``, ``OR``...), which would then see only those keys. Off,
    such queries scan the table (Postgres, Redis) and Spark filters the rows: always right.
    """
    if not isinstance(name, str) or not _NAME.match(name):
        raise SchemaError(f"lookup table name {name!r} must be a plain SQL identifier")
    from lookup_source.datasource import AsyncLookupDataSource

    raw = _raw_options(options)
    if not any(key.strip().lower() == "filter.pushdown" for key in raw):
        raw["filter.pushdown"] = "true" if pushdown else "false"
    lookup_options = parse_options(raw)
    if schema is None:
        ddl, keys = lookup_options.connector_class().infer_schema(lookup_options)
        schema = ddl
        if lookup_options.key_columns is None:
            raw["key.column"] = ",".join(keys)
            lookup_options = parse_options(raw)
    plan = LookupPlan.build(lookup_options, schema)
    spark.dataSource.register(AsyncLookupDataSource)
    reader = spark.read.format("asynclookup").options(**raw).schema(plan.schema)
    reader.load().createOrReplaceTempView(name)
    metrics = new_accumulator(spark, name)  # lookup_metrics(name) reads it
    spark.udtf.register(f"{name}_lookup", lookup_table_function(plan, metrics))


def _raw_options(options: Mapping[str, Any] | LookupOptions) -> dict[str, str]:
    if isinstance(options, LookupOptions):
        raise OptionError(
            "options", "register_lookup_table takes the options as a mapping of strings"
        )
    from lookup_source.options import _stringify

    return {str(k): v if isinstance(v, str) else _stringify(v) for k, v in options.items()}


@dataclass
class LookupAnalyzeResult(AnalyzeResult):
    """What ``analyze`` hands to each instance of the table function."""

    on: tuple[str, ...] = ()
    how: str = "left"
    input_schema: StructType | None = None


def _constant(argument: AnalyzeArgument | None, what: str, default: str | None = None) -> str:
    if argument is None:
        if default is None:
            raise SchemaError(f"the lookup table function needs {what}")
        return default
    if argument.isTable or not isinstance(argument.value, str):
        raise SchemaError(f"{what} must be a constant string")
    return argument.value


def _passthrough_arrow_schema(schema: StructType) -> pa.Schema:
    # Rows reach eval() as Python values: keep top-level timestamps naive so that they go back
    # to Spark exactly as they came.
    fields = []
    for field in schema.fields:
        arrow = to_arrow_type(field.dataType, timezone="UTC")
        if isinstance(field.dataType, TimestampType):
            arrow = pa.timestamp("us")
        fields.append(pa.field(field.name, arrow))
    return pa.schema(fields)


def lookup_table_function(plan: LookupPlan, metrics: Any = None) -> Any:
    """A Python UDTF class that performs the lookup join of ``plan`` from SQL."""
    from pyspark.sql.functions import udtf

    class LookupJoinFunction:
        @staticmethod
        def analyze(
            table: AnalyzeArgument,
            keys: AnalyzeArgument | None = None,
            how: AnalyzeArgument | None = None,
        ) -> AnalyzeResult:
            if not table.isTable or not isinstance(table.dataType, StructType):
                raise SchemaError(
                    "the first argument of a lookup table function is a table: "
                    "TABLE(events) or TABLE(SELECT ...)"
                )
            on_text = _constant(keys, "the key column(s) of the table, e.g. 'user_id'")
            join = _constant(how, "how ('left' or 'inner')", "left").lower()
            if join not in ("left", "inner"):
                raise SchemaError(f"how must be 'left' or 'inner', got {join!r}")
            on = tuple(resolve_on(table.dataType, on_text, plan))
            return LookupAnalyzeResult(
                schema=output_schema(table.dataType, plan),
                on=on,
                how=join,
                input_schema=table.dataType,
            )

        def __init__(self, analyze_result: LookupAnalyzeResult) -> None:
            assert analyze_result.input_schema is not None
            self.input_names = analyze_result.input_schema.fieldNames()
            self.arrow_schema = _passthrough_arrow_schema(analyze_result.input_schema)
            self.spec = plan.engine_spec(analyze_result.on, how=analyze_result.how)
            self.rows: list[dict[str, Any]] = []
            self.task: LookupTask | None = None

        def _submit(self) -> Iterator[tuple[Any, ...]]:
            if self.task is None:
                self.task = LookupTask(
                    self.spec,
                    plan.connector_config(),
                    on_stats=metrics.add if metrics is not None else None,
                )
            if self.rows:
                batch = pa.RecordBatch.from_pylist(self.rows, schema=self.arrow_schema)
                self.rows = []
                for out in self.task.submit(batch):
                    yield from _tuples(out)

        def eval(self, row: Any, keys: str, how: str | None = None) -> Iterator[tuple[Any, ...]]:
            self.rows.append(row.asDict(recursive=True))
            if len(self.rows) >= ROWS_PER_BATCH:
                yield from self._submit()

        def terminate(self) -> Iterator[tuple[Any, ...]]:
            yield from self._submit()
            assert self.task is not None
            for out in self.task.finish():
                yield from _tuples(out)

        def cleanup(self) -> None:
            if self.task is not None:
                self.task.close()

    return udtf(LookupJoinFunction, useArrow=True)


def _tuples(batch: pa.RecordBatch) -> Iterator[tuple[Any, ...]]:
    columns = [column.to_pylist() for column in batch.columns]
    return zip(*columns) if columns else iter(())
