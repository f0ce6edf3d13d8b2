"""The Redis connector's tests, against a real redis-server.

Every test collected here carries the ``connector`` marker:
``pytest -m "not connector"`` skips them.
"""

from collections.abc import Iterator
from typing import Any

import pytest

from lookup_source.testing.contract_network import RawServer
from tests.servers import RedisServer


def pytest_itemcollected(item: pytest.Item) -> None:
    item.add_marker(pytest.mark.connector)


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    server = RawServer()
    yield server.port
    server.close()


@pytest.fixture
def cache_url(redis_srv: RedisServer, redis_db: Any) -> Iterator[str]:
    """The shared cache tier's Redis, emptied of the tier's keys before and after."""

    def clear() -> None:
        for key in redis_db.scan_iter(match="asynclookup:*", count=1000):
            redis_db.delete(key)

    clear()
    yield redis_srv.url
    clear()
