"""The lookup plan: options checked against a Spark schema, on the driver, once.

A :class:`LookupPlan` splits the lookup schema into key and value columns, converts their types
to Arrow, and builds what the executors need (:class:`EngineSpec`, :class:`ConnectorConfig`).
It holds plain values only, so it pickles into every task.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import types as spark_types
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import ArrayType, DataType, MapType, StructField, StructType

from lookup_source.connector_api import ConnectorConfig
from lookup_source.engine.spec import DEFAULT_OUTPUT_ROWS, EngineSpec
from lookup_source.errors import OptionError, SchemaError
from lookup_source.settings import ERROR_COLUMN, LookupOptions, parse_options
from lookup_source.spark.ddl import DDLError, parse_ddl

INFERRING = (
    "the schema is inferred from the store (or give the schema, and only the executors "
    "need the variable)"
)
"""Why a secret is read on the driver when the store describes the table."""


def parse_schema(schema: StructType | str) -> StructType:
    """A ``StructType`` from a ``StructType`` or a DDL string (``"id long, name string"``)."""
    if isinstance(schema, StructType):
        return schema
    if isinstance(schema, str):
        from pyspark.sql import SparkSession

        if SparkSession.getActiveSession() is None:
            try:
                return parse_ddl(schema)
            except DDLError as exc:
                raise SchemaError(f"cannot parse schema {schema!r}: {exc}") from None
        from pyspark.sql.types import _parse_datatype_string

        try:
            parsed = _parse_datatype_string(schema)
        except Exception as exc:
            raise SchemaError(f"cannot parse schema {schema!r}: {exc}") from None
        if not isinstance(parsed, StructType):
            raise SchemaError(f"schema {schema!r} is not a list of columns")
        return parsed
    raise SchemaError(f"schema must be a StructType or a DDL string, got {type(schema).__name__}")


_NOT_A_KEY: tuple[type, ...] = tuple(
    kind
    for kind in (ArrayType, MapType, StructType, getattr(spark_types, "VariantType", None))
    if kind is not None  # VariantType: PySpark 4.0+
)


def _to_arrow(data_type: DataType) -> pa.DataType:
    """Spark's own Spark -> Arrow mapping, timestamps in UTC (PySpark 4.2+ spells the option
    ``timezone``, 4.0 and 4.1 ``timestamp_utc``; 3.5 has none and always gives UTC)."""
    try:
        return to_arrow_type(data_type, timezone="UTC")
    except TypeError:
        pass
    try:
        return to_arrow_type(data_type, timestamp_utc=True)  # type: ignore[call-arg]
    except TypeError:
        return to_arrow_type(data_type)


def arrow_type(data_type: DataType, column: str) -> pa.DataType:
    try:
        return _to_arrow(data_type)
    except Exception as exc:
        raise SchemaError(
            f"column '{column}' has type {data_type.simpleString()}, which asynclookup cannot "
            f"carry in Arrow: {exc}",
            column=column,
        ) from None


def _check_key_type(field: StructField) -> None:
    if isinstance(field.dataType, _NOT_A_KEY):
        raise SchemaError(
            f"key column '{field.name}' has type {field.dataType.simpleString()}; a key must be "
            "a scalar (number, string, date, timestamp, boolean, binary)",
            column=field.name,
        )


@dataclass(frozen=True)
class LookupPlan:
    """Options plus the lookup schema, split into key fields and value fields."""

    options: LookupOptions
    schema: StructType
    key_fields: tuple[StructField, ...]
    value_fields: tuple[StructField, ...]

    @classmethod
    def build(
        cls, options: LookupOptions | Mapping[str, str], schema: StructType | str
    ) -> LookupPlan:
        opts = options if isinstance(options, LookupOptions) else parse_options(options)
        struct = parse_schema(schema)
        if not struct.fields:
            raise SchemaError("the lookup schema has no columns")
        names = [f.name for f in struct.fields]
        lowered = [n.lower() for n in names]
        for name in names:
            if lowered.count(name.lower()) > 1:
                raise SchemaError(f"the lookup schema names column '{name}' twice", column=name)
        by_name = {f.name.lower(): f for f in struct.fields}
        key_names = opts.key_columns or (names[0],)
        key_fields = []
        for key in key_names:
            field = by_name.get(key.lower())
            if field is None:
                raise OptionError(
                    "key.column",
                    f"names column '{key}', which is not in the schema ({', '.join(names)})",
                )
            _check_key_type(field)
            key_fields.append(field)
        key_set = {f.name for f in key_fields}
        value_fields = tuple(
            f for f in struct.fields if f.name not in key_set and f.name != ERROR_COLUMN
        )
        if not value_fields:
            which = (
                f"its key is its first column, '{names[0]}' (key.column is not set)"
                if opts.key_columns is None
                else f"key.column takes {', '.join(key_set)}"
            )
            raise SchemaError(
                f"the lookup schema has no value columns: {which}. Give the key column(s) and "
                "then the value columns to fetch, e.g. 'user_id long, name string, tier int'"
            )
        plan = cls(opts, struct, tuple(key_fields), value_fields)
        client_class = opts.connector_class()
        config = plan.connector_config()
        client_class.validate_config(config)
        if opts.cache.mode == "full" and not client_class.can_scan(config):
            raise OptionError(
                "cache.mode",
                f"is full, but the {opts.connector} connector cannot scan a whole table to load "
                "it; use cache.mode=partial with cache.max-rows",
            )
        return plan

    def for_how(self, how: str) -> LookupPlan:
        """The plan a join of ``how`` runs with: a semi or anti join leaves the value columns
        out where the connector then answers by whether each key exists, asking the store for
        nothing more (``LookupClient.answers_existence``: Redis ``EXISTS``, a Postgres
        ``SELECT`` of the key); the plan itself otherwise."""
        if how not in ("semi", "anti"):
            return self
        existence = dataclasses.replace(self, value_fields=())
        if self.options.connector_class().answers_existence(existence.connector_config()):
            return existence
        return self

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.key_fields)

    def value_arrow_fields(self) -> tuple[pa.Field, ...]:
        return tuple(
            pa.field(f.name, arrow_type(f.dataType, f.name), nullable=True)
            for f in self.value_fields
        )

    def key_arrow_types(self) -> tuple[pa.DataType, ...]:
        return tuple(arrow_type(f.dataType, f.name) for f in self.key_fields)

    def connector_config(self) -> ConnectorConfig:
        opts = self.options
        return ConnectorConfig(
            connector=opts.connector,
            url=opts.url,
            key_columns=self.key_names,
            value_columns=tuple(f.name for f in self.value_fields),
            value_types=tuple(f.type for f in self.value_arrow_fields()),
            key_types=self.key_arrow_types(),
            options=dict(opts.connector_options),
            capacity=opts.capacity,
            batch_size=opts.batch_size,
            timeout_s=opts.timeout_s,
            budget_in_flight=opts.budget.max_in_flight,
            key_equality=opts.keys.equality,
        )

    def engine_spec(
        self,
        input_key_columns: tuple[str, ...],
        how: str,
        output_rows: int = DEFAULT_OUTPUT_ROWS,
        name: str = "",
        matched_column: str | None = None,
    ) -> EngineSpec:
        return EngineSpec(
            options=self.options,
            key_columns=input_key_columns,
            value_fields=self.value_arrow_fields(),
            key_types=self.key_arrow_types(),
            how=how,
            output_rows=output_rows,
            name=name,
            matched_column=matched_column,
        )


MAX_RECORDS_PER_BATCH = "spark.sql.execution.arrow.maxRecordsPerBatch"


def output_rows(spark: Any) -> int:
    """Rows per Arrow batch in this session (``spark.sql.execution.arrow.maxRecordsPerBatch``):
    the most a lookup emits in one output batch, whatever the number of matches per key."""
    try:
        return int(spark.conf.get(MAX_RECORDS_PER_BATCH, str(DEFAULT_OUTPUT_ROWS)))
    except Exception:  # not a number, or no session to ask
        return DEFAULT_OUTPUT_ROWS
