"""Postgres connector (asyncpg).

``connector=postgres``, ``url`` a libpq URL (``postgresql://user@host:5432/db?sslmode=require``),
the password from ``postgres.password.env`` (an environment variable of the executor) or the URL.

With ``postgres.table``, lookups run ``SELECT ... WHERE key = ANY($1::<key type>[])`` (composite
keys: a join against ``unnest($1::t1[], $2::t2[])``), ``batch.size`` keys per query, over a pool
of at most ``capacity`` connections. Keys are compared in the column's own type, so the lookup
stays on the index. Identifiers are quoted and values always bound as parameters.

Rows come back as columns: asyncpg's records are transposed and each column becomes one Arrow
array. Which asked key a row answers is found in Arrow (integer and text keys, whose equality
is byte equality) or reported by the server itself (``unnest(...) WITH ORDINALITY``: citext,
char(n), uuid, numeric... and composite keys), so every row a key matches reaches that key.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from lookup_source.connector_api import (
    SCAN_CHUNK_ROWS,
    ConnectorConfig,
    ConnectorError,
    ConnectorOptions,
    LookupClient,
    Matches,
    OptionError,
    OptionSpec,
    OverloadedError,
    PermanentError,
    SchemaError,
    TlsSettings,
    TransientError,
    match_rows,
    parse_positive_int,
    parse_text,
    secret_from_env,
    tls_failure,
    tls_option_specs,
    to_arrow_column,
    translated_errors,
)

_TEXT_TYPES = frozenset({"text", "character varying", "character", "name", "citext", "bpchar"})
_INT_TYPES = frozenset({"smallint", "integer", "bigint"})
_JSON_TYPES = frozenset({"json", "jsonb"})
_FLOAT_TYPES = frozenset({"real", "double precision"})
# keys equal exactly when their bytes are equal: a returned key can be matched to the asked one
# on the client. Others (citext, char(n) padding, uuid case, numeric scale...) get their
# position from the server.
_EXACT_KEY_TYPES = _INT_TYPES | frozenset({"text", "character varying", "name"})


def classify(error: Exception) -> type[ConnectorError] | ConnectorError | None:
    """What an asyncpg exception means to the engine (see ``translated_errors``)."""
    import asyncpg
    from asyncpg import exceptions as pgx

    tls = tls_failure(error, "postgres")
    if tls is not None:
        return tls  # a certificate that does not verify will not start to
    if isinstance(
        error, (asyncpg.InvalidPasswordError, pgx.InvalidAuthorizationSpecificationError)
    ):
        return PermanentError  # a wrong password or role does not get better by retrying
    if isinstance(error, asyncpg.TooManyConnectionsError):
        return OverloadedError  # the server is out of connections
    if isinstance(
        error,
        (
            asyncpg.ConnectionDoesNotExistError,
            asyncpg.CannotConnectNowError,
            pgx.ConnectionFailureError,
            pgx.SerializationError,
            pgx.DeadlockDetectedError,
            pgx.AdminShutdownError,
            asyncpg.InterfaceError,  # "connection is closed", "another operation in progress"
            pgx.InternalClientError,  # a connection left mid-protocol by a server restart
        ),
    ):
        return TransientError
    if isinstance(error, asyncpg.PostgresError):
        return PermanentError  # the server refused the query: a type, a permission, a syntax
    return None


_ASYNCPG_ERRORS = translated_errors("asyncpg", classify)

# Postgres type (format_type without modifiers) -> Spark DDL type, for schema inference.
SPARK_TYPES: dict[str, str] = {
    "smallint": "smallint",
    "integer": "int",
    "bigint": "bigint",
    "real": "float",
    "double precision": "double",
    "text": "string",
    "character varying": "string",
    "character": "string",
    "name": "string",
    "citext": "string",
    "uuid": "string",
    "json": "string",
    "jsonb": "string",
    "boolean": "boolean",
    "date": "date",
    "timestamp without time zone": "timestamp_ntz",
    "timestamp with time zone": "timestamp",
    "bytea": "binary",
    "inet": "string",
}


def quote_identifier(name: str) -> str:
    """``name`` as a quoted SQL identifier: ``a"b`` -> ``"a""b"``."""
    if "\x00" in name:
        raise OptionError("postgres.table", "an identifier cannot contain a NUL character")
    return '"' + name.replace('"', '""') + '"'


