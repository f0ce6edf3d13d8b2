"""The Redis connector's tests, against a real redis-server.

Every test collected here carries the ``connector`` marker:
``pytest -m "not connector"`` skips them.
"""

import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.servers import RedisServer


def pytest_itemcollected(item: pytest.Item) -> None:
    item.add_marker(pytest.mark.connector)


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield int(listener.getsockname()[1])
    stop.set()
    thread.join(2)
    for connection in held:
        connection.close()
    listener.close()


@pytest.fixture
def cache_url(redis_srv: RedisServer, redis_db: Any) -> Iterator[str]:
    """The shared cache tier's Redis, emptied of the tier's keys before and after."""

    def clear() -> None:
        for key in redis_db.scan_iter(match="asynclookup:*", count=1000):
            redis_db.delete(key)

    clear()
    yield redis_srv.url
    clear()
