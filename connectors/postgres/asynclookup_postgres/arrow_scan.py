"""A whole-table scan read through the Arrow project's Postgres driver (ADBC).

``adbc-driver-postgresql`` runs the scan's ``SELECT`` as ``COPY (...) TO STDOUT (FORMAT
binary)`` and decodes the rows into Arrow columns in C++: no Python object per row, where
asyncpg's cursor builds a record per row and a value per cell. Measured on a table of 2,000,000
rows (``bigint, text, integer``), two read tasks: see docs/benchmarks.md (the plan scenario).

It serves the scans whose columns it reads exactly as the asyncpg path does (:data:`ADBC_TYPES`:
integers, floats, booleans, text, dates, timestamps, bytea); a table with another column type
(numeric, json, uuid, arrays...), a driver that is not installed, or TLS settings libpq cannot
take are scanned by asyncpg's cursor as before. Which path a scan took is in the log.

The driver is blocking: its calls run in a thread of the scan's own, one after another, so the
loop (and a kept client's other requests) go on meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import numpy as np
import pyarrow as pa

from asynclookup_postgres.catalog import FLOAT_TYPES, INT_TYPES
from asynclookup_postgres.query import reads_natively
from lookup_source.connector_api import (
    ConnectorError,
    Matches,
    PermanentError,
    TlsSettings,
    TransientError,
    password_from_env,
    translated_errors,
)

log = logging.getLogger("lookup_source")

ADBC_TYPES = (
    INT_TYPES
    | FLOAT_TYPES
    | frozenset(
        {
            "boolean",
            "text",
            "character varying",
            "name",
            "date",
            "bytea",
            "timestamp without time zone",
            "timestamp with time zone",
        }
    )
)
"""The Postgres column types the ADBC driver reads into the same Arrow values asyncpg's do."""

BATCH_BYTES = 16 << 20
"""The size of the Arrow batches the driver hands over
(``adbc.postgresql.batch_size_hint_bytes``)."""


def available() -> bool:
    """Whether the ADBC Postgres driver can be imported here."""
    try:
        import adbc_driver_postgresql.dbapi  # noqa: F401
    except ImportError:
        return False
    return True


def serves(column_types: Sequence[str], arrow_types: Sequence[pa.DataType]) -> bool:
    """Whether a scan of columns of ``column_types`` (Postgres), read into ``arrow_types`` (the
    declared key and value types), gives through ADBC what it gives through asyncpg."""
    return all(
        pg_type in ADBC_TYPES and _castable(pg_type, arrow_type)
        for pg_type, arrow_type in zip(column_types, arrow_types)
    )


def _castable(pg_type: str, arrow_type: pa.DataType) -> bool:
    if (
        pa.types.is_integer(arrow_type)
        or pa.types.is_floating(arrow_type)
        or pa.types.is_boolean(arrow_type)
    ):
        return reads_natively(pg_type, arrow_type)  # asyncpg's checks hold
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return pg_type in {"text", "character varying", "name"}
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return pg_type == "bytea"
    if pa.types.is_date(arrow_type):
        return pg_type == "date"
    if pa.types.is_timestamp(arrow_type):
        return pg_type.startswith("timestamp")
    return False


def libpq_uri(url: str, options: Mapping[str, Any]) -> str | None:
    """``url`` with what asyncpg takes from the options (``postgres.password.env``, the
    ``postgres.tls.*`` files) written as libpq parameters; None when libpq cannot take them
    (TLS without ``postgres.tls.ca-file``, whose trust asyncpg takes from the system)."""
    parts = urlsplit(url)
    if parts.scheme not in {"postgres", "postgresql"}:
        return None
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    password = password_from_env("postgres", options)
    if password is not None:
        query["password"] = password
    tls = TlsSettings.from_options("postgres", options)
    if tls.configured:
        if not tls.ca_file:
            return None  # asyncpg's context trusts the system's CAs: libpq's default differs
        query["sslmode"] = "verify-full" if tls.check_hostname else "verify-ca"
        query["sslrootcert"] = tls.ca_file
        if tls.cert_file:
            query["sslcert"] = tls.cert_file
            query["sslkey"] = tls.key_file or tls.cert_file
        if tls.key_password_env:
            secret = os.environ.get(tls.key_password_env)
            if secret is None:
                return None  # asyncpg's path names the missing variable
            query["sslpassword"] = secret
    return urlunsplit(parts._replace(query=urlencode(query)))