def split_table_name(text: str) -> tuple[str, ...]:
    """``schema.table`` -> its parts, folding unquoted parts to lower case as Postgres does.

    >>> split_table_name('public.Users'), split_table_name('"My Schema"."T.1"')
    (('public', 'users'), ('My Schema', 'T.1'))
    """
    parts: list[str] = []
    i, n = 0, len(text)
    while i < n:
        if text[i] == '"':
            j, buf = i + 1, []
            while True:
                if j >= n:
                    raise OptionError("postgres.table", f"{text!r} has an unclosed quote")
                if text[j] == '"':
                    if j + 1 < n and text[j + 1] == '"':
                        buf.append('"')
                        j += 2
                        continue
                    break
                buf.append(text[j])
                j += 1
            parts.append("".join(buf))
            i = j + 1
        else:
            j = text.find(".", i)
            j = n if j < 0 else j
            part = text[i:j].strip()
            if not part:
                raise OptionError("postgres.table", f"{text!r} is not a table name")
            parts.append(part.lower())
            i = j
        if i < n:
            if text[i] != ".":
                raise OptionError("postgres.table", f"{text!r} is not a table name")
            i += 1
            if i >= n:
                raise OptionError("postgres.table", f"{text!r} ends with a dot")
    if not 1 <= len(parts) <= 2:
        raise OptionError("postgres.table", f"{text!r}: use table or schema.table")
    return tuple(parts)


@dataclass(frozen=True)
class Column:
    name: str
    pg_type: str
    primary_key: bool


async def describe_table(connection: Any, table: tuple[str, ...]) -> list[Column]:
    """The columns of ``table`` from the catalog, with their types and primary-key flag."""
    qualified = ".".join(quote_identifier(part) for part in table)
    try:
        rows = await connection.fetch(
            """
            SELECT a.attname, format_type(a.atttypid, NULL) AS pg_type,
                   coalesce(a.attnum = ANY(i.indkey), false) AS pk, a.attnum
            FROM pg_attribute a
            LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary
            WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
            ORDER BY a.attnum
            """,
            qualified,
        )
    except Exception as exc:
        raise PermanentError(f"cannot read the columns of table {qualified}: {exc}") from exc
    if not rows:
        raise PermanentError(f"table {qualified} does not exist (or has no columns)")
    return [Column(r["attname"], r["pg_type"], bool(r["pk"])) for r in rows]


def _converter(pg_type: str, arrow_type: pa.DataType) -> Callable[[Any], Any] | None:
    """How a value asyncpg returns becomes something the Arrow column accepts."""
    textual = pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
    if pg_type in _JSON_TYPES and not textual:
        return json.loads
    if pg_type == "uuid" or pg_type == "inet":
        return str
    if pg_type.startswith("numeric") and pa.types.is_floating(arrow_type):
        return float
    if textual and pg_type not in _TEXT_TYPES and pg_type not in _JSON_TYPES:
        return str
    return None


def _key_value(value: Any, pg_type: str) -> Any:
    """A lookup key as the parameter type asyncpg expects for the key column."""
    if pg_type in _TEXT_TYPES and not isinstance(value, str):
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


