"""A whole-table scan read through the Arrow project's Postgres driver (ADBC).

``adbc-driver-postgresql`` runs the scan's ``SELECT`` as ``COPY (...) TO STDOUT (FORMAT
binary)`` and decodes the rows into Arrow columns in C++: no Python object per row, where
asyncpg's cursor builds a record per row and a value per cell. Measured on a table of 2,000,000
rows (``bigint, text, integer``), two read tasks: see docs/benchmarks.md (the plan scenario).

It serves the scans whose columns it reads exactly as the asyncpg path does (:data:`ADBC_TYPES`:
integers, floats, booleans, text, bytea); a table with another column type (dates, timestamps,
numeric, json, uuid, arrays...), a driver that is not installed, or a URL or TLS settings libpq
would read otherwise than asyncpg are scanned by asyncpg's cursor as before. Which path a scan
took, and why, is in the log.

The driver is blocking: its calls run one after another in a daemon thread of the scan's own,
so the loop (and a kept client's other requests) go on meanwhile, and a call stuck on a dead
server never holds up the worker's exit.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import math
import os
import queue
import threading
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

import numpy as np
import pyarrow as pa

from asynclookup_postgres.catalog import FLOAT_TYPES, INT_TYPES
from asynclookup_postgres.query import reads_natively
from lookup_source.connector_api import (
    ConnectorError,
    Matches,
    PermanentError,
    Redactor,
    TlsSettings,
    TransientError,
    password_from_env,
    translated_errors,
)

log = logging.getLogger("lookup_source")

ADBC_TYPES = (
    INT_TYPES | FLOAT_TYPES | frozenset({"boolean", "text", "character varying", "name", "bytea"})
)
"""The Postgres column types the ADBC driver reads into the same Arrow values asyncpg's do. Not
dates and timestamps: the driver turns ``infinity`` into garbage (an overflowed epoch shift)
and lets years beyond Spark's through, where asyncpg's path clamps or fails them."""

BATCH_BYTES = 16 << 20
"""The size of the Arrow batches the driver hands over
(``adbc.postgresql.batch_size_hint_bytes``)."""

LIBPQ_PARAMETERS = frozenset(
    {
        "host", "hostaddr", "port", "dbname", "user", "password", "passfile",
        "channel_binding", "connect_timeout", "client_encoding", "options",
        "application_name", "fallback_application_name", "keepalives", "keepalives_idle",
        "keepalives_interval", "keepalives_count", "tcp_user_timeout", "gssencmode",
        "sslmode", "sslcert", "sslkey", "sslpassword", "sslcertmode", "sslrootcert",
        "sslcrl", "sslcrldir", "sslsni", "requirepeer", "ssl_min_protocol_version",
        "ssl_max_protocol_version", "krbsrvname", "gsslib", "gssdelegation", "service",
        "target_session_attrs", "load_balance_hosts", "sslnegotiation",
    }
)  # fmt: skip
"""What libpq takes in a URL's query; asyncpg makes any other parameter a server setting."""


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
    return False


@dataclass(frozen=True)
class LibpqTarget:
    """A connection string for libpq (``uri``, secrets in it) and the secrets to keep out of
    any text; or why libpq cannot stand in for asyncpg here (``uri`` None, ``why``)."""

    uri: str | None
    why: str = ""
    secrets: tuple[str, ...] = ()


def libpq_uri(url: str, options: Mapping[str, Any], timeout_s: float = 60.0) -> LibpqTarget:
    """``url`` with what asyncpg takes from the options (``postgres.password.env``, the
    ``postgres.tls.*`` files) written as libpq parameters, UTF-8 asked for (as asyncpg does),
    reads only, a connect timeout; or why not (parameters asyncpg reads otherwise, TLS without
    ``postgres.tls.ca-file``, whose trust asyncpg takes from the system)."""
    parts = urlsplit(url)
    if parts.scheme not in {"postgres", "postgresql"}:
        return LibpqTarget(None, f"a URL of scheme {parts.scheme!r}")
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    foreign = sorted({name for name, _ in pairs if name not in LIBPQ_PARAMETERS})
    if foreign:
        return LibpqTarget(None, f"the URL's parameters {foreign} are asyncpg's server settings")
    query = dict(pairs)
    netloc = parts.hostname or ""
    if ":" in netloc:  # an IPv6 address
        netloc = f"[{netloc}]"
    if parts.port is not None:
        netloc += f":{parts.port}"
    if parts.username:
        query.setdefault("user", unquote(parts.username))
    if parts.password is not None:
        query.setdefault("password", unquote(parts.password))
    password = password_from_env("postgres", options)
    if password is not None:
        query["password"] = password
    tls = TlsSettings.from_options("postgres", options)
    if tls.configured:
        if not tls.ca_file:
            return LibpqTarget(None, "its TLS trusts the system's CAs (no postgres.tls.ca-file)")
        query["sslmode"] = "verify-full" if tls.check_hostname else "verify-ca"
        query["sslrootcert"] = tls.ca_file
        if tls.cert_file:
            query["sslcert"] = tls.cert_file
            query["sslkey"] = tls.key_file or tls.cert_file
        if tls.key_password_env:
            secret = os.environ.get(tls.key_password_env)
            if secret is None:
                return LibpqTarget(None, f"{tls.key_password_env} is not set")
            query["sslpassword"] = secret
    secrets = tuple(query[k] for k in ("password", "sslpassword") if query.get(k))
    if any("\x00" in secret for secret in secrets):
        return LibpqTarget(None, "a secret holds a NUL character, which libpq refuses")
    query["client_encoding"] = "UTF8"
    query["options"] = (query.get("options", "") + " -c default_transaction_read_only=on").strip()
    query.setdefault("connect_timeout", str(max(2, math.ceil(timeout_s))))
    query.setdefault("keepalives", "1")
    text = urlencode(query, quote_via=quote)  # libpq reads "+" as "+", not as a space
    return LibpqTarget(f"{parts.scheme}://{netloc}{parts.path}?{text}", secrets=secrets)


