"""Which PySpark runs here, and which PySpark each surface needs: the one place that knows.

asynclookup supports PySpark 3.5 to 4.3. ``lookup_join`` (batch and streaming) runs on all of
them: it is built on ``mapInArrow`` (PySpark 3.3+). The other surfaces need newer PySpark:

>>> DATA_SOURCE.since, FILTER_PUSHDOWN.since, TABLE_FUNCTION.since
((4, 0), (4, 1), (4, 1))

A surface the running PySpark lacks fails where it is used, with one line that names the
PySpark it needs and what to use instead, never with an ``ImportError`` from deep inside
pyspark::

    the asynclookup data source needs PySpark >= 4.0 (this is PySpark 3.5.8): on PySpark 3.5,
    use lookup_join, or the keys of the table as a DataFrame with lookup_join
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pyspark

from lookup_source.errors import UnsupportedSparkError

OLDEST_SUPPORTED = (3, 5)
"""The oldest PySpark minor that asynclookup supports and tests."""


def parse_version(text: str) -> tuple[int, int]:
    """``(major, minor)`` of a version string such as ``4.1.0.dev2`` or ``3.5.8``.

    >>> parse_version("4.1.0.dev2"), parse_version("3.5.8")
    ((4, 1), (3, 5))
    """
    match = re.match(r"(\d+)\.(\d+)", text)
    if match is None:
        raise ValueError(f"not a PySpark version: {text!r}")
    return int(match.group(1)), int(match.group(2))


PYSPARK_VERSION_TEXT: str = pyspark.__version__
PYSPARK_VERSION: tuple[int, int] = parse_version(PYSPARK_VERSION_TEXT)


@dataclass(frozen=True)
class SparkFeature:
    """A surface of asynclookup that needs PySpark ``since`` or newer."""

    name: str
    since: tuple[int, int]
    instead: str

    def available(self, version: tuple[int, int] | None = None) -> bool:
        return (version or PYSPARK_VERSION) >= self.since

    def message(self, version_text: str | None = None) -> str:
        """The one line that says what this surface needs and what to use instead."""
        text = version_text or PYSPARK_VERSION_TEXT
        major, minor = parse_version(text)
        return (
            f"{self.name} needs PySpark >= {self.since[0]}.{self.since[1]} (this is PySpark "
            f"{text}): on PySpark {major}.{minor}, {self.instead}"
        )

    def require(self) -> None:
        """Raise :class:`UnsupportedSparkError` if the running PySpark is older than ``since``."""
        if not self.available():
            raise UnsupportedSparkError(self.message())


DATA_SOURCE = SparkFeature(
    "the asynclookup data source",
    (4, 0),
    "use lookup_join (with the keys to read as a DataFrame)",
)
FILTER_PUSHDOWN = SparkFeature(
    "filter pushdown into the asynclookup data source",
    (4, 1),
    "give the keys to read with the keys option",
)
TABLE_FUNCTION = SparkFeature(
    "the SQL table function (register_lookup_table)",
    (4, 1),
    "use lookup_join",
)
SQL_JOINS = SparkFeature(
    "SQL JOINs as lookups (enable_sql_joins, the SQL extension)",
    (4, 1),
    "use lookup_join",
)
BROADCAST = SparkFeature(
    "strategy=broadcast and scan (a scan of the table through the data source, joined)",
    (4, 0),
    "use strategy=lookup (or auto, which keeps lookups there), or a table Spark's JDBC reader "
    "reads (Postgres, with org.postgresql.Driver on Spark's classpath)",
)
CONNECT_METRICS = SparkFeature(
    "lookup_metrics over Spark Connect",
    (4, 0),
    "run the job on a classic SparkSession to count its lookups",
)


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` (a session or a DataFrame) is a Spark Connect one."""
    return type(spark).__module__.startswith("pyspark.sql.connect")
