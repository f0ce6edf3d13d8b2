"""``lookup_join``: enrich every row of a DataFrame, batch or streaming, with looked-up columns."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.types import (
    DataType,
    DecimalType,
    FractionalType,
    IntegralType,
    StringType,
    StructField,
    StructType,
)

from lookup_source.connector_api import ConnectorConfig
from lookup_source.engine.runner import ClientFactory, run_lookups
from lookup_source.engine.spec import EngineSpec
from lookup_source.errors import ConfigurationError, OptionError, SchemaError
from lookup_source.functions import LookupFunction
from lookup_source.options import ERROR_COLUMN, LookupOptions, option_strings, parse_options
from lookup_source.spark.metrics import (
    METRICS_COLUMN,
    MetricsRows,
    decided,
    name_lookup,
    new_accumulator,
    observed,
)
from lookup_source.spark.plan import LookupPlan, output_rows
from lookup_source.spark.strategy import broadcast_join, strategy_of
from lookup_source.spark.versions import CONNECT_METRICS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def lookup_join(
    df: DataFrame,
    on: str | Sequence[str],
    *,
    schema: StructType | str,
    options: Mapping[str, Any] | LookupOptions | None = None,
    how: str = "left",
    fetch: Any = None,
    fetch_many: Any = None,
) -> DataFrame:
    """Return ``df`` with the value columns of ``schema`` looked up by key and appended.

    ``on`` names the key column(s) of ``df``, in the order of the schema's key columns
    (``key.column``, else the first column of ``schema``). ``how="left"`` keeps rows whose key
    is missing or null (their value columns are null); ``how="inner"`` drops them. Rows whose
    lookup *failed* are never dropped silently: ``on.error=fail`` fails the task,
    ``null``/``column`` keep them. Works on streaming DataFrames too; an event-time watermark
    set before the join still holds after it.

    The lookup goes through the connector of ``options`` or through your own async function:
    ``fetch`` (one key per call; returns a record, a list of records or None) or
    ``fetch_many`` (a list of keys per call; returns key -> record or records). With a
    function, ``options`` may be left out.

    >>> enriched = lookup_join(                                         # doctest: +SKIP
    ...     events, "user_id",
    ...     schema="user_id long, name string, tier int",
    ...     options={"connector": "redis", "url": "redis://localhost:6379/0",
    ...              "redis.key.pattern": "user:{key}"},
    ... )
    >>> async def fetch(user_id):                                       # doctest: +SKIP
    ...     return {"name": f"user {user_id}", "tier": 1}
    >>> enriched = lookup_join(events, "user_id", schema="user_id long, name string, tier int",
    ...                        fetch=fetch)                             # doctest: +SKIP
    """
    if how not in ("left", "inner"):
        raise SchemaError(f"how must be 'left' or 'inner', got {how!r}")
    function = LookupFunction.of(fetch, fetch_many)
    lookup_options = lookup_options_of(options, function)
    if lookup_options.rate_limit_total:
        lookup_options = lookup_options.split_rate(concurrent_tasks(df))
    plan = LookupPlan.build(lookup_options, schema)
    on_columns = resolve_on(df.schema, on, plan)
    out_schema = output_schema(df.schema, plan)
    choice = strategy_of(df, plan)
    if choice.strategy == "broadcast":
        name = decided(name_lookup(None), choice)
        return broadcast_join(df, on_columns, plan, how=how).alias(name)
    if lookup_options.partition_by_key:
        df = partitioned_by_key(df, on_columns)
    spec = plan.engine_spec(tuple(on_columns), how=how, output_rows=output_rows(df.sparkSession))
    accumulator = new_accumulator(df.sparkSession)
    connect = accumulator is None  # Spark Connect: metrics travel in rows, to an observation
    task = functools.partial(
        _lookup_partition,
        spec=spec,
        config=plan.connector_config(),
        metrics=accumulator,
        metrics_rows=connect and CONNECT_METRICS.available(),
        client_factory=function,
    )
    # the function's name appears in the plan of every DataFrame derived from the result:
    # lookup_metrics finds the accumulator (or the observation) by it
    name = decided(name_lookup(accumulator), choice)
    task.__name__ = name  # type: ignore[attr-defined]
    if not task.keywords["metrics_rows"]:
        return df.mapInArrow(task, out_schema)
    with_metrics = StructType([*out_schema.fields, StructField(METRICS_COLUMN, StringType())])
    return observed(df.mapInArrow(task, with_metrics), name)


def lookup_options_of(
    options: Mapping[str, Any] | LookupOptions | None, function: LookupFunction | None
) -> LookupOptions:
    """The options of a lookup through their connector, or through ``function``, parsed once:
    every surface hands the :class:`LookupOptions` on from here."""
    if function is not None:
        check_pickles(function)
        given = options.to_strings() if isinstance(options, LookupOptions) else options
        return parse_options(function.options(given))
    if options is None:
        raise OptionError(
            "connector",
            "is required: give options={'connector': 'redis' | 'http' | 'postgres' | ...}, or "
            "your own async function as fetch= or fetch_many=",
        )
    if isinstance(options, LookupOptions):
        return options
    return parse_options(option_strings(options))


def check_pickles(function: LookupFunction) -> None:
    """Fail now, naming the function, if it cannot travel to the executors (Spark would fail
    later, with a long trace)."""
    from pyspark import cloudpickle

    try:
        cloudpickle.dumps(function.function)
    except Exception as exc:
        raise ConfigurationError(
            f"{function.argument}={function.name} cannot be pickled to the executors "
            f"({type(exc).__name__}: {exc}): make sessions, clients and locks in "
            "async def open(self), not before"
        ) from None


def partitioned_by_key(df: DataFrame, columns: Sequence[str]) -> DataFrame:
    """``df`` hash-partitioned by its key columns: a key's rows all go to one task, so the
    per-worker caches hold disjoint shares of the keys. Keeps the number of partitions of a
    batch DataFrame (a streaming one takes spark.sql.shuffle.partitions)."""
    try:
        return df.repartition(df.rdd.getNumPartitions(), *columns)
    except Exception:  # streaming (no rdd), or Spark Connect
        return df.repartition(*columns)


def cluster_cores(spark: Any) -> int:
    """The cores of the cluster (``defaultParallelism``), which ``rate.limit.total`` is split
    over; a clear error over Spark Connect, which does not tell them."""
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception as exc:  # Spark Connect: no SparkContext
        raise OptionError(
            "rate.limit.total",
            "needs a classic SparkSession to know how many tasks run at once; over Spark "
            "Connect, set rate.limit (per task) instead",
        ) from exc


def concurrent_tasks(df: DataFrame) -> int:
    """The most tasks of a lookup over ``df`` that can run at once: its partitions, at most
    the cores of the cluster (what ``rate.limit.total`` is split over)."""
    cores = cluster_cores(df.sparkSession)
    try:
        partitions = int(df.rdd.getNumPartitions())
    except Exception:  # a streaming DataFrame: its micro-batches run on every core
        return cores
    return max(1, min(partitions, cores))


def _lookup_partition(
    batches: Iterator[pa.RecordBatch],
    *,
    spec: EngineSpec,
    config: ConnectorConfig,
    metrics: Any = None,
    metrics_rows: bool = False,
    client_factory: ClientFactory | None = None,
) -> Iterator[pa.RecordBatch]:
    """The function each task runs (under mapInArrow); module level, so it pickles by name."""
    if metrics_rows:  # Spark Connect: the task's metrics leave as one last row
        rows = MetricsRows()
        yield from rows.output(
            run_lookups(
                rows.watch(batches),
                spec,
                config,
                client_factory=client_factory,
                on_metrics=rows.finished,
            )
        )
        return
    on_metrics = metrics.add if metrics is not None else None
    yield from run_lookups(
        batches, spec, config, client_factory=client_factory, on_metrics=on_metrics
    )


@dataclass(frozen=True)
class InputTerms:
    """How errors about the input name it: ``lookup_join``'s ``on`` and DataFrame, or the table
    function's key argument and ``TABLE(...)``."""

    on: str = "on"
    input: str = "the DataFrame"


