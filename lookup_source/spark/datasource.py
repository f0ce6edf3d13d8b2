"""The ``asynclookup`` Python data source: read exactly the keys you ask for.

::

    from lookup_source import AsyncLookupDataSource

    spark.dataSource.register(AsyncLookupDataSource)
    users = (
        spark.read.format("asynclookup")
        .schema("user_id long, name string, tier int")
        .option("connector", "redis")
        .option("url", "redis://localhost:6379/0")
        .option("redis.key.pattern", "user:{key}")
        .option("keys", "[1, 2, 3]")
        .load()
    )

With ``spark.sql.python.filterPushdown.enabled=true``, ``WHERE user_id IN (1, 2, 3)`` (or
``= 1``) on the key column becomes the key list instead of the ``keys`` option.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import sys
from collections.abc import Iterator, Sequence
from itertools import product
from typing import Any

import pyarrow as pa
from pyspark.sql.types import StructField, StructType

from lookup_source.connector_api.secrets import read_on_driver
from lookup_source.engine.intake.keys import convert_keys
from lookup_source.engine.runner import run_lookups
from lookup_source.engine.scan import scan_batches, scan_splits
from lookup_source.errors import MissingSecretError, OptionError, SchemaError
from lookup_source.functions import FUNCTION_CONNECTOR
from lookup_source.settings import (
    DEFAULT_SCAN_PARTITIONS,
    ERROR_COLUMN,
    KEYS_PER_PARTITION,
    LookupOptions,
    parse_options,
)
from lookup_source.spark import join_markers as markers
from lookup_source.spark.plan import INFERRING, LookupPlan, parse_schema
from lookup_source.spark.versions import DATA_SOURCE, FILTER_PUSHDOWN

DATA_SOURCE.require()  # PySpark 3.5 has no Python data sources: say so in one line

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition  # noqa: E402

if FILTER_PUSHDOWN.available():  # the filter classes arrive with pushFilters, in PySpark 4.1
    from pyspark.sql.datasource import EqualTo, Filter, In

log = logging.getLogger("lookup_source")

READ_BATCH_ROWS = 10_000
"""Keys per Arrow batch fed to the engine inside a read task."""

MAX_PUSHED_KEYS = 1_000_000

KEY_METADATA = markers.KEY_METADATA
"""Marks the key columns of a schema the store described (the SQL extension reads it)."""

_PUSHDOWN_MODULE = "pyspark.sql.worker.data_source_pushdown_filters"


class KeyPartition(InputPartition):
    """The keys one read task fetches."""

    def __init__(self, index: int, keys: list[Any], count: int = 1) -> None:
        super().__init__(index)
        self.index = index
        self.keys = keys
        self.count = count  # the read's tasks, which share rate.limit.total


class ScanPartition(InputPartition):
    """One of ``count`` disjoint parts of a whole-table scan."""

    def __init__(self, index: int, count: int, split: Any = None) -> None:
        super().__init__(index)
        self.index = index
        self.count = count
        self.split = split  # the connector's scan split (a key range...), or None: by hash


class AsyncLookupDataSource(DataSource):
    """``spark.read.format("asynclookup")``: an external dimension table read by key."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        if not options:
            raise OptionError(
                "connector",
                "no options reached the asynclookup data source. Spark (4.0 to 4.3) does not "
                "hand the OPTIONS of a catalog table (CREATE TABLE ... USING asynclookup) to a "
                "Python data source when it reads it: use CREATE TEMPORARY VIEW <name> USING "
                "asynclookup OPTIONS (...), or lookup_source.register_lookup_table",
            )
        # Parse once, now, so that a bad option fails at .load() with a clear message.
        self.lookup_options: LookupOptions = parse_options(dict(options))
        self.inferred_key_columns: tuple[str, ...] | None = None

    @classmethod
    def name(cls) -> str:
        return "asynclookup"

    def schema(self) -> StructType | str:
        """Called only when no schema is given: ask the store (Postgres reads its catalog). Its
        key columns carry the metadata ``asynclookup.key``, which the SQL extension reads
        (when no key.column is set, the key is the table's, not the schema's first column)."""
        options = self.lookup_options
        with read_on_driver(INFERRING):
            ddl, key_columns = options.connector_class().infer_schema(options.for_connector())
        self.inferred_key_columns = key_columns
        keys = {column.lower() for column in key_columns or ()}
        return StructType(
            [
                StructField(f.name, f.dataType, f.nullable, {**f.metadata, KEY_METADATA: True})
                if f.name.lower() in keys
                else f
                for f in parse_schema(ddl).fields
            ]
        )

    def reader(self, schema: StructType) -> DataSourceReader:
        options = self.lookup_options
        if options.key_columns is None:
            inferred = self.inferred_key_columns or marked_keys(schema)
            if inferred:
                options = dataclasses.replace(options, key_columns=inferred)
        if options.partition_by_key:
            raise OptionError(
                "partition.by-key",
                "applies to lookup_join and to the table function of register_lookup_table, "
                "not to a read of the data source",
            )
        plan = LookupPlan.build(options, schema)
        if plan.options.error_column and ERROR_COLUMN not in schema.fieldNames():
            raise SchemaError(
                f"on.error=column needs a '{ERROR_COLUMN} string' column in the reader's schema",
                column=ERROR_COLUMN,
            )
        # Why the call stack, not a setting: PySpark refuses to plan a read whose reader
        # overrides pushFilters while spark.sql.python.filterPushdown.enabled is false
        # (DATA_SOURCE_PUSHDOWN_DISABLED), yet never tells the data source that setting (it is
        # not in the options, and reader() runs in a Python worker with no SparkSession). Its
        # filter-pushdown worker runs only when the setting is true, so only that caller gets
        # the reader that accepts filters; every other caller gets the plain one.
        if options.read.filter_pushdown and _called_from(_PUSHDOWN_MODULE):
            return FilteringLookupReader(plan)
        return AsyncLookupReader(plan)


