"""Spark tests: every surface (data source, lookup_join, SQL, streaming, deployment).

Every test collected here carries the ``spark`` marker:
``pytest -m "not spark"`` skips them.
"""

from collections.abc import Iterator
from typing import Any

import pytest


def pytest_itemcollected(item: pytest.Item) -> None:
    item.add_marker(pytest.mark.spark)


@pytest.fixture
def typed(pg: Any, table_name: str) -> Iterator[str]:
    """Users 0..99 of many column types (104 rows): users 7 and 8 have three rows each; user
    50 has nulls."""
    table = f"{table_name}_typed"
    pg(
        f"CREATE TABLE {table} (row_id serial PRIMARY KEY, id bigint, name text, "
        "score double precision, active boolean, born date, seen timestamptz, "
        "amount numeric, tags text[])"
    )
    pg(
        f"INSERT INTO {table} (id, name, score, active, born, seen, amount, tags) "
        "SELECT g, 'user ' || g, g / 3.0, g % 2 = 0, date '2000-01-01' + g, "
        "timestamptz '2024-01-01 00:00:00+00' + g * interval '1 hour', g * 1.25, "
        "ARRAY['t' || g, 'x'] FROM generate_series(0, 99) g WHERE g <> 50"
    )
    pg(f"INSERT INTO {table} (id) VALUES (50)")
    pg(
        f"INSERT INTO {table} (id, name) SELECT k, 'extra ' || n FROM (VALUES (7), (8)) v(k), "
        "generate_series(1, 2) n"
    )
    pg(f"CREATE INDEX ON {table} (id)")
    yield table
    pg(f"DROP TABLE {table}")
