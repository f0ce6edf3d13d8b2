"""What each failure asyncpg really raises means, by the connector's ``classify`` and the one rule
of what is retried (lookup_source.connector_api.retryable): produced against a real Postgres, a
closed port and a name that does not resolve."""

from __future__ import annotations

import asyncio
from typing import Any

from asynclookup_postgres.client import classify

from tests.helpers import assert_meanings
from tests.servers import PostgresServer, free_port


def test_what_asyncpg_raises_and_whether_it_is_retried(
    postgres_srv: PostgresServer, pg: Any, table_name: str
) -> None:
    import asyncpg
    from asyncpg import exceptions as pgx

    reader = f"{table_name}_reader"
    pg(f"CREATE TABLE {table_name} (id bigint PRIMARY KEY)")
    pg(f"CREATE ROLE {reader} LOGIN")
    url = postgres_srv.url
    host, port = postgres_srv.host, postgres_srv.port

    async def query(sql: str, dsn: str = url) -> Any:
        connection = await asyncpg.connect(dsn, timeout=5)
        try:
            return await connection.fetch(sql)
        finally:
            await connection.close()

    async def terminated() -> Any:
        connection = await asyncpg.connect(url, timeout=5)
        pid = connection.get_server_pid()
        await query(f"SELECT pg_terminate_backend({pid})")
        await asyncio.sleep(0.2)
        return await connection.fetch("SELECT 1")

    other_user = url.replace("postgres@", f"{reader}@", 1)
    cases = [
        (
            "refused",
            lambda: query("SELECT 1", url.replace(str(port), str(free_port()))),
            OSError,
            True,
        ),
        (
            "no such host",
            lambda: query("SELECT 1", url.replace(host, "no-such-host.invalid")),
            OSError,
            True,
        ),
        (
            "terminated",
            terminated,
            (pgx.AdminShutdownError, asyncpg.ConnectionDoesNotExistError, asyncpg.InterfaceError),
            True,
        ),
        (
            "no such table",
            lambda: query("SELECT * FROM no_such_table"),
            pgx.UndefinedTableError,
            False,
        ),
        ("syntax", lambda: query("SELEC 1"), pgx.PostgresSyntaxError, False),
        (
            "permission denied",
            lambda: query(f"SELECT * FROM {table_name}", other_user),
            pgx.InsufficientPrivilegeError,
            False,
        ),
        (
            "no such database",
            lambda: query("SELECT 1", url.rsplit("/", 1)[0] + "/nodb"),
            pgx.InvalidCatalogNameError,
            False,
        ),
    ]
    try:
        assert_meanings(cases, "asyncpg", classify)
    finally:
        pg(f"DROP TABLE {table_name}")
        pg(f"DROP ROLE {reader}")
