"""What each supported PySpark carries, and how a surface it lacks fails.

The Spark suites run on every supported PySpark minor (``make spark-versions``); a test of a
surface the running PySpark lacks is skipped there (``tests.helpers.needs``), and these tests
check that the surface fails where it is used, with one line naming the PySpark it needs.
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path
from typing import Any

import pyspark
import pytest

from lookup_source.errors import UnsupportedSparkError
from lookup_source.spark.versions import (
    BROADCAST,
    DATA_SOURCE,
    FILTER_PUSHDOWN,
    OLDEST_SUPPORTED,
    SQL_JOINS,
    TABLE_FUNCTION,
    parse_version,
)

ROOT = Path(__file__).resolve().parents[2]


def test_every_name_of_the_package_imports_but_the_surfaces_this_pyspark_lacks() -> None:
    import lookup_source

    for name in lookup_source.__all__:
        if name == "AsyncLookupDataSource" and not DATA_SOURCE.available():
            continue
        value = getattr(lookup_source, name)
        if name == "__version__":
            assert re.fullmatch(r"\d+\.\d+\.\d+\S*", value), value
        else:  # a class or a function of the package, never a stand-in
            assert callable(value) and value.__module__.startswith("lookup_source."), name


@pytest.mark.skipif(DATA_SOURCE.available(), reason="this PySpark has Python data sources")
def test_the_data_source_says_which_pyspark_it_needs() -> None:
    message = (
        f"the asynclookup data source needs PySpark >= 4.0 (this is PySpark "
        f"{pyspark.__version__}): on PySpark 3.5, use lookup_join (with the keys to read as a "
        "DataFrame)"
    )
    with pytest.raises(UnsupportedSparkError) as raised:
        from lookup_source import AsyncLookupDataSource  # noqa: F401
    assert str(raised.value) == message
    sys.modules.pop("lookup_source.spark.datasource", None)
    with pytest.raises(UnsupportedSparkError, match=re.escape(message)):
        importlib.import_module("lookup_source.spark.datasource")


@pytest.mark.skipif(TABLE_FUNCTION.available(), reason="this PySpark has Arrow table functions")
def test_the_table_function_says_which_pyspark_it_needs(spark: Any) -> None:
    from lookup_source import register_lookup_table

    minor = ".".join(pyspark.__version__.split(".")[:2])
    with pytest.raises(UnsupportedSparkError) as raised:
        register_lookup_table(
            spark, "users", schema="id long, name string", options={"connector": "redis"}
        )
    assert str(raised.value) == (
        f"the SQL table function (register_lookup_table) needs PySpark >= 4.1 (this is "
        f"PySpark {pyspark.__version__}): on PySpark {minor}, use lookup_join"
    )


@pytest.mark.skipif(SQL_JOINS.available(), reason="this PySpark has SQL JOINs as lookups")
def test_sql_joins_say_which_pyspark_they_need() -> None:
    from pyspark.sql import SparkSession

    from lookup_source import enable_sql_joins

    minor = ".".join(pyspark.__version__.split(".")[:2])
    with pytest.raises(UnsupportedSparkError) as raised:
        enable_sql_joins(SparkSession.builder)
    assert str(raised.value) == (
        "SQL JOINs as lookups (enable_sql_joins, the SQL extension) needs PySpark >= 4.1 "
        f"(this is PySpark {pyspark.__version__}): on PySpark {minor}, use lookup_join"
    )


@pytest.mark.skipif(BROADCAST.available(), reason="this PySpark can broadcast a scanned table")
def test_strategy_broadcast_says_which_pyspark_it_needs_and_auto_keeps_lookups(
    spark: Any,
) -> None:
    from lookup_source import lookup_join, lookup_metrics

    minor = ".".join(pyspark.__version__.split(".")[:2])
    events = spark.createDataFrame([(1,), (2,)], "k long")

    async def fetch(key: int) -> dict[str, str] | None:
        return {"name": f"user {key}"} if key == 1 else None

    with pytest.raises(UnsupportedSparkError) as raised:
        lookup_join(
            events,
            "k",
            schema="k long, name string",
            fetch=fetch,
            options={"strategy": "broadcast"},
        )
    assert str(raised.value) == (
        "strategy=broadcast and scan (a scan of the table through the data source, joined) "
        "needs PySpark >= 4.0 "
        f"(this is PySpark {pyspark.__version__}): on PySpark {minor}, use strategy=lookup (or "
        "auto, which keeps lookups there), or a table Spark's JDBC reader reads (Postgres, with "
        "org.postgresql.Driver on Spark's classpath)"
    )
    out = lookup_join(
        events, "k", schema="k long, name string", fetch=fetch, options={"strategy": "auto"}
    )
    assert sorted(out.collect()) == [(1, "user 1"), (2, None)]
    assert lookup_metrics(out).strategy == "lookup"


@pytest.mark.skipif(
    FILTER_PUSHDOWN.available() or not DATA_SOURCE.available(),
    reason="filter pushdown (4.1+) is tested in test_datasource; 3.5 has no data source",
)
def test_without_pushdown_a_store_that_cannot_scan_asks_for_the_keys_option(spark: Any) -> None:
    df = (
        spark.read.format("asynclookup")
        .schema("id long, name string")
        .options(connector="http", url="http://127.0.0.1:9/users/{key}")
        .load()
    )
    with pytest.raises(Exception, match="set option keys='\\[...\\]'; to enrich a DataFrame"):
        df.collect()


def test_pyproject_and_the_test_matrix_start_at_the_oldest_supported_pyspark() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    declared = re.search(r'"pyspark\[sql\]>=([0-9.]+)"', pyproject)
    assert declared is not None
    assert parse_version(declared.group(1)) == OLDEST_SUPPORTED
    makefile = (ROOT / "Makefile").read_text()
    matrix = re.search(r"^SPARK_VERSIONS \?= (.+)$", makefile, re.M)
    assert matrix is not None
    minors = [parse_version(v) for v in matrix.group(1).split()]
    assert minors[0] == OLDEST_SUPPORTED
    assert parse_version(pyspark.__version__) in minors  # this run is one of the matrix


def _makefile_matrix() -> tuple[list[str], dict[str, str]]:
    makefile = (ROOT / "Makefile").read_text()
    matrix = re.search(r"^SPARK_VERSIONS \?= (.+)$", makefile, re.M)
    assert matrix is not None
    pins = dict(re.findall(r"^SPARK_PIN_([0-9.]+) := ([0-9.]+)$", makefile, re.M))
    return matrix.group(1).split(), pins


def test_the_readme_versions_table_says_what_the_code_and_the_matrix_do() -> None:
    from lookup_source.spark.versions import BROADCAST, CONNECT_METRICS

    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Supported versions") :]
    rows = [line for line in section.splitlines()[2:14] if line.startswith("|")]
    header = [cell.strip() for cell in rows[0].strip("|").split("|")]
    minors, pins = _makefile_matrix()
    assert [re.sub("PySpark ", "", h) for h in header[1:]] == minors
    features = {
        "`lookup_join`": None,
        "`lookup_metrics` over Spark Connect": CONNECT_METRICS,
        "the data source": DATA_SOURCE,
        "filter pushdown": FILTER_PUSHDOWN,
        "the SQL table function": TABLE_FUNCTION,
        "SQL JOINs as lookups": SQL_JOINS,
        "`strategy=broadcast`": BROADCAST,
    }
    for line in rows[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        feature = next(f for name, f in features.items() if cells[0].startswith(name))
        marks = cells[1:]
        for minor, mark in zip(minors, marks):
            works = feature is None or feature.available(parse_version(minor))
            assert mark == ("✔" if works else "—"), (cells[0], minor, mark)
    for minor, pin in pins.items():  # the releases the README says were tested
        assert pin.startswith(minor + ".") and pin in section[:3000], pin