DATAFRAME = InputTerms()
TABLE_ARGUMENT = InputTerms(on="the key argument", input="the TABLE(...) argument")


def resolve_on(
    df_schema: StructType,
    on: str | Sequence[str],
    plan: LookupPlan,
    terms: InputTerms = DATAFRAME,
) -> list[str]:
    names = [on] if isinstance(on, str) else list(on)
    if len(names) == 1 and "," in names[0]:
        names = [part.strip() for part in names[0].split(",")]
    if len(names) != len(plan.key_fields):
        raise SchemaError(
            f"{terms.on} names {len(names)} column(s) ({', '.join(names)}) but the lookup key "
            f"has {len(plan.key_fields)} ({', '.join(plan.key_names)})"
        )
    by_name = {f.name.lower(): f for f in df_schema.fields}
    resolved = []
    for name, key_field in zip(names, plan.key_fields):
        field = by_name.get(name.lower())
        if field is None:
            raise SchemaError(
                f"{terms.on} names column '{name}', which {terms.input} does not have "
                f"({', '.join(df_schema.fieldNames())})",
                column=name,
            )
        if name.lower() != key_field.name.lower() and any(
            name.lower() == value.name.lower() for value in plan.value_fields
        ):
            raise SchemaError(
                f"{terms.on} names column '{name}', which the lookup schema has as a value "
                f"column: "
                f"the lookup key is '{key_field.name}' ("
                + (
                    "the schema's first column; put the key first or set key.column"
                    if plan.options.key_columns is None
                    else "from key.column"
                )
                + ")",
                column=name,
            )
        if not _compatible_key_types(field.dataType, key_field.dataType):
            raise SchemaError(
                f"key column '{field.name}' is {field.dataType.simpleString()} in {terms.input} "
                f"but the lookup schema declares '{key_field.name}' as "
                f"{key_field.dataType.simpleString()}; cast it first",
                column=field.name,
            )
        resolved.append(field.name)
    return resolved


def _compatible_key_types(actual: DataType, declared: DataType) -> bool:
    if actual == declared:
        return True
    if isinstance(actual, IntegralType) and isinstance(declared, (IntegralType, DecimalType)):
        return True
    if isinstance(actual, (IntegralType, FractionalType)) and isinstance(declared, FractionalType):
        return True
    return isinstance(actual, StringType) and isinstance(declared, StringType)


def output_schema(
    df_schema: StructType, plan: LookupPlan, terms: InputTerms = DATAFRAME
) -> StructType:
    """The input's fields, unchanged and *with their metadata*, then the value columns.

    mapInArrow keeps an event-time watermark only if the output field still carries the
    ``spark.watermarkDelayMs`` metadata; declaring the output from a DDL string would drop it,
    and with it append-mode windowed aggregations after the join.
    """
    existing = {name.lower() for name in df_schema.fieldNames()}
    added = [StructField(f.name, f.dataType, True, f.metadata) for f in plan.value_fields]
    if plan.options.error_column:
        added.append(StructField(ERROR_COLUMN, StringType(), True))
    for field in added:
        if field.name.lower() in existing:
            raise SchemaError(
                f"{terms.input} already has a column '{field.name}', which the lookup would "
                "add; rename or drop it first",
                column=field.name,
            )
    return StructType(list(df_schema.fields) + added)
