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

import os
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, ClassVar

import pyarrow as pa

from asynclookup_postgres import connections, scan_plan
from asynclookup_postgres.arrow_scan import ArrowScan
from asynclookup_postgres.bad_keys import (
    NUL_KEY,
    a_key_error,
    isolate,
    keys_holding_nul,
    lookup_apart,
)
from asynclookup_postgres.catalog import infer_schema, quote_identifier, split_table_name
from asynclookup_postgres.connections import LIBPQ_ENVIRONMENT, LazyPool
from asynclookup_postgres.errors import ASYNCPG_ERRORS, classify
from asynclookup_postgres.jdbc import jdbc_table
from asynclookup_postgres.options import JDBC_KEY_FILE, POOL_SIZE, QUERY, TABLE
from asynclookup_postgres.query import LookupQuery, scan_filter, sends_as_itself
from lookup_source.connector_api import (
    SCAN_CHUNK_ROWS,
    ConnectorConfig,
    JdbcTable,
    LookupClient,
    Matches,
    OptionError,
    OptionSpec,
    PermanentError,
    TableFacts,
    TlsSettings,
    key_columns_of,
    password_env_option,
    require_url,
    tls_option_specs,
)

__all__ = ["PostgresLookupClient", "classify"]

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
    # the query reports each row's own key (Matches.keys) when key.equality=spark
    reports_keys: ClassVar[bool] = True
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
        self._query = LookupQuery(config, self.value_fields, self._table, self._custom_query)
        self._pool = LazyPool(config, self.connect_arguments, self._query.prepare)
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
        return infer_schema(options, cls.connect_arguments, ASYNCPG_ERRORS)

    # -- life cycle ----------------------------------------------------------------------------

    @staticmethod
    def connect_arguments(url: str, options: Mapping[str, Any]) -> dict[str, Any]:
        """asyncpg's arguments to connect (:func:`.connections.connect_arguments`)."""
        return connections.connect_arguments(url, options)

    async def open(self) -> None:
        # Connect lazily, on the first request: a store that is down then fails requests,
        # which are retried and handled by on.error like any other failure.
        self._pool.renew_lock()

    async def _connect(self) -> Any:
        """asyncpg's pool, opened on the first request (:class:`.connections.LazyPool`)."""
        pool = self._pool.pool
        if pool is None:
            pool = await self._pool.open(self.pool_size, self.idle_close_s)
        return pool

    async def close(self) -> None:
        await self._pool.close()

    @classmethod
    def implicit_inputs(cls, config: ConnectorConfig) -> Sequence[str]:
        """What asyncpg reads on its own, like libpq: the ``PG*`` environment variables and
        the password file (``PGPASSFILE``, else ``~/.pgpass``)."""
        passfile = os.environ.get("PGPASSFILE") or "~/.pgpass"
        return (*(f"env:{name}" for name in LIBPQ_ENVIRONMENT), f"file:{passfile}")

    # -- lookups -------------------------------------------------------------------------------

    async def lookup_arrow(self, keys: pa.RecordBatch) -> Matches:
        refused = keys_holding_nul(keys)
        if refused is not None:  # Postgres text cannot hold NUL: those keys fail, not the batch
            return await lookup_apart(self.lookup_arrow, keys, refused, NUL_KEY, self.value_fields)
        with ASYNCPG_ERRORS:
            pool = await self._connect()
            try:  # a key its column cannot take may fail already in making the arguments
                sql, arguments, positions_from_server = self._query.statement(keys)
                rows = await connections.fetch(pool, sql, arguments, self.config.timeout_s)
            except Exception as exc:
                if not a_key_error(exc):
                    raise
                return await isolate(self.lookup_arrow, keys, exc, self.value_fields)
        return self._query.matches(rows, key_columns_of(keys), positions_from_server)

    # -- scans ---------------------------------------------------------------------------------

    async def estimate_rows(self) -> int | None:
        """The table's rows as the catalog counts them (``pg_class.reltuples``, kept by ANALYZE
        and autovacuum), or as the planner estimates them for a table never analyzed. Refused
        (a PermanentError saying why) when the key column's own type compares otherwise than
        Spark's (citext, char(n), uuid, numeric declared as a string or a number): lookups are
        kept."""
        if self._table is None:
            return None
        return await scan_plan.estimate_rows(
            self._connect, self._table, self._query, self.config.timeout_s
        )

    @classmethod
    def takes_ranges(cls, config: ConnectorConfig) -> bool:
        """A table's lookups send a key's ranges in the query (integers, dates, instants):
        a point-in-time join reads the versions valid at its rows' times, not every version."""
        return bool(TABLE.get(config))

    @classmethod
    def answers_existence(cls, config: ConnectorConfig) -> bool:
        """With no value columns, the query selects the key alone (a row per match)."""
        return True

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
        with ASYNCPG_ERRORS:
            if self._table is None:
                return True
            await self._connect()
        return self._query.exact_keys

    async def table_facts(self) -> TableFacts:
        """With ``postgres.table`` and one key column: whether a row has a null key, whether
        there is any row (two probes that stop at the first row); with a query, unknown."""
        if self._table is None or len(self.config.key_columns) != 1:
            return TableFacts()
        with ASYNCPG_ERRORS:
            pool = await self._connect()
            table = ".".join(quote_identifier(part) for part in self._table)
            key = quote_identifier(self._query.columns[0])
            sql = (
                f"SELECT EXISTS (SELECT 1 FROM {table} WHERE {key} IS NULL), "
                f"EXISTS (SELECT 1 FROM {table})"
            )
            ((null_key, any_row),) = await connections.fetch(pool, sql, [], self.config.timeout_s)
        return TableFacts(null_key=bool(null_key), any_row=bool(any_row))

    async def keys_sent_exactly(self) -> bool:
        """Whether each key column is read as its own type (integers as integers, text as
        strings, a timestamp with a time zone as one...): a key of another type (an integer
        column read as strings) could not reach the server as the value Spark's join finds."""
        with ASYNCPG_ERRORS:
            await self._connect()
        return all(
            sends_as_itself(pg_type, arrow_type)
            for pg_type, arrow_type in zip(self._query.key_types, self.config.key_types)
        )

    @classmethod
    def jdbc_table(cls, config: ConnectorConfig) -> JdbcTable:
        """Spark's JDBC reader's options for the table (:mod:`.jdbc`)."""
        return jdbc_table(config)

    async def key_range(self) -> tuple[int, int] | None:
        """The smallest and largest key of a table with one integer key; None otherwise (or for
        an empty table)."""
        if self._table is None:
            return None
        return await scan_plan.key_range(
            self._connect, self._table, self._query, self.config.timeout_s
        )

    async def scan_splits(self, partitions: int) -> list[tuple[int | None, int | None]] | None:
        """Key ranges, when the key is one integer column (as Spark's JDBC source cuts with
        ``partitionColumn``, ``lowerBound`` and ``upperBound``): ``partitions`` ranges of equal
        width between the smallest and the largest key, read through the key's index. The
        first range is open below (and takes the rows with a NULL key), the last open above:
        the parts read every row once, even one inserted after the plan. Otherwise None: each
        part reads the rows whose key hashes into it."""
        return scan_plan.splits(await self.key_range(), partitions)

    async def scan_arrow(
        self, partition: int = 0, partitions: int = 1, *, split: Any = None
    ) -> AsyncIterator[tuple[pa.RecordBatch, Matches]]:
        """Every row of part ``partition`` of ``partitions`` of the table — its key range
        (``split``, from :meth:`scan_splits`), or the rows whose key hashes into it — in chunks
        of columns read from one cursor."""
        with ASYNCPG_ERRORS:
            if self._table is None:
                raise PermanentError("a postgres.query cannot be scanned; use postgres.table")
            pool = await self._connect()
            query, key_expression = scan_plan.scan_select(self._table, self._query)
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
        return scan_plan.adbc_scan(self.config, self._query, self.value_fields, query, self._logged)