_REFUSED_LOGINS = ("password authentication failed", "no pg_hba.conf entry", "permission denied")


def _classify(error: Exception) -> type[ConnectorError] | ConnectorError | None:
    """What an ADBC error means to the engine: a refused login or a setting libpq refuses is
    permanent, a connection problem transient (also when it reaches us through pyarrow's
    reader mid-scan), anything else the server refused permanent."""
    import adbc_driver_manager

    text = str(error)
    if any(refusal in text for refusal in _REFUSED_LOGINS) or (
        "FATAL:" in text and "does not exist" in text  # a role or a database
    ):
        return PermanentError
    if "Failed to connect: invalid " in text or "invalid sslmode" in text:
        return PermanentError  # retrying does not change a setting
    if isinstance(error, adbc_driver_manager.OperationalError):
        return TransientError
    if isinstance(error, pa.ArrowException) and "[libpq]" in text:
        # an error while the rows stream in comes through pyarrow's reader (some driver
        # versions): a connection lost is transient, what the server refused is not
        lost = ("FATAL:" in text, "connection" in text.lower(), "server closed" in text)
        return TransientError if any(lost) else PermanentError
    return None


class _Thread:
    """Calls run one after another in one daemon thread (the driver's objects are not
    thread-safe; a call still running when the scan is abandoned ends before the close)."""

    def __init__(self) -> None:
        self._calls: queue.SimpleQueue[Any] = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="asynclookup-adbc", daemon=True).start()

    def _serve(self) -> None:
        while True:
            item = self._calls.get()
            if item is None:
                return
            future, call, arguments = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(call(*arguments))
            except BaseException as error:
                future.set_exception(error)

    def submit(self, call: Callable[..., Any], *arguments: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._calls.put((future, call, arguments))
        return future

    async def run(self, call: Callable[..., Any], *arguments: Any) -> Any:
        return await asyncio.wrap_future(self.submit(call, *arguments))

    def stop(self) -> None:
        self._calls.put(None)


class ArrowScan:
    """One scan query read as Arrow batches: the key columns (named ``key_names``) and the value
    columns (``value_fields``), as :meth:`LookupClient.scan_arrow` hands them over."""

    def __init__(
        self,
        target: LibpqTarget,
        query: str,
        key_names: Sequence[str],
        value_fields: Sequence[pa.Field],
    ) -> None:
        assert target.uri is not None
        self.target = target
        self.query = query
        self.key_names = list(key_names)
        self.value_fields = list(value_fields)

    def __repr__(self) -> str:  # never the connection string: it holds the password
        return f"ArrowScan({self.query!r})"

    async def batches(self) -> AsyncIterator[tuple[pa.RecordBatch, Matches]]:
        import adbc_driver_postgresql.dbapi as dbapi

        # libpq quotes a password it cannot parse, outside any URL: this scan's secrets too
        errors = translated_errors(
            "adbc_driver_manager", _classify, tls="postgres", redact=Redactor(self.target.secrets)
        )
        thread = _Thread()
        connecting = thread.submit(dbapi.connect, self.target.uri)
        cursor: Any = None
        reader: Any = None
        try:
            with errors:
                connection = await asyncio.wrap_future(connecting)
                cursor = connection.cursor()
                cursor.adbc_statement.set_options(
                    **{"adbc.postgresql.batch_size_hint_bytes": str(BATCH_BYTES)}
                )
                await thread.run(cursor.execute, self.query)
                reader = await thread.run(cursor.fetch_record_batch)
            while True:
                with errors:
                    batch = await thread.run(_next_batch, reader)
                if batch is None:
                    return
                if batch.num_rows:
                    yield self.chunk(batch)
        finally:
            # after whatever still runs (a connect that ends after the scan was abandoned too)
            thread.submit(_close, reader, cursor, connecting)
            thread.stop()

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


def _close(reader: Any, cursor: Any, connecting: concurrent.futures.Future[Any]) -> None:
    """Close the reader, the cursor, then the connection if it opened (a cursor left to the
    garbage collector after its connection closes it twice)."""
    connection = None
    if connecting.done() and not connecting.cancelled() and connecting.exception() is None:
        connection = connecting.result()
    for handle in (reader, cursor, connection):
        if handle is None:
            continue
        try:
            handle.close()
        except Exception as error:  # a connection cut under the scan: nothing left to close
            log.debug("asynclookup: closing an ADBC %s: %s", type(handle).__name__, error)