_REFUSED_LOGINS = ("password authentication failed", "no pg_hba.conf entry", "permission denied")


def _classify(error: Exception) -> type[ConnectorError] | ConnectorError | None:
    """What an ADBC error means to the engine: a refused login is permanent, a connection
    problem transient, anything else the server refused permanent."""
    import adbc_driver_manager

    text = str(error)
    if any(refusal in text for refusal in _REFUSED_LOGINS) or (
        "FATAL:" in text and "does not exist" in text  # a role or a database
    ):
        return PermanentError
    if isinstance(error, adbc_driver_manager.OperationalError):
        return TransientError
    return None


ADBC_ERRORS = translated_errors("adbc_driver_manager", _classify, tls="postgres")


class ArrowScan:
    """One scan query read as Arrow batches: the key columns (named ``key_names``) and the value
    columns (``value_fields``), as :meth:`LookupClient.scan_arrow` hands them over."""

    def __init__(
        self,
        uri: str,
        query: str,
        key_names: Sequence[str],
        value_fields: Sequence[pa.Field],
    ) -> None:
        self.uri = uri
        self.query = query
        self.key_names = list(key_names)
        self.value_fields = list(value_fields)

    async def batches(self) -> AsyncIterator[tuple[pa.RecordBatch, Matches]]:
        import adbc_driver_postgresql.dbapi as dbapi

        # one thread for every call on this connection, in order: a read still running when
        # the scan is abandoned ends before the close (the driver's objects are not thread-safe)
        thread = ThreadPoolExecutor(1, thread_name_prefix="asynclookup-adbc")
        loop = asyncio.get_running_loop()

        def run(_: None, call: Any, *arguments: Any) -> Any:
            return loop.run_in_executor(thread, call, *arguments)

        try:
            with ADBC_ERRORS:
                connection = await run(None, lambda: dbapi.connect(self.uri))
        except BaseException:
            thread.shutdown(wait=False)
            raise
        cursor: Any = None
        reader: Any = None
        try:
            with ADBC_ERRORS:
                cursor = connection.cursor()
                cursor.adbc_statement.set_options(
                    **{"adbc.postgresql.batch_size_hint_bytes": str(BATCH_BYTES)}
                )
                await run(None, cursor.execute, self.query)
                reader = await run(None, cursor.fetch_record_batch)
            while True:
                with ADBC_ERRORS:
                    batch = await run(None, _next_batch, reader)
                if batch is None:
                    return
                if batch.num_rows:
                    yield self.chunk(batch)
        finally:
            thread.submit(_close, reader, cursor, connection)  # each before what made it
            thread.shutdown(wait=False)

    def chunk(self, batch: pa.RecordBatch) -> tuple[pa.RecordBatch, Matches]:
        """A batch of scanned rows as keys and their matches (one row each), the columns named
        as declared; the scan's caller puts them in their declared types (a value that does
        not fit is that row's error)."""
        width = len(self.key_names)
        keys = pa.RecordBatch.from_arrays(batch.columns[:width], names=self.key_names)
        values = pa.RecordBatch.from_arrays(
            batch.columns[width:], names=[f.name for f in self.value_fields]
        )
        return keys, Matches(np.arange(batch.num_rows), values, None)


def _next_batch(reader: pa.RecordBatchReader) -> pa.RecordBatch | None:
    try:
        return reader.read_next_batch()
    except StopIteration:
        return None


def _close(*handles: Any) -> None:
    """Close the reader, the cursor, then the connection (a cursor left to the garbage
    collector after its connection closes it twice)."""
    for handle in handles:
        if handle is None:
            continue
        try:
            handle.close()
        except Exception as error:  # a connection cut under the scan: nothing left to close
            log.debug("asynclookup: closing an ADBC %s: %s", type(handle).__name__, error)
