"""The client's connections to Postgres: asyncpg's connection arguments (the URL, the password,
TLS), the one pool of a client opened on its first request, and the lookup query run on a
pooled connection that is dropped when in doubt."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from lookup_source.connector_api import (
    ConnectorConfig,
    TlsSettings,
    password_from_env,
    pooled,
)

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


def connect_arguments(url: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """asyncpg's arguments to connect to ``url``: the password of ``postgres.password.env``,
    the TLS context of the ``postgres.tls.*`` options (else the URL's sslmode and
    sslrootcert, if any)."""
    arguments: dict[str, Any] = {"dsn": url}
    password = password_from_env("postgres", options)
    if password is not None:
        arguments["password"] = password
    tls = TlsSettings.from_options("postgres", options)
    if tls.configured:  # else the URL's sslmode and sslrootcert, if any
        arguments["ssl"] = tls.context()
    return arguments


class LazyPool:
    """A client's asyncpg pool, opened on the first request (a store that is down then fails
    requests, which are retried and handled by on.error like any other failure) and prepared
    by ``prepare`` on its first connection (the catalog read of the lookup query)."""

    def __init__(
        self,
        config: ConnectorConfig,
        arguments: Callable[[str, Mapping[str, Any]], dict[str, Any]],
        prepare: Callable[[Any], Awaitable[None]],
    ) -> None:
        self._config = config
        self._arguments = arguments
        self._prepare = prepare
        self.pool: Any = None  # asyncpg's pool, once open
        self._ready = asyncio.Lock()

    def renew_lock(self) -> None:
        """A new lock for the first request's connection (the client is being opened)."""
        self._ready = asyncio.Lock()

    async def open(self, max_size: int, idle_close_s: float) -> Any:
        """The pool, opened now if no request opened it yet: connections made on demand, at
        most ``max_size``, each closed after ``idle_close_s`` idle."""
        import asyncpg

        async with self._ready:
            if self.pool is None:
                config = self._config
                assert config.url is not None
                pool = await asyncpg.create_pool(
                    **self._arguments(config.url, config.options),
                    min_size=0,  # no floor kept up in the background: connect on demand
                    max_size=max_size,
                    max_inactive_connection_lifetime=idle_close_s,
                    command_timeout=None,
                )
                try:
                    async with pool.acquire() as connection:
                        await self._prepare(connection)
                except BaseException:
                    pool.terminate()
                    raise
                self.pool = pool
        return self.pool

    async def close(self) -> None:
        """Close the pool (terminated when it takes more than 10 s); opened again on demand."""
        if self.pool is not None:
            pool, self.pool = self.pool, None
            try:
                await asyncio.wait_for(pool.close(), 10)
            except (asyncio.TimeoutError, TimeoutError):
                pool.terminate()


def _terminate(connection: Any) -> None:
    connection.terminate()


async def fetch(pool: Any, sql: str, arguments: list[Any], limit: float) -> list[Any]:
    """Run ``sql`` on a pooled connection. A connection whose query failed or was cancelled is
    in doubt (a cut socket, a half-read answer): it is dropped, never handed to the next
    request, so a cut cannot starve the pool."""

    async def release(connection: Any) -> None:
        await pool.release(connection, timeout=limit)

    async with pooled(pool.acquire(timeout=limit), release, _terminate) as connection:
        return list(await connection.fetch(sql, *arguments, timeout=limit))
