"""A lookup that sends each key's ranges (``lookup_source.connector_api.ranges``): a
point-in-time join's ``valid_from <= <the latest visit>`` and ``valid_to > <the earliest>``
per key, so that Postgres returns the versions valid at the visits, not every version::

    SELECT k.i, t."v1", ... FROM "table" AS t
      JOIN unnest($1::bigint[], $2::bigint[], $3::bigint[]) WITH ORDINALITY AS k(k0, r0, r1, i)
        ON t."user_id" = k.k0
       AND (k.r0 IS NULL OR t."valid_from" <= <k.r0 as an instant>)
       AND (k.r1 IS NULL OR t."valid_to" > <k.r1 as an instant>)

Only ranges whose order is Spark's are sent (integers, dates, instants against ``timestamp
with time zone``); each bound goes as a ``bigint`` (dates in days, instants in microseconds:
no Python object per bound, which cost more than the rows it saves). A null bound sends no
range for its key (all its rows come back): a bound beyond :data:`BOUND_LIMITS` is sent so,
never overflowing the query's arithmetic. What comes back is a superset of what the engine
keeps, which judges every condition itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from asynclookup_postgres.catalog import INT_TYPES, quote_identifier
from lookup_source.connector_api import KeyRange, ranges_of

BOUND_LIMITS = {
    "date": (-2_400_000, 3_000_000),
    "timestamp": (-200_000_000_000_000_000, 260_000_000_000_000_000),
}
"""The bounds sent, in days and in microseconds since 1970: from about 4600 BC (Postgres's
dates start in 4713 BC) to about the year 10,000 (Spark's end with some room); a bound
beyond is sent as null (no range for its key: a superset), never overflowing the query."""
HOUR = 3_600_000_000
"""Microseconds in an hour: an instant is sent as whole hours and the microseconds left, each
multiplied by an interval exactly (a product of microseconds past 2^53 is rounded)."""

_OPERATORS = {"lt": "<", "le": "<=", "gt": ">", "ge": ">="}


@dataclass(frozen=True)
class Values:
    """The lookup's value columns: their Spark names, the table's names and Postgres types."""

    names: tuple[str, ...]
    columns: tuple[str, ...]
    types: tuple[str, ...]


class RangedQueries:
    """A table's ranged queries, made once for each set of ranges."""

    def __init__(self) -> None:
        self._made: dict[tuple[KeyRange, ...], str] = {}

    def statement(
        self, query: Any, keys: pa.RecordBatch, arguments: list[list[Any]]
    ) -> tuple[str, list[list[Any]], bool] | None:
        """The ranged query of ``keys`` (a :class:`~.query.LookupQuery` of a table), its
        parameters (``arguments``, the keys', then the bounds) and True (its first column is
        the asked key's position); None when ``keys`` carries no range it can send."""
        width = len(query.key_types)
        values = Values(
            tuple(query.config.value_columns),
            tuple(query.columns[width:]),
            tuple(query.value_types),
        )
        ranges = tuple(sendable(ranges_of(keys), values, keys.schema))
        if not ranges:
            return None
        try:  # each bound as a number (days, microseconds); one that is not: no range at all
            sent = [bounds(keys.column(r.column)) for r in ranges]
        except (ValueError, OverflowError, pa.ArrowException):
            return None
        sql = self._made.get(ranges)
        if sql is None:
            sql = self._made[ranges] = ranged_sql(
                query.table_sql,
                query.columns[:width],
                query.key_types,
                values,
                ranges,
                reported=query.reports_keys,
            )
        return sql, arguments + sent, True


def sendable(ranges: Iterable[KeyRange], values: Values, keys: pa.Schema) -> list[KeyRange]:
    """The ``ranges`` on a value column whose order is Spark's, for bounds of their type."""
    chosen = []
    for key_range in ranges:
        if key_range.value not in values.names:
            continue
        pg_type = values.types[values.names.index(key_range.value)]
        bound = keys.field(key_range.column).type
        if (
            (pg_type in INT_TYPES and pa.types.is_integer(bound))
            or (pg_type == "date" and pa.types.is_date32(bound))
            or (
                pg_type == "timestamp with time zone"
                and pa.types.is_timestamp(bound)
                and bound.tz is not None
            )
        ):
            chosen.append(key_range)
    return chosen


def ranged_sql(
    table: str,
    key_columns: Sequence[str],
    key_types: Sequence[str],
    values: Values,
    ranges: Sequence[KeyRange],
    *,
    reported: bool,
) -> str:
    """The ``SELECT`` of each asked key's rows within ``ranges`` (the module's), the asked
    key's position first (then the row's own key, when ``reported``), then the values."""
    from asynclookup_postgres.query import cast_type

    width = len(key_columns)
    selected = ["k.i"] + [f"t.{quote_identifier(c)}" for c in key_columns if reported]
    selected += [f"t.{quote_identifier(c)}" for c in values.columns]
    arrays = [f"${i + 1}::{cast_type(t)}[]" for i, t in enumerate(key_types)]
    aliases = [f"k{i}" for i in range(width)]
    join = [f"t.{quote_identifier(c)} = k.k{i}" for i, c in enumerate(key_columns)]
    for number, key_range in enumerate(ranges):
        position = values.names.index(key_range.value)
        pg_type = values.types[position]
        arrays.append(f"${width + number + 1}::bigint[]")
        aliases.append(f"r{number}")
        bound = f"k.r{number}"
        if pg_type == "date":
            bound = f"(date 'epoch' + {bound}::integer)"
        elif pg_type == "timestamp with time zone":
            bound = (
                f"(timestamptz 'epoch' + ({bound} / {HOUR}) * interval '1 hour' "
                f"+ ({bound} % {HOUR}) * interval '1 us')"
            )
        column = quote_identifier(values.columns[position])
        join.append(f"(k.r{number} IS NULL OR t.{column} {_OPERATORS[key_range.op]} {bound})")
    return (
        f"SELECT {', '.join(selected)} FROM {table} AS t JOIN unnest({', '.join(arrays)}) "
        f"WITH ORDINALITY AS k({', '.join(aliases)}, i) ON {' AND '.join(join)}"
    )


def bounds(column: pa.Array) -> list[Any]:
    """A range's bounds as numbers: integers as they are, dates in days and instants in
    microseconds since 1970, null beyond :data:`BOUND_LIMITS`."""
    if pa.types.is_integer(column.type):
        return column.cast(pa.int64()).to_pylist()
    if pa.types.is_date32(column.type):  # days since 1970 (Arrow casts a date to int32 only)
        numbers = column.cast(pa.int32()).cast(pa.int64())
        lowest, highest = BOUND_LIMITS["date"]
    else:
        numbers = column.cast(pa.int64())
        lowest, highest = BOUND_LIMITS["timestamp"]
    far = pc.or_(pc.greater(numbers, highest), pc.less(numbers, lowest))
    return pc.if_else(far, pa.scalar(None, pa.int64()), numbers).to_pylist()


__all__ = ["BOUND_LIMITS", "RangedQueries", "Values", "bounds", "ranged_sql", "sendable"]