class PostgresLookupClient(LookupClient):
    """Looks keys up in a Postgres table (or a custom query) with asyncpg."""

    name: ClassVar[str] = "postgres"
    default_batch_size: ClassVar[int] = 500
    # asyncpg can swallow the cancellation of a query on a connection cut under it: the
    # engine must be able to abandon a request that overstays its deadline
    honours_cancellation: ClassVar[bool] = False
    supports_scan: ClassVar[bool] = True
    option_specs: ClassVar[tuple[OptionSpec, ...]] = (
        OptionSpec(
            "postgres.table",
            parse_text,
            None,
            "Table to look keys up in, optionally `schema.table`; its columns are named as in "
            "the Spark schema.",
        ),
        OptionSpec(
            "postgres.query",
            parse_text,
            None,
            "Instead of a table: a query taking the keys as `$1` (an array; composite keys: "
            "`$1, $2, ...`, one array per key column) and returning the key and value columns.",
        ),
        OptionSpec(
            "postgres.pool-size",
            parse_positive_int,
            10,
            "Connections per task (at most `capacity`). Requests beyond it wait for a free "
            "connection: keep tasks x pool size under the server's max_connections.",
        ),
        OptionSpec(
            "postgres.password.env",
            parse_text,
            None,
            "Name of an environment variable, on the executors, holding the password.",
        ),
        *tls_option_specs("postgres", "the Postgres server"),
    )

    def __init__(self, config: ConnectorConfig) -> None:
        super().__init__(config)
        options = config.options
        table = options.get("postgres.table")
        self._table: tuple[str, ...] | None = split_table_name(table) if table else None
        self._custom_query: str | None = options.get("postgres.query")
        self._pool_size: int = options.get("postgres.pool-size", 10)
        self._pool: Any = None
        self._ready = asyncio.Lock()
        self._query = ""
        self._positions_from_server = False  # the query's first column is the key's position
        self._key_types: list[str] = []
        self._columns: list[str] = []  # catalog names: key columns, then value columns
        self._converters: list[tuple[int, str, Callable[[Any], Any]]] = []
        self._value_types: list[str] = []

    # -- validation ----------------------------------------------------------------------------

    @classmethod
    def validate_options(cls, options: ConnectorOptions) -> None:
        url = options.url
        if not url:
            raise OptionError(
                "url", "is required for connector postgres, e.g. postgresql://user@host:5432/db"
            )
        if not url.startswith(("postgresql://", "postgres://")):
            raise OptionError("url", "must start with postgresql:// or postgres://")
        tls = TlsSettings.from_options("postgres", options.options)
        if tls.configured and "sslmode=disable" in url:
            raise OptionError(tls.first_option, "applies to TLS, which sslmode=disable turns off")
        table = options.options.get("postgres.table")
        query = options.options.get("postgres.query")
        if bool(table) == bool(query):
            raise OptionError(
                "postgres.table", "set exactly one of postgres.table and postgres.query"
            )
        if table:
            split_table_name(table)

    @classmethod
    def can_scan(cls, config: ConnectorConfig) -> bool:
        return bool(config.options.get("postgres.table"))

    @classmethod
    def infer_schema(cls, options: ConnectorOptions) -> tuple[str, tuple[str, ...]]:
        return infer_schema(options)

    # -- life cycle ----------------------------------------------------------------------------

    @staticmethod
    def connect_arguments(url: str, options: Mapping[str, Any]) -> dict[str, Any]:
        arguments: dict[str, Any] = {"dsn": url}
        variable = options.get("postgres.password.env")
        if variable:
            arguments["password"] = secret_from_env("postgres.password.env", variable)
        tls = TlsSettings.from_options("postgres", options)
        if tls.configured:  # else the URL's sslmode and sslrootcert, if any
            arguments["ssl"] = tls.context()
        return arguments

    async def open(self) -> None:
        # Connect lazily, on the first request: a store that is down then fails requests,
        # which are retried and handled by on.error like any other failure.
        self._ready = asyncio.Lock()

    async def _connect(self) -> Any:
        if self._pool is not None:
            return self._pool
        import asyncpg

        async with self._ready:
            if self._pool is None:
                assert self.config.url is not None
                pool = await asyncpg.create_pool(
                    **self.connect_arguments(self.config.url, self.config.options),
                    min_size=1,
                    max_size=max(1, min(self.config.capacity, self._pool_size)),
                    command_timeout=None,
                )
                try:
                    async with pool.acquire() as connection:
                        if self._table is not None:
                            self._prepare_table_query(await describe_table(connection, self._table))
                        else:
                            await self._prepare_custom_query(connection)
                except BaseException:
                    pool.terminate()
                    raise
                self._pool = pool
        return self._pool

    async def close(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            try:
                await asyncio.wait_for(pool.close(), 10)
            except (asyncio.TimeoutError, TimeoutError):
                pool.terminate()

    def _resolve(self, columns: list[Column], wanted: Sequence[str]) -> list[Column]:
        by_name = {c.name: c for c in columns}
        by_lower: dict[str, Column] = {}
        for c in columns:
            by_lower.setdefault(c.name.lower(), c)
        resolved = []
        for name in wanted:
            column = by_name.get(name) or by_lower.get(name.lower())
            if column is None:
                table = ".".join(self._table or ())
                raise PermanentError(
                    f"table {table} has no column '{name}' (it has "
                    f"{', '.join(c.name for c in columns)})"
                )
            resolved.append(column)
        return resolved

    def _prepare_table_query(self, columns: list[Column]) -> None:
        assert self._table is not None
        keys = self._resolve(columns, self.config.key_columns)
        values = self._resolve(columns, self.config.value_columns)
        self._set_columns(keys, values)
        table = ".".join(quote_identifier(part) for part in self._table)
        if len(keys) == 1 and keys[0].pg_type in _EXACT_KEY_TYPES:
            key = keys[0]
            selected = ", ".join(f"t.{quote_identifier(c.name)}" for c in keys + values)
            self._query = (
                f"SELECT {selected} FROM {table} AS t "
                f"WHERE t.{quote_identifier(key.name)} = ANY($1::{_cast_type(key.pg_type)}[])"
            )
            return
        # the server says which asked key each row answers: k.i, its 1-based position
        selected = ", ".join(["k.i"] + [f"t.{quote_identifier(c.name)}" for c in values])
        arrays = ", ".join(f"${i + 1}::{_cast_type(k.pg_type)}[]" for i, k in enumerate(keys))
        aliases = ", ".join(f"k{i}" for i in range(len(keys)))
        join = " AND ".join(f"t.{quote_identifier(k.name)} = k.k{i}" for i, k in enumerate(keys))
        self._query = (
            f"SELECT {selected} FROM {table} AS t "
            f"JOIN unnest({arrays}) WITH ORDINALITY AS k({aliases}, i) ON {join}"
        )
        self._positions_from_server = True

    def _set_columns(self, keys: list[Column], values: list[Column]) -> None:
        self._key_types = [k.pg_type for k in keys]
        self._value_types = [v.pg_type for v in values]
        self._columns = [c.name for c in keys + values]
        self._converters = []
        for position, column in enumerate(values, start=len(keys)):
            spark_name = self.config.value_columns[position - len(keys)]
            convert = _converter(column.pg_type, self.config.value_type(spark_name))
            if convert is not None:
                self._converters.append((position, spark_name, convert))

    async def _prepare_custom_query(self, connection: Any) -> None:
        assert self._custom_query is not None
        try:
            statement = await connection.prepare(self._custom_query)
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
            found.append(Column(attribute.name, _type_name(attribute.type), False))
        width = len(self.config.key_columns)
        key_types = [_type_name(p).removesuffix("[]") for p in parameters]
        self._set_columns(
            [Column(c.name, t, False) for c, t in zip(found[:width], key_types)], found[width:]
        )
        self._query = self._custom_query

    # -- lookups -------------------------------------------------------------------------------

    async def lookup_arrow(self, keys: pa.RecordBatch) -> Matches:
        with _ASYNCPG_ERRORS:
            pool = await self._connect()
            rows = await self._fetch(pool, self._arguments(keys))
        if not rows:
            return Matches.none(self.value_fields)
        columns = list(zip(*rows))  # one tuple per column: asyncpg's records, transposed
        width = 1 if self._positions_from_server else len(self._key_types)
        if self._positions_from_server:
            index = np.asarray(columns[0], dtype=np.int64) - 1
        else:
            returned = [self._returned_keys(columns[i], i, keys) for i in range(width)]
            index = match_rows(returned, list(keys.columns))
        keep = index >= 0  # a custom query may return rows for keys nobody asked
        if not keep.all():
            columns = [tuple(np.asarray(c, dtype=object)[keep]) for c in columns]
            index = index[keep]
        values, reasons = self._value_arrays(columns[width:])
        errors = None
        if reasons:
            errors = pa.array([reasons.get(row) for row in range(len(index))], type=pa.string())
        return Matches(index, values, errors)

    def _arguments(self, keys: pa.RecordBatch) -> list[list[Any]]:
        """The bound parameters: one list of key values per key column."""
        arguments = []
        for position, pg_type in enumerate(self._key_types):
            column = keys.column(position)
            values = column.to_pylist()
            textual = pa.types.is_string(column.type) or pa.types.is_large_string(column.type)
            if pg_type == "uuid" or (pg_type in _TEXT_TYPES and not textual):
                values = [_key_value(v, pg_type) for v in values]
            arguments.append(values)
        return arguments

    def _returned_keys(
        self, values: Sequence[Any], position: int, keys: pa.RecordBatch
    ) -> pa.Array:
        """A key column of the answer, in the asked keys' type, to match rows to keys."""
        wanted = keys.column(position).type
        if self._key_types[position] not in _EXACT_KEY_TYPES:
            values = [_normal(v) for v in values]
        array, _ = to_arrow_column(list(values), wanted, column=self.config.key_columns[position])
        return array  # a key that does not convert is null: it matches no asked key

    def _value_arrays(
        self, columns: Sequence[Sequence[Any]]
    ) -> tuple[pa.RecordBatch, dict[int, str]]:
        """The value columns of the answer as Arrow, and what does not fit, by row."""
        converters = {position: convert for position, _, convert in self._converters}
        width = len(self._key_types)
        arrays = []
        reasons: dict[int, str] = {}
        for position, field in enumerate(self.value_fields):
            values = list(columns[position])
            convert = converters.get(position + width)
            if convert is not None:
                values = [_converted(v, convert) for v in values]
            elif _native(self._value_types[position], field.type):
                with contextlib.suppress(pa.ArrowException, TypeError, ValueError, OverflowError):
                    arrays.append(pa.array(values, type=field.type))
                    continue
            array, bad = to_arrow_column(values, field.type, column=field.name)
            for row, message in bad.items():
                reasons.setdefault(row, message)
            arrays.append(array)
        schema = pa.schema(self.value_fields)
        return pa.RecordBatch.from_arrays(arrays, schema=schema), reasons

    async def _fetch(self, pool: Any, arguments: list[Any]) -> list[Any]:
        """Run the lookup query on a pooled connection. A connection whose query failed or was
        cancelled is in doubt (a cut socket, a half-read answer): it is dropped, never handed to
        the next request, so a cut cannot starve the pool."""
        limit = self.config.timeout_s
        connection = await pool.acquire(timeout=limit)
        try:
            return list(await connection.fetch(self._query, *arguments, timeout=limit))
        except BaseException:
            connection.terminate()
            raise
        finally:
            await pool.release(connection, timeout=limit)

    async def scan_splits(self, partitions: int) -> list[tuple[int | None, int | None]] | None:
        """Key ranges, when the key is one integer column (as Spark's JDBC source cuts with
        ``partitionColumn``, ``lowerBound`` and ``upperBound``): ``partitions`` ranges of equal
        width between the smallest and the largest key, read through the key's index. The
        first range is open below (and takes the rows with a NULL key), the last open above:
        the parts read every row once, even one inserted after the plan. Otherwise None: each
        part reads the rows whose key hashes into it."""
        with _ASYNCPG_ERRORS:
            if self._table is None:
                return None
            pool = await self._connect()
            if len(self._key_types) != 1 or self._key_types[0] not in _INT_TYPES:
                return None
            key = quote_identifier(self._columns[0])
            table = ".".join(quote_identifier(part) for part in self._table)
            async with pool.acquire() as connection:
                low, high = await connection.fetchrow(
                    f"SELECT min({key}), max({key}) FROM {table}", timeout=self.config.timeout_s
                )
        if low is None:  # an empty table
            return None
        width = high - low + 1
        edges = [None, *(low + width * i // partitions for i in range(1, partitions)), None]
        return [(edges[i], edges[i + 1]) for i in range(partitions)]

    async def scan_arrow(
        self, partition: int = 0, partitions: int = 1, *, split: Any = None
    ) -> AsyncIterator[tuple[pa.RecordBatch, Matches]]:
        """Every row of part ``partition`` of ``partitions`` of the table — its key range
        (``split``, from :meth:`scan_splits`), or the rows whose key hashes into it — in chunks
        of columns read from one cursor."""
        with _ASYNCPG_ERRORS:
            if self._table is None:
                raise PermanentError("a postgres.query cannot be scanned; use postgres.table")
            pool = await self._connect()
            table = ".".join(quote_identifier(part) for part in self._table)
            columns = ", ".join(quote_identifier(c) for c in self._columns)
            width = len(self._key_types)
            key_expression = (
                quote_identifier(self._columns[0])
                if width == 1
                else "row(" + ", ".join(quote_identifier(c) for c in self._columns[:width]) + ")"
            )
            query = f"SELECT {columns} FROM {table}"
            arguments: list[Any] = []
            if split is not None:
                query, arguments = _in_range(query, key_expression, *split)
            elif partitions > 1:
                query += (
                    f" WHERE mod(hashtext(({key_expression})::text)::bigint + 2147483648, $1) = $2"
                )
                arguments = [partitions, partition]
            names = list(self.config.key_columns)
            async with pool.acquire() as connection, connection.transaction(readonly=True):
                cursor = await connection.cursor(query, *arguments)
                while True:
                    rows = await cursor.fetch(SCAN_CHUNK_ROWS)
                    if not rows:
                        return
                    transposed = list(zip(*rows))
                    keys = pa.RecordBatch.from_arrays(
                        [_scanned_keys(transposed[i], self._key_types[i]) for i in range(width)],
                        names=names,
                    )
                    values, reasons = self._value_arrays(transposed[width:])
                    errors = None
                    if reasons:
                        errors = pa.array([reasons.get(r) for r in range(len(rows))], pa.string())
                    yield keys, Matches(np.arange(len(rows)), values, errors)


def _in_range(query: str, key: str, lower: int | None, upper: int | None) -> tuple[str, list[Any]]:
    """``query`` restricted to the keys in [lower, upper) (None: open on that side; the range
    open below also takes NULL keys), with the bounds as parameters."""
    if lower is None and upper is None:
        return query, []
    if lower is None:
        return f"{query} WHERE ({key} < $1 OR {key} IS NULL)", [upper]
    if upper is None:
        return f"{query} WHERE {key} >= $1", [lower]
    return f"{query} WHERE {key} >= $1 AND {key} < $2", [lower, upper]


def _type_name(pg_type: Any) -> str:
    name = str(getattr(pg_type, "name", pg_type))
    aliases = {
        "int2": "smallint",
        "int4": "integer",
        "int8": "bigint",
        "float4": "real",
        "float8": "double precision",
        "varchar": "character varying",
        "bool": "boolean",
        "timestamptz": "timestamp with time zone",
        "timestamp": "timestamp without time zone",
        "_int2": "smallint[]",
        "_int4": "integer[]",
        "_int8": "bigint[]",
        "_text": "text[]",
        "_varchar": "character varying[]",
        "_uuid": "uuid[]",
        "_date": "date[]",
    }
    return aliases.get(name, name)


def _cast_type(pg_type: str) -> str:
    """The type to cast the key array to: ``character`` alone means char(1), which would cut
    every key to one letter; ``bpchar`` is blank-padded text of any length."""
    return "bpchar" if pg_type == "character" else pg_type


def _scanned_keys(values: Sequence[Any], pg_type: str) -> pa.Array:
    """A key column read by a scan, as Arrow (uuid as text, integral numerics as integers)."""
    if pg_type not in _EXACT_KEY_TYPES:
        values = [_normal(v) for v in values]
    try:
        return pa.array(list(values))
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return pa.array([None if v is None else str(v) for v in values], type=pa.string())


def _converted(value: Any, convert: Callable[[Any], Any]) -> Any:
    """``convert(value)``; on failure the value as it is, which then is reported not to fit."""
    if value is None:
        return None
    try:
        return convert(value)
    except (ValueError, TypeError):
        return value


def _native(pg_type: str, arrow_type: pa.DataType) -> bool:
    """Whether asyncpg's values of ``pg_type`` go into ``arrow_type`` as they are (no bool
    read as a number, no float as an integer: the checks of the reference path hold)."""
    if pa.types.is_integer(arrow_type):
        return pg_type in _INT_TYPES
    if pa.types.is_floating(arrow_type):
        return pg_type in _INT_TYPES or pg_type in _FLOAT_TYPES
    if pa.types.is_boolean(arrow_type):
        return pg_type == "boolean"
    return True


def spark_type_for(column: Column) -> str:
    """The Spark DDL type of a Postgres column, or a SchemaError naming it."""
    pg_type = column.pg_type
    array = pg_type.endswith("[]")
    base = pg_type.removesuffix("[]")
    spark = "decimal(38,10)" if base.startswith("numeric") else SPARK_TYPES.get(base, "")
    if not spark:
        raise SchemaError(
            f"column '{column.name}' has Postgres type {pg_type}, which asynclookup does not map "
            "to a Spark type; give the schema yourself, e.g. .schema('id long, v string'), or "
            "cast the column in a postgres.query",
            column=column.name,
        )
    return f"array<{spark}>" if array else spark


def infer_schema(options: ConnectorOptions) -> tuple[str, tuple[str, ...]]:
    """Read the table's columns: a Spark DDL schema (primary key first) and the key columns."""
    table = options.options.get("postgres.table")
    if not table:
        raise SchemaError(
            "a schema can be inferred from postgres.table only; give one with "
            ".schema(...) when using postgres.query"
        )
    parts = split_table_name(table)

    async def read() -> list[Column]:
        import asyncpg

        assert options.url is not None
        connection = await asyncpg.connect(
            **PostgresLookupClient.connect_arguments(options.url, options.options),
            timeout=options.timeout_s,
        )
        try:
            return await describe_table(connection, parts)
        finally:
            await connection.close()

    with _ASYNCPG_ERRORS:
        columns = asyncio.run(read())
    if options.key_columns:
        lower = {c.lower() for c in options.key_columns}
        keys = [c for c in columns if c.name.lower() in lower]
    else:
        keys = [c for c in columns if c.primary_key]
        if not keys:
            raise SchemaError(
                f"table {table} has no primary key: set option key.column to its key column(s)"
            )
    ordered = keys + [c for c in columns if c not in keys]
    ddl = ", ".join(f"`{c.name}` {spark_type_for(c)}" for c in ordered)
    return ddl, tuple(c.name for c in keys)
