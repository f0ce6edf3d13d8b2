"""``lookup_join``: enrich every row of a DataFrame, batch or streaming, with looked-up columns."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.types import StructType

from lookup_source.connector_api import ConnectorConfig
from lookup_source.engine.runner import ClientFactory, run_lookups
from lookup_source.engine.spec import HOW_ALIASES, HOWS, EngineSpec
from lookup_source.errors import SchemaError
from lookup_source.functions import LookupFunction
from lookup_source.settings import LookupOptions
from lookup_source.spark.arguments import concurrent_tasks, lookup_options_of
from lookup_source.spark.metrics import carries_rows, lookup_name, new_accumulator, observed, track
from lookup_source.spark.plan import LookupPlan, output_rows
from lookup_source.spark.progress import MetricsRows, metrics_spark_field, progress_fields
from lookup_source.spark.shape import keyed_by_on, output_schema, resolve_on
from lookup_source.spark.strategy import strategy_of, table_join
from lookup_source.spark.versions import is_connect

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
    name: str | None = None,
) -> DataFrame:
    """Return ``df`` with the value columns of ``schema`` looked up by key and appended.

    ``on`` names the key column(s) of ``df``, in the order of the schema's key columns
    (``key.column``, else the first column of ``schema``). ``how="left"`` keeps rows whose key
    is missing or null (their value columns are null); ``how="inner"`` drops them;
    ``how="semi"`` (or ``"left_semi"``) keeps, once, each row whose key exists, and
    ``how="anti"`` (``"left_anti"``) each row whose key does not (a null key included) — both
    without the value columns. Rows whose lookup *failed* are never dropped silently:
    ``on.error=fail`` fails the task, ``null``/``column`` keep them. Works on streaming
    DataFrames too; an event-time watermark set before the join still holds after it.

    The lookup goes through the connector of ``options`` or through your own async function:
    ``fetch`` (one key per call; returns a record, a list of records or None) or
    ``fetch_many`` (a list of keys per call; returns key -> record or records). With a
    function, ``options`` may be left out.

    ``name`` (letters, digits, underscores) names the lookup in its metrics: the entry
    ``asynclookup_<name>`` of each micro-batch's ``observedMetrics`` in a stream's progress,
    the log line and the OpenTelemetry attributes; one is made from the connector when not
    given.

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
    wanted = how
    how = HOW_ALIASES.get(str(how).strip().lower(), str(how).strip().lower())
    if how not in HOWS:
        raise SchemaError(
            f"how must be 'left', 'inner', 'semi' or 'anti' (or 'left_semi', 'left_anti'), "
            f"got {wanted!r}"
        )
    function = LookupFunction.of(fetch, fetch_many)
    plan, lookup = _planned(df, on, schema, options, function, name)
    on_columns = resolve_on(df.schema, on, plan)
    choice = strategy_of(df, plan)
    if choice.strategy in ("broadcast", "scan"):
        broadcast = choice.strategy == "broadcast"
        joined = table_join(
            df, on_columns, plan, how=how, broadcast=broadcast, reader=choice.reader
        )
        return joined.alias(track(lookup, choice))
    return _looked_up(df, on_columns, plan, how, lookup, choice, function)


def _planned(
    df: DataFrame,
    on: str | Sequence[str],
    schema: StructType | str,
    options: Mapping[str, Any] | LookupOptions | None,
    function: Any,
    name: str | None,
) -> tuple[LookupPlan, str]:
    """The lookup's plan (its options split over the tasks that may run at once, keyed by
    ``on``) and its name."""
    lookup_options = lookup_options_of(options, function)
    lookup = lookup_name(name, lookup_options.connector)
    if lookup_options.split_by:
        lookup_options = lookup_options.split_over(concurrent_tasks(df, lookup_options.split_by))
    lookup_options = keyed_by_on(lookup_options, schema, on)  # a composite key named once
    return LookupPlan.build(lookup_options, schema), lookup


def _looked_up(
    df: DataFrame,
    on_columns: Sequence[str],
    plan: LookupPlan,
    how: str,
    lookup: str,
    choice: Any,
    function: Any,
) -> DataFrame:
    """``df`` joined by lookups: a ``mapInArrow`` of :func:`_lookup_partition`, its metrics
    reaching the driver by an accumulator, or in a stream's progress by an observation."""
    lookup_options = plan.options
    if lookup_options.partition_by_key:
        df = partitioned_by_key(df, on_columns)
    out_schema = output_schema(df.schema, plan, how=how)
    plan = plan.for_how(how)
    spec = plan.engine_spec(
        tuple(on_columns), how=how, output_rows=output_rows(df.sparkSession), name=lookup
    )
    accumulator = None if is_connect(df) else new_accumulator(df.sparkSession)
    metrics_rows = carries_rows(df, lookup_options.metrics_progress)
    task = functools.partial(
        _lookup_partition,
        spec=spec,
        config=plan.connector_config(),
        metrics=accumulator,
        metrics_rows=metrics_rows,
        client_factory=function,
        # the latency buckets travel as rows of their own only for an entry of named fields
        buckets=df.isStreaming and lookup_options.metrics_progress == "fields",
    )
    # the function's id appears in the plan of every DataFrame derived from the result:
    # lookup_metrics finds the accumulator (or the observation) by it
    function_id = track(lookup, choice, accumulator)
    task.__name__ = function_id  # type: ignore[attr-defined]
    if not metrics_rows:
        return df.mapInArrow(task, out_schema)
    with_metrics = StructType([*out_schema.fields, metrics_spark_field()])
    extra = progress_fields(lookup_options)
    form = lookup_options.metrics_progress
    return observed(df.mapInArrow(task, with_metrics), function_id, extra, form)


def partitioned_by_key(df: DataFrame, columns: Sequence[str]) -> DataFrame:
    """``df`` hash-partitioned by its key columns: a key's rows all go to one task, so the
    per-worker caches hold disjoint shares of the keys. Keeps the number of partitions of a
    batch DataFrame (a streaming one takes spark.sql.shuffle.partitions)."""
    try:
        return df.repartition(df.rdd.getNumPartitions(), *columns)
    except Exception:  # streaming (no rdd), or Spark Connect
        return df.repartition(*columns)


def _lookup_partition(
    batches: Iterator[pa.RecordBatch],
    *,
    spec: EngineSpec,
    config: ConnectorConfig,
    metrics: Any = None,
    metrics_rows: bool = False,
    client_factory: ClientFactory | None = None,
    buckets: bool = False,
) -> Iterator[pa.RecordBatch]:
    """The function each task runs (under mapInArrow); module level, so it pickles by name."""
    if metrics_rows:  # a stream, or Spark Connect: the task's metrics leave as its last rows
        rows = MetricsRows(metrics, buckets)
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
