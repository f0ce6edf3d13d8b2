"""Packaging tests: what users install and run — the wheels, the image replay, the store
servers from wheels, the cluster recipes, the demo, the bench and the command. They run once,
in CI's main leg (the newest PySpark on the newest Python): they check how asynclookup is
shipped, not how it behaves on each PySpark.

Every test collected here carries the ``packaging`` marker:
``pytest -m "not packaging"`` skips them.
"""

import pytest


def pytest_itemcollected(item: pytest.Item) -> None:
    item.add_marker(pytest.mark.packaging)
