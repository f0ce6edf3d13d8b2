"""Postgres names and catalog: quoted identifiers, table names, a table's columns and types,
and the Spark schema inferred from them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from asynclookup_postgres.options import TABLE
from lookup_source.connector_api import (
    ConnectorConfig,
    OptionError,
    PermanentError,
    SchemaError,
    translated_errors,
)

TEXT_TYPES = frozenset({"text", "character varying", "character", "name", "citext", "bpchar"})
INT_TYPES = frozenset({"smallint", "integer", "bigint"})
JSON_TYPES = frozenset({"json", "jsonb"})
FLOAT_TYPES = frozenset({"real", "double precision"})
# keys equal exactly when their bytes are equal: a returned key can be matched to the asked one
# on the client. Others (citext, char(n) padding, uuid case, numeric scale...) get their
# position from the server.
EXACT_KEY_TYPES = INT_TYPES | frozenset({"text", "character varying", "name"})


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
    exact_collation: bool = True
    """False for a column under a nondeterministic collation (case- or accent-insensitive),
    whose ``=`` matches values with other bytes."""

    @property
    def compares_exactly(self) -> bool:
        """Whether ``=`` on this column is byte equality (Spark's for its Spark type)."""
        return self.pg_type in EXACT_KEY_TYPES and self.exact_collation


async def describe_table(connection: Any, table: tuple[str, ...]) -> list[Column]:
    """The columns of ``table`` from the catalog, with their types and primary-key flag."""
    qualified = ".".join(quote_identifier(part) for part in table)
    try:
        rows = await connection.fetch(
            """
            SELECT a.attname, format_type(a.atttypid, NULL) AS pg_type,
                   coalesce(a.attnum = ANY(i.indkey), false) AS pk, a.attnum,
                   coalesce((to_jsonb(c) ->> 'collisdeterministic')::boolean, true)
                       AS exact_collation
            FROM pg_attribute a
            LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary
            LEFT JOIN pg_collation c ON c.oid = a.attcollation
            WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
            ORDER BY a.attnum
            """,
            qualified,
        )
    except Exception as exc:
        raise PermanentError(f"cannot read the columns of table {qualified}: {exc}") from exc
    if not rows:
        raise PermanentError(f"table {qualified} does not exist (or has no columns)")
    return [
        Column(r["attname"], r["pg_type"], bool(r["pk"]), bool(r["exact_collation"])) for r in rows
    ]


def type_name(pg_type: Any) -> str:
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


def infer_schema(
    options: ConnectorConfig,
    connect_arguments: Callable[[str, Mapping[str, Any]], dict[str, Any]],
    errors: translated_errors,
) -> tuple[str, tuple[str, ...]]:
    """Read the table's columns: a Spark DDL schema (primary key first) and the key columns."""
    table = TABLE.get(options)
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
            **connect_arguments(options.url, options.options),
            timeout=options.timeout_s,
        )
        try:
            return await describe_table(connection, parts)
        finally:
            await connection.close()

    with errors:
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
