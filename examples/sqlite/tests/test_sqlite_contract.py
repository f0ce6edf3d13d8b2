"""The connector contract, run by the example SQLite connector against a real database file."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from lookup_source.testing.contract import ConnectorContract, ContractStore, Record, json_ready

COLUMNS = "name TEXT, score REAL, visits INTEGER, active BOOLEAN, born TEXT, tags TEXT"
NAMES = ("name", "score", "visits", "active", "born", "tags")


class SqliteStore(ContractStore):
    """Tables ``users`` (by id) and ``tenant_users`` (by tenant, id), without primary keys."""

    supports_one_to_many = True

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        with sqlite3.connect(self.path) as db:
            db.execute(f"CREATE TABLE users (id INTEGER, {COLUMNS})")
            db.execute(f"CREATE TABLE tenant_users (tenant TEXT, id INTEGER, {COLUMNS})")
        db.close()

    def options(self, *, composite: bool = False) -> dict[str, str]:
        table = "tenant_users" if composite else "users"
        return {"connector": "sqlite", "url": self.path, "sqlite.table": table}

    def put(self, records: Mapping[Any, Sequence[Record]]) -> None:
        rows = []
        for key, many in records.items():
            for record in many:
                ready = json_ready(record)  # dates as ISO text
                if ready["tags"] is not None:
                    ready["tags"] = json.dumps(ready["tags"])
                rows.append((*(key if isinstance(key, tuple) else (key,)), *map(ready.get, NAMES)))
        with sqlite3.connect(self.path) as db:
            for row in rows:
                table = "tenant_users" if len(row) > len(NAMES) + 1 else "users"
                db.execute(f"INSERT INTO {table} VALUES ({', '.join('?' * len(row))})", row)
        db.close()

    def unreachable_options(self) -> dict[str, str]:
        return {**self.options(), "url": str(Path(self.path).parent / "not-mounted" / "x.db")}

    def refused_options(self) -> dict[str, str]:
        return {**self.options(), "sqlite.table": "no_such_table"}


class TestSqliteContract(ConnectorContract):
    @pytest.fixture
    def contract_store(self, tmp_path: Path) -> SqliteStore:
        return SqliteStore(tmp_path / "users.db")


def test_the_entry_point_selects_it() -> None:
    from asynclookup_sqlite import SqliteLookupClient

    from lookup_source.registry import resolve_connector

    assert resolve_connector("sqlite") is SqliteLookupClient


def test_a_missing_table_option_is_named(tmp_path: Path) -> None:
    from lookup_source.errors import OptionError
    from lookup_source.options import parse_options

    with pytest.raises(OptionError, match="sqlite.table"):
        parse_options({"connector": "sqlite", "url": str(tmp_path / "x.db")})
