"""The lookup query of a Postgres connector, and how its rows become the lookup's columns.

With ``postgres.table``, lookups run ``SELECT ... WHERE key = ANY($1::<key type>[])`` (composite
keys: a join against ``unnest($1::t1[], $2::t2[]) WITH ORDINALITY``); with ``postgres.query``,
the user's query. Which asked key a row answers is found in Arrow (integer and text keys, whose
equality is byte equality) or reported by the server itself (``WITH ORDINALITY``: citext,
char(n), uuid, numeric... and composite keys). Rows come back as columns: asyncpg's records are
transposed and each column becomes one Arrow array.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa

from asynclookup_postgres import ranged_query
from asynclookup_postgres.catalog import (
    EXACT_KEY_TYPES,
    FLOAT_TYPES,
    INT_TYPES,
    JSON_TYPES,
    TEXT_TYPES,
    Column,
    describe_table,
    quote_identifier,
    type_name,
)
from lookup_source.connector_api import (
    ConnectorConfig,
    Matches,
    PermanentError,
    error_rows,
    key_columns_of,
    match_rows,
    scanned_keys,
    to_arrow_column,
    value_batch,
)


class LookupQuery:
    """What a lookup asks Postgres (``sql``, prepared once on the first connection) and how the
    rows it returns become :class:`Matches` of the asked keys."""

    def __init__(
        self,
        config: ConnectorConfig,
        value_fields: list[pa.Field],
        table: tuple[str, ...] | None,
        custom: str | None,
    ) -> None:
        self.config = config
        self.value_fields = value_fields
        self.table = table
        self.custom = custom
        self.sql = ""
        self.positions_from_server = False  # the query's first column is the key's position
        # key.equality=spark: each row's own key is reported (Matches.keys); in a query whose
        # positions come from the server, the key columns follow the position
        self.reports_keys = config.key_equality == "spark"
        self.exact_keys = True  # every key column's = is byte equality (Spark's)
        self.key_types: list[str] = []
        self.columns: list[str] = []  # catalog names: key columns, then value columns
        self.converters: list[tuple[int, str, Callable[[Any], Any]]] = []
        self.value_types: list[str] = []
        self.table_sql = ""  # FROM ... AS t: the table's name, quoted
        self._ranged = ranged_query.RangedQueries()  # the query of each set of ranges

    async def prepare(self, connection: Any) -> None:
        """Read the table's columns (or prepare the custom query) and build the query."""
        if self.table is not None:
            self._prepare_table_query(await describe_table(connection, self.table))
        else:
            await self._prepare_custom_query(connection)

    def statement(self, keys: pa.RecordBatch) -> tuple[str, list[list[Any]], bool]:
        """The query for ``keys``, its parameters, and whether its first column is the asked
        key's position: with the ranges ``keys`` carries (:func:`ranges_of`) that this table
        can filter by, the query that sends them (the key's rows within them, a superset of
        what the engine keeps); else the table's own."""
        arguments = self.arguments(key_columns_of(keys))
        ranged = self._ranged.statement(self, keys, arguments) if self.table is not None else None
        return ranged or (self.sql, arguments, self.positions_from_server)

    def matches(
        self, rows: Sequence[Any], keys: pa.RecordBatch, positions_from_server: bool | None = None
    ) -> Matches:
        """The rows of a lookup of ``keys`` as matches (rows of keys nobody asked: ignored);
        ``positions_from_server``: whether the query's first column is the asked key's position
        (None: the table's own query says)."""
        if not rows:
            return Matches.none(self.value_fields)
        if positions_from_server is None:
            positions_from_server = self.positions_from_server
        columns = list(zip(*rows))  # one tuple per column: asyncpg's records, transposed
        nkeys = len(self.key_types)
        returned: list[pa.Array] | None = None
        if positions_from_server:
            index = np.asarray(columns[0], dtype=np.int64) - 1
            width = 1 + (nkeys if self.reports_keys else 0)
            if self.reports_keys:
                returned = [self.returned_keys(columns[1 + i], i, keys) for i in range(nkeys)]
        else:
            width = nkeys
            returned = [self.returned_keys(columns[i], i, keys) for i in range(width)]
            index = match_rows(returned, list(keys.columns))
        keep = index >= 0  # a custom query may return rows for keys nobody asked
        if not keep.all():
            columns = [tuple(np.asarray(c, dtype=object)[keep]) for c in columns]
            if returned is not None:
                returned = [array.filter(pa.array(keep)) for array in returned]
            index = index[keep]
        values, reasons = self.value_arrays(columns[width:], len(index))
        reported = None
        if self.reports_keys and returned is not None:
            reported = pa.RecordBatch.from_arrays(returned, names=list(self.config.key_columns))
        return Matches(index, values, error_rows(reasons, len(index)), reported)

    def scanned(self, rows: Sequence[Any]) -> tuple[pa.RecordBatch, Matches]:
        """Rows read by a scan (key columns, then value columns) as keys and their matches."""
        width = len(self.key_types)
        transposed = list(zip(*rows))
        keys = pa.RecordBatch.from_arrays(
            [_scanned_column(transposed[i], self.key_types[i]) for i in range(width)],
            names=list(self.config.key_columns),
        )
        values, reasons = self.value_arrays(transposed[width:], len(rows))
        return keys, Matches(np.arange(len(rows)), values, error_rows(reasons, len(rows)))

    def _resolve(self, columns: list[Column], wanted: Sequence[str]) -> list[Column]:
        by_name = {c.name: c for c in columns}
        by_lower: dict[str, Column] = {}
        for c in columns:
            by_lower.setdefault(c.name.lower(), c)
        resolved = []
        for name in wanted:
            column = by_name.get(name) or by_lower.get(name.lower())
            if column is None:
                table = ".".join(self.table or ())
                raise PermanentError(
                    f"table {table} has no column '{name}' (it has "
                    f"{', '.join(c.name for c in columns)})"
                )
            resolved.append(column)
        return resolved

    def _prepare_table_query(self, columns: list[Column]) -> None:
        assert self.table is not None
        keys = self._resolve(columns, self.config.key_columns)
        values = self._resolve(columns, self.config.value_columns)
        self._set_columns(keys, values)
        table = ".".join(quote_identifier(part) for part in self.table)
        self.table_sql = table
        self._ranged = ranged_query.RangedQueries()
        self.exact_keys = all(k.compares_exactly for k in keys)
        if len(keys) == 1 and keys[0].compares_exactly:
            key = keys[0]
            selected = ", ".join(f"t.{quote_identifier(c.name)}" for c in keys + values)
            self.sql = (
                f"SELECT {selected} FROM {table} AS t "
                f"WHERE t.{quote_identifier(key.name)} = ANY($1::{cast_type(key.pg_type)}[])"
            )
            return
        # the server says which asked key each row answers: k.i, its 1-based position (then
        # the row's own key, when reported)
        reported = keys if self.reports_keys else []
        selected = ", ".join(["k.i"] + [f"t.{quote_identifier(c.name)}" for c in reported + values])
        arrays = ", ".join(f"${i + 1}::{cast_type(k.pg_type)}[]" for i, k in enumerate(keys))
        aliases = ", ".join(f"k{i}" for i in range(len(keys)))
        join = " AND ".join(f"t.{quote_identifier(k.name)} = k.k{i}" for i, k in enumerate(keys))
        self.sql = (
            f"SELECT {selected} FROM {table} AS t "
            f"JOIN unnest({arrays}) WITH ORDINALITY AS k({aliases}, i) ON {join}"
        )
        self.positions_from_server = True

    def _set_columns(self, keys: list[Column], values: list[Column]) -> None:
        self.key_types = [k.pg_type for k in keys]
        self.value_types = [v.pg_type for v in values]
        self.columns = [c.name for c in keys + values]
        self.converters = []
        for position, column in enumerate(values, start=len(keys)):
            spark_name = self.config.value_columns[position - len(keys)]
            convert = _converter(column.pg_type, self.config.value_type(spark_name))
            if convert is not None:
                self.converters.append((position, spark_name, convert))

    async def _prepare_custom_query(self, connection: Any) -> None:
        assert self.custom is not None
        try:
            statement = await connection.prepare(self.custom)
        except Exception as exc:
            raise PermanentError(f"postgres.query does not prepare: {exc}") from exc
        parameters = statement.get_parameters()
        if len(parameters) != len(self.config.key_columns):
            raise PermanentError(
                f"postgres.query takes {len(parameters)} parameter(s); it must take one array "
                f"per key column ({', '.join(self.config.key_columns)})"
            )
        attributes = {a.name: a for a in statement.get_attributes()}
        lower = {name.lower(): a for name, a in attributes.items()}
        wanted = list(self.config.key_columns) + list(self.config.value_columns)
        found = []
        for name in wanted:
            attribute = attributes.get(name) or lower.get(name.lower())
            if attribute is None:
                raise PermanentError(
                    f"postgres.query returns no column '{name}' (it returns "
                    f"{', '.join(attributes)})"
                )
            found.append(Column(attribute.name, type_name(attribute.type), False))
        width = len(self.config.key_columns)
        key_types = [type_name(p).removesuffix("[]") for p in parameters]
        self._set_columns(
            [Column(c.name, t, False) for c, t in zip(found[:width], key_types)], found[width:]
        )
        self.sql = self.custom

    def arguments(self, keys: pa.RecordBatch) -> list[list[Any]]:
        """The bound parameters: one list of key values per key column."""
        arguments = []
        for position, pg_type in enumerate(self.key_types):
            column = keys.column(position)
            values = column.to_pylist()
            textual = pa.types.is_string(column.type) or pa.types.is_large_string(column.type)
            if pg_type == "uuid" or (pg_type in TEXT_TYPES and not textual):
                values = [_key_value(v, pg_type) for v in values]
            arguments.append(values)
        return arguments

    def returned_keys(self, values: Sequence[Any], position: int, keys: pa.RecordBatch) -> pa.Array:
        """A key column of the answer, in the asked keys' type, to match rows to keys."""
        wanted = keys.column(position).type
        pg_type = self.key_types[position]
        if pg_type not in EXACT_KEY_TYPES:
            values = [_normal(v) for v in values]
        elif reads_natively(
            pg_type, wanted
        ):  # ints into ints, text into strings: no check per value
            with contextlib.suppress(pa.ArrowException, TypeError, ValueError, OverflowError):
                return pa.array(values, type=wanted)
        array, _ = to_arrow_column(list(values), wanted, column=self.config.key_columns[position])
        return array  # a key that does not convert is null: it matches no asked key

    def value_arrays(
        self, columns: Sequence[Sequence[Any]], rows: int
    ) -> tuple[pa.RecordBatch, dict[int, str]]:
        """The value columns of the answer (``rows`` rows) as Arrow, and what does not fit, by
        row."""
        converters = {position: convert for position, _, convert in self.converters}
        width = len(self.key_types)
        arrays = []
        reasons: dict[int, str] = {}
        for position, field in enumerate(self.value_fields):
            values = list(columns[position])
            convert = converters.get(position + width)
            if convert is not None:
                values = [_converted(v, convert) for v in values]
            elif reads_natively(self.value_types[position], field.type):
                with contextlib.suppress(pa.ArrowException, TypeError, ValueError, OverflowError):
                    arrays.append(pa.array(values, type=field.type))
                    continue
            array, bad = to_arrow_column(values, field.type, column=field.name)
            for row, message in bad.items():
                reasons.setdefault(row, message)
            arrays.append(array)
        return value_batch(arrays, self.value_fields, rows), reasons


