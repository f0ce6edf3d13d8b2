"""Postgres connector (asyncpg).

``connector=postgres``, ``url`` a libpq URL (``postgresql://user@host:5432/db?sslmode=require``),
the password from ``postgres.password.env`` (an environment variable of the executor) or the URL.

With ``postgres.table``, lookups run ``SELECT ... WHERE key = ANY($1::<key type>[])`` (composite
keys: a join against ``unnest($1::t1[], $2::t2[])``), ``batch.size`` keys per query, over a pool
of ``min(capacity, postgres.pool-size, budget.max-in-flight)`` connections (10 by default). Keys
are compared in the column's own type, so the lookup stays on the index. Identifiers are quoted
and values always bound as parameters.

Rows come back as columns: asyncpg's records are transposed and each column becomes one Arrow
array. Which asked key a row answers is found in Arrow (integer and text keys, whose equality
is byte equality) or reported by the server itself (``unnest(...) WITH ORDINALITY``: citext,
char(n), uuid, numeric... and composite keys), so every row a key matches reaches that key.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from asynclookup_postgres import arrow_scan
from asynclookup_postgres.arrow_scan import ArrowScan
from asynclookup_postgres.catalog import (
    EXACT_KEY_TYPES,
    INT_TYPES,
    infer_schema,
    quote_identifier,
    split_table_name,
)
from asynclookup_postgres.jdbc import jdbc_table
from asynclookup_postgres.options import JDBC_KEY_FILE, POOL_SIZE, QUERY, TABLE
from asynclookup_postgres.query import LookupQuery, scan_filter
from lookup_source.connector_api import (
    SCAN_CHUNK_ROWS,
    ConnectorConfig,
    ConnectorError,
    JdbcTable,
    LookupClient,
    Matches,
    OptionError,
    OptionSpec,
    OverloadedError,
    PermanentError,
    TlsSettings,
    TransientError,
    password_env_option,
    password_from_env,
    pooled,
    require_url,
    tls_option_specs,
    translated_errors,
)

log = logging.getLogger("lookup_source")


def classify(error: Exception) -> type[ConnectorError] | ConnectorError | None:
    """What an asyncpg exception means to the engine (see ``translated_errors``)."""
    import asyncpg
    from asyncpg import exceptions as pgx

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


_ASYNCPG_ERRORS = translated_errors("asyncpg", classify, tls="postgres")


def _terminate(connection: Any) -> None:
    connection.terminate()


BUDGET_IDLE_CLOSE_S = 10.0
"""Under a cluster budget, a pooled connection idle this long is closed."""


class PostgresLookupClient(LookupClient):
    """Looks keys up in a Postgres table (or a custom query) with asyncpg."""

    name: ClassVar[str] = "postgres"
    # engine CPU per key, = ANY of 500, 100,000 keys outside Spark, two warm runs each:
    # 1.85-1.92 µs on uvloop, 2.10-2.31 on asyncio (540k and 477k keys/s at best)
    preferred_loop: ClassVar[str] = "uvloop"
    default_batch_size: ClassVar[int] = 500
    # asyncpg can swallow the cancellation of a query on a connection cut under it: the
    # engine must be able to abandon a request that overstays its deadline
    honours_cancellation: ClassVar[bool] = False
    supports_scan: ClassVar[bool] = True
    # the bench's plan scenario (2,000,000-row table, local[2]): 2,000,000 input rows looked up
    # in 6.0 s, 12 core-s, less the floor's 1 per row; the table read whole in 0.85 s through
    # ADBC (a table whose columns go through asyncpg's cursor reads about 2x slower)
    lookup_cost_us: ClassVar[float | None] = 5.0
    scan_cost_us: ClassVar[float | None] = 0.85
    option_specs: ClassVar[tuple[OptionSpec, ...]] = (
        TABLE,
        QUERY,
        POOL_SIZE,
        password_env_option("postgres"),
        *tls_option_specs("postgres", "the Postgres server"),
        JDBC_KEY_FILE,
    )

    def __init__(self, config: ConnectorConfig) -> None:
        super().__init__(config)
        table = TABLE.get(config)
        self._table: tuple[str, ...] | None = split_table_name(table) if table else None
        self._custom_query = QUERY.get(config)
        self._pool_size = POOL_SIZE.get(config)
        self._pool: Any = None
        self._ready = asyncio.Lock()
        self._query = LookupQuery(config, self.value_fields, self._table, self._custom_query)
        self._logged: set[str] = set()  # why scans went through asyncpg's cursor, logged

    @property
    def pool_size(self) -> int:
        """Connections this worker's client opens at most: ``postgres.pool-size``, at most
        ``capacity``, and at most the cluster budget's requests in flight
        (``budget.max-in-flight``): more could never be busy at once."""
        size = min(self.config.capacity, self._pool_size)
        if self.config.budget_in_flight:
            size = min(size, self.config.budget_in_flight)
        return max(1, size)

    @property
    def idle_close_s(self) -> float:
        """How long a connection may stay idle before the pool closes it: asyncpg's 300 s, and
        :data:`BUDGET_IDLE_CLOSE_S` under a cluster budget, whose leases move between workers
        (the connections of a worker that no longer holds them go back to the server)."""
        return BUDGET_IDLE_CLOSE_S if self.config.budget_in_flight else 300.0

    # -- validation ----------------------------------------------------------------------------

    @classmethod
    def validate_options(cls, options: ConnectorConfig) -> None:
        url = options.url
        require_url(
            "url",
            url,
            ("postgresql://", "postgres://"),
            connector="postgres",
            example="postgresql://user@host:5432/db",
        )
        tls = TlsSettings.from_options("postgres", options.options)
        if tls.configured and "sslmode=disable" in str(url):
            raise OptionError(tls.first_option, "applies to TLS, which sslmode=disable turns off")
        table = TABLE.get(options)
        query = QUERY.get(options)
        if bool(table) == bool(query):
            raise OptionError(
                "postgres.table", "set exactly one of postgres.table and postgres.query"
            )
        if table:
            split_table_name(table)

    @classmethod
    def can_scan(cls, config: ConnectorConfig) -> bool:
        return bool(TABLE.get(config))

    @classmethod
    def infer_schema(cls, options: ConnectorConfig) -> tuple[str, tuple[str, ...]]:
        return infer_schema(options, cls.connect_arguments, _ASYNCPG_ERRORS)

    # -- life cycle ----------------------------------------------------------------------------

    @staticmethod
    def connect_arguments(url: str, options: Mapping[str, Any]) -> dict[str, Any]:
        arguments: dict[str, Any] = {"dsn": url}
        password = password_from_env("postgres", options)
        if password is not None:
            arguments["password"] = password
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
                    min_size=0,  # no floor kept up in the background: connect on demand
                    max_size=self.pool_size,
                    max_inactive_connection_lifetime=self.idle_close_s,
                    command_timeout=None,
                )
                try:
                    async with pool.acquire() as connection:
                        await self._query.prepare(connection)
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

    @classmethod
    def implicit_inputs(cls, config: ConnectorConfig) -> Sequence[str]:
        """What asyncpg reads on its own, like libpq: the ``PG*`` environment variables and
        the password file (``PGPASSFILE``, else ``~/.pgpass``)."""
        passfile = os.environ.get("PGPASSFILE") or "~/.pgpass"
        return (*(f"env:{name}" for name in LIBPQ_ENVIRONMENT), f"file:{passfile}")

    # -- lookups -------------------------------------------------------------------------------

    async def lookup_arrow(self, keys: pa.RecordBatch) -> Matches:
        refused = _keys_holding_nul(keys)
        if refused is not None:  # Postgres text cannot hold NUL: those keys fail, not the batch
            return await self._lookup_apart(keys, refused, NUL_KEY)
        with _ASYNCPG_ERRORS:
            pool = await self._connect()
            try:
                rows = await self._fetch(pool, self._query.arguments(keys))
            except Exception as exc:
                if not _a_key_error(exc):
                    raise
                return await self._isolate(keys, exc)
        return self._query.matches(rows, keys)

    async def _isolate(self, keys: pa.RecordBatch, error: BaseException) -> Matches:
        """The answer to ``keys`` when one of them cannot be sent (not a value of the key
        column's type: a text that is no UUID, an integer beyond int4): each half asked apart
        until the keys at fault are found, each of them an error of its own."""
        if keys.num_rows == 1:
            return await self._lookup_apart(keys, np.ones(1, dtype=bool), _key_error_text(error))
        half = keys.num_rows // 2
        first = await self.lookup_arrow(keys.slice(0, half))
        second = await self.lookup_arrow(keys.slice(half))
        return _joined([(0, first), (half, second)], self.value_fields)

    async def _lookup_apart(
        self, keys: pa.RecordBatch, refused: np.ndarray, message: str
    ) -> Matches:
        """The answer to ``keys`` where those at ``refused`` (a mask) are errors of their own
        (``message``) and the others are asked as usual."""
        kept = np.flatnonzero(~refused)
        found = (
            await self.lookup_arrow(keys.take(pa.array(kept)))
            if len(kept)
            else Matches.none(self.value_fields)
        )
        bad = np.flatnonzero(refused)
        nulls = pa.RecordBatch.from_arrays(
            [pa.nulls(len(bad), type=f.type) for f in self.value_fields],
            schema=pa.schema(self.value_fields),
        )
        failed = Matches(bad, nulls, pa.array([message] * len(bad), type=pa.string()))
        placed = Matches(kept[found.key_index], found.values, found.errors)
        return _joined([(0, placed), (0, failed)], self.value_fields)

    async def _fetch(self, pool: Any, arguments: list[Any]) -> list[Any]:
        """Run the lookup query on a pooled connection. A connection whose query failed or was
        cancelled is in doubt (a cut socket, a half-read answer): it is dropped, never handed to
        the next request, so a cut cannot starve the pool."""
        limit = self.config.timeout_s

        async def release(connection: Any) -> None:
            await pool.release(connection, timeout=limit)

        async with pooled(pool.acquire(timeout=limit), release, _terminate) as connection:
            return list(await connection.fetch(self._query.sql, *arguments, timeout=limit))

    async def estimate_rows(self) -> int | None:
        """The table's rows as the catalog counts them (``pg_class.reltuples``, kept by ANALYZE
        and autovacuum), or as the planner estimates them for a table never analyzed. Refused
        (a PermanentError saying why) when the key column's own type compares otherwise than
        Spark's (citext, char(n), uuid, numeric declared as a string or a number): lookups are
        kept."""
        with _ASYNCPG_ERRORS:
            if self._table is None:
                return None
            pool = await self._connect()
            inexact = [t for t in self._query.key_types if t not in EXACT_KEY_TYPES]
            if inexact:  # the catalog says what the Spark types could not
                raise PermanentError(
                    f"the key column's type ({inexact[0]}) compares otherwise in Postgres than "
                    "in Spark: a scan and a join could match other rows"
                )
            table = ".".join(quote_identifier(part) for part in self._table)
            limit = self.config.timeout_s
            async with pool.acquire() as connection:
                counted = await connection.fetchval(
                    "SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass($1)",
                    table,
                    timeout=limit,
                )
                if counted is not None and counted >= 0:
                    return int(counted)
                plan = await connection.fetchval(
                    f"EXPLAIN (FORMAT JSON) SELECT 1 FROM {table}", timeout=limit
                )
        plans = json.loads(plan) if isinstance(plan, str) else plan
        return int(plans[0]["Plan"]["Plan Rows"])

    @classmethod
    def exact_key_match(cls, config: ConnectorConfig) -> bool:
        """A scanned key equals the asked one for integer and text keys; citext, char(n),
        uuid or numeric keys compare otherwise in Postgres than in Spark."""
        return cls.can_scan(config) and all(
            pa.types.is_integer(kind) or pa.types.is_string(kind) for kind in config.key_types
        )

    async def keys_match_exactly(self) -> bool:
        """With ``postgres.table``: the key columns' own types, read from the catalog, are
        integers or text (whose equality is Spark's); not citext, char(n), uuid, numeric...
        Without (a query): the declared types alone."""
        if not type(self).exact_key_match(self.config):
            return False
        with _ASYNCPG_ERRORS:
            if self._table is None:
                return True
            await self._connect()
        return all(t in EXACT_KEY_TYPES for t in self._query.key_types)

    @classmethod
    def jdbc_table(cls, config: ConnectorConfig) -> JdbcTable:
        """Spark's JDBC reader's options for the table (:mod:`.jdbc`)."""
        return jdbc_table(config)

    async def key_range(self) -> tuple[int, int] | None:
        """The smallest and largest key of a table with one integer key; None otherwise (or for
        an empty table)."""
        with _ASYNCPG_ERRORS:
            if self._table is None:
                return None
            pool = await self._connect()
            if len(self._query.key_types) != 1 or self._query.key_types[0] not in INT_TYPES:
                return None
            key = quote_identifier(self._query.columns[0])
            table = ".".join(quote_identifier(part) for part in self._table)
            async with pool.acquire() as connection:
                low, high = await connection.fetchrow(
                    f"SELECT min({key}), max({key}) FROM {table}", timeout=self.config.timeout_s
                )
        return None if low is None else (int(low), int(high))

    async def scan_splits(self, partitions: int) -> list[tuple[int | None, int | None]] | None:
        """Key ranges, when the key is one integer column (as Spark's JDBC source cuts with
        ``partitionColumn``, ``lowerBound`` and ``upperBound``): ``partitions`` ranges of equal
        width between the smallest and the largest key, read through the key's index. The
        first range is open below (and takes the rows with a NULL key), the last open above:
        the parts read every row once, even one inserted after the plan. Otherwise None: each
        part reads the rows whose key hashes into it."""
        bounds = await self.key_range()
        if bounds is None:  # not one integer key, or an empty table
            return None
        low, high = bounds
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
            names = self._query.columns
            columns = ", ".join(quote_identifier(c) for c in names)
            width = len(self._query.key_types)
            key_expression = (
                quote_identifier(names[0])
                if width == 1
                else "row(" + ", ".join(quote_identifier(c) for c in names[:width]) + ")"
            )
            query = f"SELECT {columns} FROM {table}"
            arrow = self._arrow_scan(
                query + scan_filter(key_expression, split, partition, partitions, literal=True)[0]
            )
            if arrow is not None:
                async for chunk in arrow.batches():
                    yield chunk
                return
            where, arguments = scan_filter(key_expression, split, partition, partitions)
            query += where
            async with pool.acquire() as connection, connection.transaction(readonly=True):
                cursor = await connection.cursor(query, *arguments)
                while True:
                    rows = await cursor.fetch(SCAN_CHUNK_ROWS)
                    if not rows:
                        return
                    yield self._query.scanned(rows)

    def _arrow_scan(self, query: str) -> ArrowScan | None:
        """The scan read by the ADBC driver (:mod:`.arrow_scan`), when it reads these columns
        as asyncpg does and libpq reads the connection's settings as asyncpg does; else None
        (asyncpg's cursor), the reason logged once per client (a scan's)."""
        types = [*self.config.key_types, *(f.type for f in self.value_fields)]
        why = (
            "the adbc-driver-postgresql package is not installed"
            if not arrow_scan.available()
            else "a column's type is read by asyncpg only"
            if not arrow_scan.serves([*self._query.key_types, *self._query.value_types], types)
            else None
        )
        target = None
        if why is None:
            assert self.config.url is not None
            target = arrow_scan.libpq_uri(
                self.config.url, self.config.options, self.config.timeout_s
            )
            why = target.why
        if target is None or target.uri is None:
            if why not in self._logged:
                self._logged.add(why)
                log.info("asynclookup: postgres scans through asyncpg's cursor: %s", why)
            return None
        return ArrowScan(target, query, self.config.key_columns, self.value_fields)


LIBPQ_ENVIRONMENT = (
    "PGHOST",
    "PGHOSTADDR",
    "PGPORT",
    "PGUSER",
    "PGPASSWORD",
    "PGDATABASE",
    "PGPASSFILE",
    "PGSERVICE",
    "PGSERVICEFILE",
    "PGOPTIONS",
    "PGSSLMODE",
    "PGSSLROOTCERT",
    "PGSSLCERT",
    "PGSSLKEY",
    "PGSSLCRL",
    "PGSSLNEGOTIATION",
    "PGTARGETSESSIONATTRS",
    "PGKRBSRVNAME",
)
"""The environment variables asyncpg (like libpq) reads when the URL does not say."""


NUL_KEY = "it holds a NUL character, which Postgres text cannot hold"


def _a_key_error(error: BaseException) -> bool:
    """Whether ``error`` says a key could not be sent as a value of its column's type (raised
    by asyncpg while encoding the keys, or by the server as a data exception, class 22)."""
    import asyncpg

    if isinstance(error, (ValueError, TypeError, OverflowError)):
        return True
    client_side = getattr(asyncpg.exceptions, "_base", None)
    if client_side is not None and isinstance(error, getattr(client_side, "DataError", ())):
        return True
    return isinstance(error, asyncpg.exceptions.DataError)


def _key_error_text(error: BaseException) -> str:
    """Why a key could not be sent, without the other keys of its batch (asyncpg quotes the
    whole argument: ``$1: [1, 2, 1099511627776] (value out of int32 range)``)."""
    text = re.sub(r"(query argument \$\d+): \[.*\]", r"\1", str(error).strip())
    return f"it cannot be sent as the key column's type: {type(error).__name__}: {text}"


def _joined(parts: list[tuple[int, Matches]], fields: Sequence[pa.Field]) -> Matches:
    """Several answers as one, each part's key positions moved by its offset."""
    names = [f.name for f in fields]
    parts = [(offset, part) for offset, part in parts if part.num_rows]
    if not parts:
        return Matches.none(fields)
    values = pa.Table.from_batches(
        [part.values.select(names) for _, part in parts], schema=pa.schema(list(fields))
    ).combine_chunks()
    errors: list[Any] = []
    for _, part in parts:
        errors += [None] * part.num_rows if part.errors is None else part.errors.to_pylist()
    return Matches(
        np.concatenate([part.key_index + offset for offset, part in parts]),
        values.to_batches()[0] if values.num_rows else Matches.none(fields).values,
        pa.array(errors, type=pa.string()) if any(e is not None for e in errors) else None,
    )


def _keys_holding_nul(keys: pa.RecordBatch) -> np.ndarray | None:
    """A mask of the keys whose text holds a NUL character, or None when none does."""
    refused = None
    for column in keys.columns:
        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            continue
        holds = pc.fill_null(pc.match_substring(column, "\x00"), False)
        if pc.any(holds).as_py():
            mask = holds.to_numpy(zero_copy_only=False)
            refused = mask if refused is None else refused | mask
    return refused
