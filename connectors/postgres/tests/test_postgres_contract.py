"""The connector contract, run by the Postgres connector against a real Postgres."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from lookup_source.testing.contract import ConnectorContract, ContractStore, Record

COLUMNS = "name text, score double precision, visits bigint, active boolean, born date, tags text[]"
NAMES = ("name", "score", "visits", "active", "born", "tags")


class PostgresStore(ContractStore):
    """Two tables without a primary key (a key may have several rows): by id, by (tenant, id)."""

    supports_one_to_many = True

    def __init__(self, server: Any, pg: Any, table: str) -> None:
        self.server = server
        self.pg = pg
        self.table = table
        pg(f"CREATE TABLE {table} (id bigint, {COLUMNS})")
        pg(f"CREATE INDEX ON {table} (id)")
        pg(f"CREATE TABLE {table}_t (tenant text, id bigint, {COLUMNS})")

    def options(self, *, composite: bool = False) -> dict[str, str]:
        table = f"{self.table}_t" if composite else self.table
        return {"connector": "postgres", "url": self.server.url, "postgres.table": table}

    def options_at(self, host: str, port: int) -> dict[str, str]:
        parts = urlsplit(self.server.url)
        netloc = parts.netloc.rsplit("@", 1)[0] + f"@{host}:{port}"
        return {**self.options(), "url": urlunsplit(parts._replace(netloc=netloc))}

    def put(self, records: Mapping[Any, Sequence[Record]]) -> None:
        rows = [
            (*(key if isinstance(key, tuple) else (key,)), *(r[n] for n in NAMES))
            for key, many in records.items()
            for r in many
        ]
        simple = [r for r in rows if len(r) == len(NAMES) + 1]
        composite = [r for r in rows if len(r) == len(NAMES) + 2]
        marks = ", ".join(f"${i}" for i in range(1, len(NAMES) + 2))
        if simple:
            self.pg.many(f"INSERT INTO {self.table} VALUES ({marks})", simple)
        if composite:
            self.pg.many(
                f"INSERT INTO {self.table}_t VALUES ({marks}, ${len(NAMES) + 2})", composite
            )

    def refused_options(self) -> dict[str, str]:
        return {**self.options(), "postgres.table": f"{self.table}_no_such_table"}

    def server_address(self) -> tuple[str, int]:
        parts = urlsplit(self.server.url)
        return parts.hostname or "127.0.0.1", parts.port or 5432


class TestPostgresContract(ConnectorContract):
    @pytest.fixture
    def contract_store(
        self, postgres_srv: Any, pg: Any, table_name: str
    ) -> Iterator[PostgresStore]:
        yield PostgresStore(postgres_srv, pg, table_name)
        pg(f"DROP TABLE IF EXISTS {table_name}, {table_name}_t")
