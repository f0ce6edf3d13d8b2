"""A lookup's table read whole, for ``strategy=scan`` and ``broadcast``: by Spark's own JDBC
reader where the store has one and its driver is on Spark's classpath (the fastest scan on the
JVM, and exactly what a Spark user would write), else through the ``asynclookup`` data source.
``scan.reader`` chooses (``auto``, ``jdbc``, ``source``); the choice and its reason travel to
the strategy's reason (the log, ``lookup_metrics``).

Both give the lookup schema's columns, in its types, and the same rows (tests compare them)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from lookup_source.connector_api import JdbcTable, JdbcUnavailable
from lookup_source.connector_api.secrets import read_on_driver
from lookup_source.engine.loop import TaskLoop
from lookup_source.errors import OptionError
from lookup_source.settings import (
    FILTER_PUSHDOWN,
    PARTITION_BY_KEY,
    SCAN_READER,
    STRATEGY,
    STRATEGY_BROADCAST_MAX_ROWS,
    STRATEGY_LOOKUP_MAX_INPUT_ROWS,
)
from lookup_source.spark.plan import LookupPlan

log = logging.getLogger("lookup_source")

READING = (
    "strategy=scan and broadcast read the table through Spark's JDBC reader, which takes the "
    "password on the driver (or set scan.reader=source, and only the executors need it)"
)


@dataclass(frozen=True)
class TableReader:
    """How the table will be read: ``jdbc`` (with its options) or ``source``, and why."""

    kind: str
    reason: str
    jdbc: JdbcTable | None = None

    def describe(self) -> str:
        if self.kind == "jdbc" and self.jdbc is not None:
            return f"the table read by Spark's JDBC reader ({self.jdbc.driver})"
        return f"the table read through the asynclookup data source ({self.reason})"


def table_reader(spark: Any, plan: LookupPlan) -> TableReader:
    """The reader ``scan.reader`` asks for (``auto``: JDBC where it can, else the source)."""
    requested = plan.options.plan.scan_reader
    if requested == "source":
        return TableReader("source", "scan.reader=source")
    client_class = plan.options.connector_class()
    try:
        with read_on_driver(READING):
            jdbc = client_class.jdbc_table(plan.connector_config())
    except JdbcUnavailable as unavailable:
        if requested == "jdbc":
            raise OptionError(SCAN_READER, f"is jdbc, but {unavailable}") from None
        return TableReader("source", str(unavailable))
    if not driver_loadable(spark, jdbc.driver):
        why = (
            f"the JDBC driver {jdbc.driver} is not on Spark's classpath (spark.jars; Debian: "
            "libpostgresql-jdbc-java, /usr/share/java/postgresql.jar)"
        )
        if requested == "jdbc":
            raise OptionError(SCAN_READER, f"is jdbc, but {why}")
        return TableReader("source", why)
    return TableReader("jdbc", f"{jdbc.driver} is on Spark's classpath", jdbc)


def driver_loadable(spark: Any, driver: str) -> bool:
    """Whether the session's JVM can load ``driver`` (Spark's own class loader, which holds
    ``spark.jars``); False where it cannot be asked (Spark Connect)."""
    try:
        jvm = spark.sparkContext._jvm
        loader = jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
        jvm.java.lang.Class.forName(driver, False, loader)
        return True
    except Exception:
        return False


def read_table(spark: Any, plan: LookupPlan, reader: TableReader, fields: list[Any]) -> Any:
    """The table as a DataFrame of ``fields`` (the lookup schema's, in its types)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    if reader.kind != "jdbc" or reader.jdbc is None:
        from lookup_source.spark.source_registry import register_data_source

        register_data_source(spark)
        options = {
            k: v for k, v in plan.options.to_strings().items() if k.lower() not in _LOOKUP_ONLY
        }
        options[FILTER_PUSHDOWN] = "false"
        options[STRATEGY] = "scan"  # a read of the table: the SQL extension leaves it be
        source = spark.read.format("asynclookup").options(**options)
        return source.schema(StructType(fields)).load()
    jdbc = reader.jdbc
    parts = plan.options.read.partitions or DEFAULT_PARTS
    table = _jdbc_frame(spark, plan, jdbc, parts)
    columns = {name.lower(): name for name in table.columns}
    selected = []
    for f in fields:  # the lookup schema's columns, in its types (an error column: none)
        name = columns.get(f.name.lower())
        value = F.lit(None) if name is None else F.col(f"`{name.replace('`', '``')}`")
        selected.append(value.cast(f.dataType).alias(f.name))
    return table.select(*selected)


DEFAULT_PARTS = 4
"""Parts of a JDBC read when ``partitions`` is not set (the data source's scan default)."""


def _jdbc_frame(spark: Any, plan: LookupPlan, jdbc: JdbcTable, parts: int) -> Any:
    properties = {"driver": jdbc.driver, **jdbc.properties}
    if jdbc.hash_predicate is not None and parts > 1:
        predicates = [jdbc.hash_predicate.format(parts=parts, part=i) for i in range(parts)]
        return spark.read.jdbc(jdbc.url, jdbc.table, predicates=predicates, properties=properties)
    reader = spark.read.format("jdbc").option("url", jdbc.url).option("dbtable", jdbc.table)
    reader = reader.options(**properties)
    bounds = _key_range(plan) if jdbc.partition_column is not None and parts > 1 else None
    if bounds is not None:
        low, high = bounds
        reader = (
            reader.option("partitionColumn", jdbc.partition_column)
            .option("lowerBound", str(low))
            .option("upperBound", str(high + 1))
            .option("numPartitions", str(parts))
        )
    return reader.load()


def _key_range(plan: LookupPlan) -> tuple[int, int] | None:
    """The table's smallest and largest key (``LookupClient.key_range``), asked on the driver;
    None when unknown (the read is then one part)."""
    client_class = plan.options.connector_class()
    try:
        with (
            read_on_driver(READING),
            TaskLoop() as loop,
            loop.opened(client_class(plan.connector_config())) as client,
        ):
            return loop.run(client.key_range())
    except Exception as error:  # a read in one part is slower, never wrong
        log.info("asynclookup: the table's key range is unknown (one JDBC part): %s", error)
        return None


_LOOKUP_ONLY = frozenset(
    {
        STRATEGY,
        STRATEGY_BROADCAST_MAX_ROWS,
        STRATEGY_LOOKUP_MAX_INPUT_ROWS,
        PARTITION_BY_KEY,
        SCAN_READER,
    }
)
"""Options of the join, not of the read."""
