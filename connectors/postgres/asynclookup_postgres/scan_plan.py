"""How a scan of the table is planned: the table's rows as the catalog counts them (the
planner's choice of a scan over lookups), its integer key's range and the parts cut from it,
the ``SELECT`` a part reads, and whether ADBC's Arrow (:mod:`.arrow_scan`) or asyncpg's cursor
reads it."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pyarrow as pa

from asynclookup_postgres import arrow_scan
from asynclookup_postgres.arrow_scan import ArrowScan
from asynclookup_postgres.catalog import EXACT_KEY_TYPES, INT_TYPES, quote_identifier
from asynclookup_postgres.errors import ASYNCPG_ERRORS
from asynclookup_postgres.query import LookupQuery
from lookup_source.connector_api import ConnectorConfig, PermanentError

log = logging.getLogger("lookup_source")

Connect = Callable[[], Awaitable[Any]]
"""The client's pool, opened on demand (its first connection reads the catalog)."""


def qualified(table: tuple[str, ...]) -> str:
    """``table``'s parts quoted and joined: ``"schema"."table"``."""
    return ".".join(quote_identifier(part) for part in table)


async def estimate_rows(
    connect: Connect, table: tuple[str, ...], query: LookupQuery, limit: float
) -> int:
    """The rows of ``table`` as ``pg_class.reltuples`` counts them, else as the planner
    estimates them; a PermanentError when its key column's type compares otherwise than
    Spark's."""
    with ASYNCPG_ERRORS:
        pool = await connect()
        inexact = [t for t in query.key_types if t not in EXACT_KEY_TYPES]
        if inexact:  # the catalog says what the Spark types could not
            raise PermanentError(
                f"the key column's type ({inexact[0]}) compares otherwise in Postgres than "
                "in Spark: a scan and a join could match other rows"
            )
        name = qualified(table)
        async with pool.acquire() as connection:
            counted = await connection.fetchval(
                "SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass($1)",
                name,
                timeout=limit,
            )
            if counted is not None and counted >= 0:
                return int(counted)
            plan = await connection.fetchval(
                f"EXPLAIN (FORMAT JSON) SELECT 1 FROM {name}", timeout=limit
            )
    plans = json.loads(plan) if isinstance(plan, str) else plan
    return int(plans[0]["Plan"]["Plan Rows"])


async def key_range(
    connect: Connect, table: tuple[str, ...], query: LookupQuery, limit: float
) -> tuple[int, int] | None:
    """The smallest and largest key of ``table`` when its key is one integer column; None
    otherwise (or for an empty table)."""
    with ASYNCPG_ERRORS:
        pool = await connect()
        if len(query.key_types) != 1 or query.key_types[0] not in INT_TYPES:
            return None
        key = quote_identifier(query.columns[0])
        name = qualified(table)
        async with pool.acquire() as connection:
            low, high = await connection.fetchrow(
                f"SELECT min({key}), max({key}) FROM {name}", timeout=limit
            )
    return None if low is None else (int(low), int(high))


def splits(
    bounds: tuple[int, int] | None, partitions: int
) -> list[tuple[int | None, int | None]] | None:
    """``partitions`` key ranges of equal width between the smallest and the largest key
    (``bounds``), the first open below and the last open above; None without bounds."""
    if bounds is None:  # not one integer key, or an empty table
        return None
    low, high = bounds
    width = high - low + 1
    edges = [None, *(low + width * i // partitions for i in range(1, partitions)), None]
    return [(edges[i], edges[i + 1]) for i in range(partitions)]


def scan_select(table: tuple[str, ...], query: LookupQuery) -> tuple[str, str]:
    """The ``SELECT`` of every row of ``table`` (key columns, then value columns), without its
    ``WHERE``, and the key expression a part's filter applies to (``row(...)`` for a composite
    key)."""
    name = qualified(table)
    names = query.columns
    columns = ", ".join(quote_identifier(c) for c in names)
    width = len(query.key_types)
    key_expression = (
        quote_identifier(names[0])
        if width == 1
        else "row(" + ", ".join(quote_identifier(c) for c in names[:width]) + ")"
    )
    return f"SELECT {columns} FROM {name}", key_expression


def adbc_scan(
    config: ConnectorConfig,
    query: LookupQuery,
    value_fields: Sequence[pa.Field],
    sql: str,
    logged: set[str],
) -> ArrowScan | None:
    """The scan of ``sql`` read by the ADBC driver, when it reads these columns as asyncpg
    does and libpq reads the connection's settings as asyncpg does; else None (asyncpg's
    cursor), the reason logged once per ``logged`` (a client's)."""
    types = [*config.key_types, *(f.type for f in value_fields)]
    why = (
        "the adbc-driver-postgresql package is not installed"
        if not arrow_scan.available()
        else "a column's type is read by asyncpg only"
        if not arrow_scan.serves([*query.key_types, *query.value_types], types)
        else None
    )
    target = None
    if why is None:
        assert config.url is not None
        target = arrow_scan.libpq_uri(config.url, config.options, config.timeout_s)
        why = target.why
    if target is None or target.uri is None:
        if why not in logged:
            logged.add(why)
            log.info("asynclookup: postgres scans through asyncpg's cursor: %s", why)
        return None
    return ArrowScan(target, sql, config.key_columns, value_fields)
