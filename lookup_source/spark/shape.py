"""The shape of a lookup join: which columns of the input hold its key (:func:`resolve_on`),
and the output's schema (:func:`output_schema`) — for ``lookup_join`` and the SQL table
function alike, which name their input differently in errors (:class:`InputTerms`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql.types import (
    BooleanType,
    DataType,
    DecimalType,
    FractionalType,
    IntegralType,
    StringType,
    StructField,
    StructType,
)

from lookup_source.errors import SchemaError
from lookup_source.settings import ERROR_COLUMN, LookupOptions
from lookup_source.spark.plan import LookupPlan, parse_schema


@dataclass(frozen=True)
class InputTerms:
    """How errors about the input name it: ``lookup_join``'s ``on`` and DataFrame, or the table
    function's key argument and ``TABLE(...)``."""

    on: str = "on"
    input: str = "the DataFrame"


DATAFRAME = InputTerms()
TABLE_ARGUMENT = InputTerms(on="the key argument", input="the TABLE(...) argument")


def on_names(on: str | Sequence[str]) -> list[str]:
    """The input columns ``on`` names: one, a list, or a comma-separated text."""
    names = [on] if isinstance(on, str) else list(on)
    if len(names) == 1 and "," in names[0]:
        names = [part.strip() for part in names[0].split(",")]
    return names


def keyed_by_on(
    options: LookupOptions, schema: StructType | str, on: str | Sequence[str]
) -> LookupOptions:
    """A composite key named once: when ``key.column`` is not set and ``on`` names several
    columns that the lookup schema has, they are the lookup's key (in ``on``'s order)."""
    names = on_names(on)
    if options.key_columns is not None or len(names) < 2:
        return options
    columns = {field.name.lower(): field.name for field in parse_schema(schema).fields}
    if not all(name.lower() in columns for name in names):
        return options
    return options.with_key_columns(tuple(columns[name.lower()] for name in names))


def resolve_on(
    df_schema: StructType,
    on: str | Sequence[str],
    plan: LookupPlan,
    terms: InputTerms = DATAFRAME,
) -> list[str]:
    names = on_names(on)
    if len(names) != len(plan.key_fields):
        hint = (
            f": set key.column to the lookup schema's {len(names)} key columns (in {terms.on}'s "
            f"order), or name {len(plan.key_fields)} column(s) in {terms.on}"
            if plan.options.key_columns is None or len(names) > len(plan.key_fields)
            else f": name the input column of each key column in {terms.on}, in key.column's order"
        )
        raise SchemaError(
            f"{terms.on} names {len(names)} column(s) ({', '.join(names)}) but the lookup key "
            f"has {len(plan.key_fields)} ({', '.join(plan.key_names)}){hint}"
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
    df_schema: StructType,
    plan: LookupPlan,
    terms: InputTerms = DATAFRAME,
    matched_column: str | None = None,
    how: str = "left",
) -> StructType:
    """The input's fields, unchanged and *with their metadata*, then the value columns (none
    for a ``semi`` or ``anti`` join; and the error column, and a ``matched_column`` flag when
    one is asked for).

    mapInArrow keeps an event-time watermark only if the output field still carries the
    ``spark.watermarkDelayMs`` metadata; declaring the output from a DDL string would drop it,
    and with it append-mode windowed aggregations after the join.
    """
    existing = {name.lower() for name in df_schema.fieldNames()}
    values = plan.value_fields if how in ("left", "inner") else []
    added = [StructField(f.name, f.dataType, True, f.metadata) for f in values]
    if plan.options.error_column:
        added.append(StructField(ERROR_COLUMN, StringType(), True))
    if matched_column is not None:
        added.append(StructField(matched_column, BooleanType(), True))
    for field in added:
        if field.name.lower() in existing:
            raise SchemaError(
                f"{terms.input} already has a column '{field.name}', which the lookup would "
                "add; rename or drop it first",
                column=field.name,
            )
    return StructType(list(df_schema.fields) + added)
