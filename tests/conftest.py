"""Session-wide fixtures: one SparkSession, one real Redis server."""

from __future__ import annotations

import os
import sys
import tempfile
import uuid
from collections.abc import Iterator
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


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    # Executors start Python from PYSPARK_PYTHON: it must be the interpreter with our package.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from lookup_source import AsyncLookupDataSource

    session = (
        SparkSession.builder.master("local[2]")
        .appName("asynclookup-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.warehouse.dir", tempfile.mkdtemp(prefix="asynclookup-warehouse-"))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(AsyncLookupDataSource)
    yield session
    session.stop()
