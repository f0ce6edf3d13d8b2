"""Unit tests: the engine, options, docs and layering, with fakes; no server, no Spark.

Every test collected here carries the ``unit`` marker:
``pytest -m "not unit"`` skips them.
"""

import pytest


def pytest_itemcollected(item: pytest.Item) -> None:
    item.add_marker(pytest.mark.unit)
