"""Reliability tests: faults injected between Spark and real servers.

Every test collected here carries the ``reliability`` marker:
``pytest -m "not reliability"`` skips them.
"""

import pytest


def pytest_itemcollected(item: pytest.Item) -> None:
    item.add_marker(pytest.mark.reliability)