def marked_keys(schema: StructType) -> tuple[str, ...]:
    """The key columns of a schema the store described (see :data:`KEY_METADATA`)."""
    return tuple(f.name for f in schema.fields if f.metadata.get(KEY_METADATA))


def _called_from(module: str) -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__") == module:
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


class AsyncLookupReader(DataSourceReader):
    """Reads the keys of the ``keys`` option, spread over ``partitions`` tasks."""

    def __init__(self, plan: LookupPlan) -> None:
        self.plan = plan
        self.pushed_keys: list[Any] | None = None

    def _has_keys(self) -> bool:
        return self.plan.options.read.keys is not None or self.pushed_keys is not None

    def _keys(self) -> list[Any]:
        option_keys = self.plan.options.read.keys
        keys: list[Any] = []
        if option_keys is not None:
            keys = [self._normalise(key, position) for position, key in enumerate(option_keys)]
        if self.pushed_keys is not None:
            if option_keys is None:
                keys = self.pushed_keys
            else:
                pushed = set(self.pushed_keys)
                keys = [key for key in keys if key in pushed]
        return list(dict.fromkeys(keys))

    def _normalise(self, key: Any, position: int) -> Any:
        width = len(self.plan.key_fields)
        if width == 1:
            if isinstance(key, tuple):
                raise OptionError(
                    "keys",
                    f"key #{position} {list(key)!r} is an array, but the "
                    f"key column '{self.plan.key_names[0]}' holds scalars",
                )
            return key
        if not isinstance(key, tuple) or len(key) != width:
            raise OptionError(
                "keys",
                f"key #{position} {key!r} must be an array of {width} values "
                f"({', '.join(self.plan.key_names)})",
            )
        return key

    def partitions(self) -> Sequence[InputPartition]:
        options = self.plan.options
        if options.connector == FUNCTION_CONNECTOR:
            function = options.connector_options.get("function.name") or "your function"
            raise OptionError(
                "connector",
                f"this lookup table is {function} (fetch= or fetch_many=), which answers "
                "keys but cannot be read as a table: JOIN it in a session with the SQL "
                "extension (lookup_source.enable_sql_joins), or call its table function, "
                "<table>_lookup(TABLE(t), 'key')",
            )
        if not self._has_keys():
            return self._scan_partitions()
        keys = self._keys()
        typed = self._typed_keys(keys)
        wanted = self.plan.options.read.partitions or max(
            1, math.ceil(len(typed) / KEYS_PER_PARTITION)
        )
        count = max(1, min(wanted, len(typed)))
        size = math.ceil(len(typed) / count) if typed else 0
        return [
            KeyPartition(index, typed[index * size : (index + 1) * size], count)
            for index in range(count)
        ]

    def _scan_partitions(self) -> list[InputPartition]:
        plan = self.plan
        if not plan.options.connector_class().can_scan(plan.connector_config()):
            key = ", ".join(plan.key_names)
            pushdown = (
                f", or filter on the key column ({key}) with WHERE ... IN (...) and "
                "spark.sql.python.filterPushdown.enabled=true"
                if FILTER_PUSHDOWN.available()
                else ""
            )
            raise OptionError(
                "keys",
                f"no keys to read, and the {plan.options.connector} connector cannot scan a "
                f"whole table: set option keys='[...]'{pushdown}; to enrich a DataFrame, use "
                "lookup_source.lookup_join (or the SQL table function)",
            )
        count = plan.options.read.partitions or DEFAULT_SCAN_PARTITIONS
        try:
            splits = scan_splits(plan.options.connector_class(), plan.connector_config(), count)
        except MissingSecretError as missing:  # the executors have it: they split by hash
            log.info("scan split by hash: %s", missing)
            splits = None
        if splits is None:
            return [ScanPartition(index, count) for index in range(count)]
        return [ScanPartition(index, count, split) for index, split in enumerate(splits)]

    def _typed_keys(self, keys: list[Any]) -> list[Any]:
        """Check every key against the key column types; return them as those types."""
        typed, errors = convert_keys(keys, self.plan.key_arrow_types(), self.plan.key_names)
        if errors:
            first = min(errors)
            raise OptionError("keys", errors[first])
        if len(self.plan.key_fields) == 1:
            return [key for key in typed if key is not None]
        return [key for key in typed if all(part is not None for part in key)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        plan = self.plan
        if plan.options.split_by:  # an even share for each of the read's tasks
            count = getattr(partition, "count", 1)
            plan = dataclasses.replace(plan, options=plan.options.split_over(count))
        output_names = [f.name for f in plan.schema.fields]
        if isinstance(partition, ScanPartition):
            key_fields = tuple(
                pa.field(f.name, t) for f, t in zip(plan.key_fields, plan.key_arrow_types())
            )
            for batch in scan_batches(
                plan.options.connector_class(),
                plan.connector_config(),
                plan.options,
                key_fields,
                plan.value_arrow_fields(),
                partition.index,
                partition.count,
                partition.split,
            ):
                yield batch.select(output_names)
            return
        assert isinstance(partition, KeyPartition)
        key_names = plan.key_names
        key_types = plan.key_arrow_types()
        spec = plan.engine_spec(key_names, how="inner")

        def key_batches() -> Iterator[pa.RecordBatch]:
            keys = partition.keys
            for start in range(0, len(keys), READ_BATCH_ROWS):
                chunk = keys[start : start + READ_BATCH_ROWS]
                if len(key_names) == 1:
                    arrays = [pa.array(chunk, type=key_types[0])]
                else:
                    arrays = [
                        pa.array([key[i] for key in chunk], type=key_types[i])
                        for i in range(len(key_names))
                    ]
                yield pa.RecordBatch.from_arrays(arrays, names=list(key_names))

        for batch in run_lookups(key_batches(), spec, plan.connector_config()):
            yield batch.select(output_names)


class FilteringLookupReader(AsyncLookupReader):
    """The reader handed to PySpark's filter pushdown: ``=`` and ``IN`` on the key columns
    become the keys to fetch. Filters are still returned to Spark, which re-checks them."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        candidates: dict[str, set[Any]] = {}
        for flt in filters:
            values = _key_values(flt)
            attribute: tuple[str, ...] = tuple(getattr(flt, "attribute", ()))
            if values is not None and len(attribute) == 1:
                column = attribute[0].lower()
                if column in candidates:
                    candidates[column] &= values
                else:
                    candidates[column] = set(values)
            yield flt
        names = [name.lower() for name in self.plan.key_names]
        if all(name in candidates for name in names):
            sets = [sorted(candidates[name], key=repr) for name in names]
            if math.prod(len(s) for s in sets) <= MAX_PUSHED_KEYS:
                if len(names) == 1:
                    self.pushed_keys = list(sets[0])
                else:
                    self.pushed_keys = [tuple(combo) for combo in product(*sets)]


def _key_values(flt: Filter) -> set[Any] | None:
    try:
        if isinstance(flt, EqualTo):
            return {flt.value} if flt.value is not None else set()
        if isinstance(flt, In):
            return {value for value in flt.value if value is not None}
    except TypeError:  # unhashable literal
        return None
    return None
