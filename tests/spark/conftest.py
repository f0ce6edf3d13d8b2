"""Spark tests: every surface (data source, lookup_join, SQL, streaming, deployment).

Every test collected here carries the ``spark`` marker:
``pytest -m "not spark"`` skips them.
"""

import pytest


def pytest_itemcollected(item: pytest.Item) -> None:
    item.add_marker(pytest.mark.spark)