def _converter(pg_type: str, arrow_type: pa.DataType) -> Callable[[Any], Any] | None:
    """How a value asyncpg returns becomes something the Arrow column accepts."""
    textual = pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
    if pg_type in JSON_TYPES and not textual:
        return json.loads
    if pg_type == "uuid" or pg_type == "inet":
        return str
    if pg_type.startswith("numeric") and pa.types.is_floating(arrow_type):
        return float
    if textual and pg_type not in TEXT_TYPES and pg_type not in JSON_TYPES:
        return str
    return None


def _key_value(value: Any, pg_type: str) -> Any:
    """A lookup key as the parameter type asyncpg expects for the key column."""
    if pg_type in TEXT_TYPES and not isinstance(value, str):
        return str(value)
    if pg_type == "uuid" and isinstance(value, str):
        return uuid.UUID(value)
    return value


def _normal(value: Any) -> Any:
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, Decimal) and value == value.to_integral_value():
        return int(value)
    return value


def cast_type(pg_type: str) -> str:
    """The type to cast the key array to: ``character`` alone means char(1), which would cut
    every key to one letter; ``bpchar`` is blank-padded text of any length."""
    return "bpchar" if pg_type == "character" else pg_type


def _scanned_column(values: Sequence[Any], pg_type: str) -> pa.Array:
    """A key column read by a scan, as Arrow (uuid as text, integral numerics as integers)."""
    if pg_type not in EXACT_KEY_TYPES:
        values = [_normal(v) for v in values]
    return scanned_keys(values)


