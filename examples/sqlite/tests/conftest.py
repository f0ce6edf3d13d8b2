"""The example SQLite connector's tests, against a real database file.

Every test collected here carries the ``connector`` marker:
``pytest -m "not connector"`` skips them.
"""

import pytest


def pytest_itemcollected(item: pytest.Item) -> None:
    item.add_marker(pytest.mark.connector)
