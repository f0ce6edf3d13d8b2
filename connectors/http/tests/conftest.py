"""The HTTP connector's tests, against real aiohttp servers.

Every test collected here carries the ``connector`` marker:
``pytest -m "not connector"`` skips them.
"""

import pytest


def pytest_itemcollected(item: pytest.Item) -> None:
    item.add_marker(pytest.mark.connector)
