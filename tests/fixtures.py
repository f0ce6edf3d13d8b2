"""The fixtures every suite shares (a pytest plugin, loaded by the root ``conftest.py``): one
SparkSession, one real Redis server and one real Postgres server for the whole session."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.servers import RedisServer, redis_server


@pytest.fixture(scope="session")
def redis_srv() -> Iterator[RedisServer]:
    with redis_server() as server:
        yield server


@pytest.fixture
def redis_db(redis_srv: RedisServer) -> Iterator[Any]:
    """A synchronous redis-py client to load test data."""
    import redis

    client = redis.Redis(
        host=redis_srv.host, port=redis_srv.port, password=redis_srv.password, db=redis_srv.db
    )
    yield client
    client.close()


@pytest.fixture
def prefix() -> str:
    """A key prefix unique to the test, so tests never see each other's data."""
    return f"t{uuid.uuid4().hex[:10]}:"


JDBC_JAR = os.environ.get("ASYNCLOOKUP_TEST_JDBC_JAR", "/usr/share/java/postgresql.jar")
"""The Postgres JDBC driver (Debian: libpostgresql-jdbc-java), put in the session's spark.jars
when it is there; tests of Spark's JDBC reader skip without it, saying so."""


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    # Executors start Python from PYSPARK_PYTHON: it must be the interpreter with our package.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # the README's examples read the Postgres password from PGPASSWORD on the executors, whose
    # environment is fixed when Spark starts them (the tests' Postgres trusts any password)
    os.environ.setdefault("PGPASSWORD", "asynclookup")
    # executors import test helpers (connector classes given as module:Class) from the repo
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    from pyspark.sql import SparkSession

    from lookup_source.spark.versions import DATA_SOURCE, SQL_JOINS

    builder = (
        # local[2,2]: two cores, and a failed task is tried once more, as on a cluster
        SparkSession.builder.master("local[2,2]")
        .appName("asynclookup-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.warehouse.dir", tempfile.mkdtemp(prefix="asynclookup-warehouse-"))
    )
    if os.path.exists(JDBC_JAR):  # strategy=scan reads Postgres through Spark's JDBC reader
        builder = builder.config("spark.jars", JDBC_JAR)
    if SQL_JOINS.available():  # every Spark test runs with the SQL extension in the session
        from lookup_source import enable_sql_joins

        builder = enable_sql_joins(builder)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    if DATA_SOURCE.available():
        from lookup_source import AsyncLookupDataSource

        session.dataSource.register(AsyncLookupDataSource)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def postgres_srv() -> Iterator[Any]:
    from tests.servers import postgres_server

    with postgres_server() as server:
        yield server


@pytest.fixture
def pg(postgres_srv: Any) -> Iterator[Any]:
    """Run SQL on the test Postgres: pg("CREATE TABLE ..."), pg.fetch("SELECT ...")."""
    import asyncio

    import asyncpg

    class Database:
        def __init__(self) -> None:
            self.loop = asyncio.new_event_loop()
            self.connection = self.loop.run_until_complete(asyncpg.connect(postgres_srv.url))

        def __call__(self, sql: str, *args: Any) -> Any:
            return self.loop.run_until_complete(self.connection.execute(sql, *args))

        def many(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
            self.loop.run_until_complete(self.connection.executemany(sql, rows))

        def fetch(self, sql: str, *args: Any) -> list[Any]:
            return self.loop.run_until_complete(self.connection.fetch(sql, *args))

        def close(self) -> None:
            self.loop.run_until_complete(self.connection.close())
            self.loop.close()

    database = Database()
    yield database
    database.close()


@pytest.fixture
def table_name(prefix: str) -> str:
    return prefix.rstrip(":").lower()


@pytest.fixture(scope="module")
def spark_work_dir() -> Iterator[None]:
    """Jobs on ``local-cluster`` leave their executors' directories under SPARK_HOME/work (the
    installed pyspark's directory; an archive unpacks there, ~1 GB for a packed env): remove
    what the test's jobs left."""
    import pyspark

    work = Path(pyspark.__file__).parent / "work"
    before = set(work.iterdir()) if work.exists() else set()
    yield
    for app in set(work.iterdir()) - before if work.exists() else ():
        shutil.rmtree(app, ignore_errors=True)
