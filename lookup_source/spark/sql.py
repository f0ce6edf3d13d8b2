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
from pyspark.sql.types import StructType
from pyspark.sql.udtf import AnalyzeArgument, AnalyzeResult, PartitioningColumn

from lookup_source.connector_api.secrets import read_on_driver
from lookup_source.engine.runner import LookupTask
from lookup_source.errors import OptionError, SchemaError
from lookup_source.options import LookupOptions, parse_options
from lookup_source.spark.join import TABLE_ARGUMENT, output_schema, resolve_on
from lookup_source.spark.metrics import new_accumulator
from lookup_source.spark.plan import INFERRING, LookupPlan

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

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
    from lookup_source.spark.datasource import AsyncLookupDataSource

    raw = _raw_options(options)
    if not any(key.strip().lower() == "filter.pushdown" for key in raw):
        raw["filter.pushdown"] = "true" if pushdown else "false"
    lookup_options = parse_options(raw)
    if schema is None:
        with read_on_driver(INFERRING):
            ddl, keys = lookup_options.connector_class().infer_schema(
                lookup_options.for_connector()
            )
        schema = ddl
        if lookup_options.key_columns is None:
            raw["key.column"] = ",".join(keys)
            lookup_options = parse_options(raw)
    if lookup_options.rate_limit_total:  # the table function's tasks: at most every core
        lookup_options = lookup_options.split_rate(spark.sparkContext.defaultParallelism)
    plan = LookupPlan.build(lookup_options, schema)
    spark.dataSource.register(AsyncLookupDataSource)
    # partition.by-key shapes the table function's input; the view is a scan
    view_options = {k: v for k, v in raw.items() if k.strip().lower() != "partition.by-key"}
    reader = spark.read.format("asynclookup").options(**view_options).schema(plan.schema)
    reader.load().createOrReplaceTempView(name)
    metrics = new_accumulator(spark, name)  # lookup_metrics(name) reads it
    spark.udtf.register(f"{name}_lookup", lookup_table_function(plan, metrics, spark))


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


def lookup_table_function(plan: LookupPlan, metrics: Any = None, spark: Any = None) -> Any:
    """A Python UDTF that performs the lookup join of ``plan`` from SQL, on Arrow batches."""
    buckets = _shuffle_partitions(spark)

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
            on = tuple(resolve_on(table.dataType, on_text, plan, TABLE_ARGUMENT))
            # partition.by-key: Spark hash-partitions TABLE(t) by a bucket of the key. Not by
            # the key itself: PySpark starts a new instance of the function (a new client) for
            # each distinct value of what it partitions by; a bucket per shuffle partition
            # keeps that to about one instance per task.
            by_key = plan.options.partition_by_key
            bucket = f"pmod(hash({', '.join(map(_quoted, on))}), {buckets})"
            return LookupAnalyzeResult(
                schema=output_schema(table.dataType, plan, TABLE_ARGUMENT),
                partitionBy=(PartitioningColumn(bucket),) if by_key else (),
                on=on,
                how=join,
                input_schema=table.dataType,
            )

        def __init__(self, analyze_result: LookupAnalyzeResult) -> None:
            self.spec = plan.engine_spec(analyze_result.on, how=analyze_result.how)
            self.task: LookupTask | None = None

        def eval(
            self, table: pa.RecordBatch, keys: pa.Array, how: pa.Array | None = None
        ) -> Iterator[pa.RecordBatch]:
            if self.task is None:
                self.task = LookupTask(
                    self.spec,
                    plan.connector_config(),
                    on_stats=metrics.add if metrics is not None else None,
                )
            yield from self.task.submit(table)

        def terminate(self) -> Iterator[pa.RecordBatch]:
            # the end of this instance's input: under PARTITION BY, PySpark then starts another
            # instance for the next partition and calls cleanup on the last one only, so each
            # instance releases its client here
            if self.task is not None:
                try:
                    yield from self.task.finish()
                finally:
                    self.task.close()

        def cleanup(self) -> None:
            if self.task is not None:
                self.task.close()

    return _arrow_table_function(LookupJoinFunction, spark)


def _arrow_table_function(handler: type, spark: Any = None) -> Any:
    """``handler`` as an Arrow UDTF: ``eval`` receives the TABLE argument as whole Arrow batches
    and yields Arrow batches, with no Python object per row.

    ``pyspark.sql.functions.arrow_udtf`` refuses a class with ``analyze`` (SPARK-53286, open
    in 4.3), although the worker runs one as it runs any UDTF's; the lookup table function
    needs ``analyze`` to take its output schema from ``TABLE(t)``. So the UDTF is built the way
    ``arrow_udtf`` builds it, without that one check.
    """
    from pyspark.util import PythonEvalType

    if spark is not None and _is_connect(spark):
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


def _is_connect(spark: Any) -> bool:
    return type(spark).__module__.startswith("pyspark.sql.connect")