def _converted(value: Any, convert: Callable[[Any], Any]) -> Any:
    """``convert(value)``; on failure the value as it is, which then is reported not to fit."""
    if value is None:
        return None
    try:
        return convert(value)
    except (ValueError, TypeError):
        return value


def reads_natively(pg_type: str, arrow_type: pa.DataType) -> bool:
    """Whether asyncpg's values of ``pg_type`` go into ``arrow_type`` as they are (no bool
    read as a number, no float as an integer: the checks of the reference path hold)."""
    if pa.types.is_integer(arrow_type):
        return pg_type in INT_TYPES
    if pa.types.is_floating(arrow_type):
        return pg_type in INT_TYPES or pg_type in FLOAT_TYPES
    if pa.types.is_boolean(arrow_type):
        return pg_type == "boolean"
    return True


def scan_filter(
    key: str,
    split: tuple[int | None, int | None] | None,
    partition: int,
    partitions: int,
    *,
    literal: bool = False,
) -> tuple[str, list[int]]:
    """The ``WHERE`` clause of part ``partition`` of a scan (``""`` for the whole table) and its
    parameters: the keys in ``split``'s [lower, upper) (None: open on that side; the range open
    below also takes NULL keys), else those whose text hashes into the part. ``literal``: the
    bounds written in as integers (a ``COPY``, which binds none), no parameters."""
    bounds: list[int] = []

    def bound(value: int) -> str:
        if literal:
            return str(int(value))
        bounds.append(int(value))
        return f"${len(bounds)}"

    if split is not None:
        lower, upper = split
        if lower is None and upper is None:
            return "", []
        if lower is None:
            assert upper is not None
            return f" WHERE ({key} < {bound(upper)} OR {key} IS NULL)", bounds
        if upper is None:
            return f" WHERE {key} >= {bound(lower)}", bounds
        return f" WHERE {key} >= {bound(lower)} AND {key} < {bound(upper)}", bounds
    if partitions < 2:
        return "", []
    hashed = f"mod(hashtext(({key})::text)::bigint + 2147483648, {bound(partitions)})"
    return f" WHERE {hashed} = {bound(partition)}", bounds


def sends_as_itself(pg_type: str, arrow_type: pa.DataType | None) -> bool:
    """Whether a key of ``arrow_type`` (the declared key type) reaches a ``pg_type`` column as
    the value a scan of that column reads: the column's own type, not another's."""
    if arrow_type is None:
        return False
    base = pg_type.split("(")[0]
    if pg_type in INT_TYPES:
        return pa.types.is_integer(arrow_type)
    if pg_type in TEXT_TYPES or pg_type == "uuid":
        return pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
    if base == "numeric":
        return pa.types.is_decimal(arrow_type) or pa.types.is_integer(arrow_type)
    if pg_type == "date":
        return pa.types.is_date(arrow_type)
    if pg_type == "timestamp with time zone":
        return pa.types.is_timestamp(arrow_type) and arrow_type.tz is not None
    if pg_type == "timestamp without time zone":
        return pa.types.is_timestamp(arrow_type) and arrow_type.tz is None
    if pg_type == "boolean":
        return pa.types.is_boolean(arrow_type)
    return False
