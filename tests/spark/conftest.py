"""Spark tests: every surface (data source, lookup_join, SQL, streaming, deployment).

Every test collected here carries the ``spark`` marker:
``pytest -m "not spark"`` skips them.
"""

import shutil
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest


def pytest_itemcollected(item: pytest.Item) -> None:
    item.add_marker(pytest.mark.spark)


@pytest.fixture
def spark_work_dir() -> Iterator[None]:
    """Jobs on ``local-cluster`` leave their executors' directories under SPARK_HOME/work (the
    installed pyspark's directory; an archive unpacks there, ~1 GB for a packed env): remove
    what the test's jobs left."""
    work = Path(pyspark.__file__).parent / "work"
    before = set(work.iterdir()) if work.exists() else set()
    yield
    for app in set(work.iterdir()) - before if work.exists() else ():
        shutil.rmtree(app, ignore_errors=True)
