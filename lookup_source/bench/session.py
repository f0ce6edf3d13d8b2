"""The bench's Spark session: local, ``--tasks`` cores, Arrow batches of
:data:`~.events.BATCH_ROWS` rows, no automatic broadcast join, the JDBC driver and the SQL
extension where they are, the data source registered."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from lookup_source.bench.events import BATCH_ROWS
from lookup_source.bench.scans import JDBC_JAR


@contextmanager
def spark_session(args: Any, *, reuse_workers: bool) -> Iterator[Any]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(f"local[{args.tasks}]")
        .appName("asynclookup-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", str(BATCH_ROWS))
        .config("spark.sql.autoBroadcastJoinThreshold", "-1")
        .config("spark.driver.memory", "2g")
        # memory: a fresh Python worker per task, so that its peak is that task's alone
        .config("spark.python.worker.reuse", "true" if reuse_workers else "false")
    )
    if os.path.exists(JDBC_JAR):
        builder = builder.config("spark.jars", JDBC_JAR)
    builder = _with_sql_joins(builder)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    from lookup_source import register_data_source

    register_data_source(spark)
    try:
        yield spark
    finally:
        spark.stop()


def _with_sql_joins(builder: Any) -> Any:
    """The builder with the SQL extension (the plan scenario's SQL JOIN rows), where this
    PySpark has it and its jar is there or can be built; else as it was."""
    from lookup_source.errors import ConfigurationError
    from lookup_source.spark.versions import SQL_JOINS

    if not SQL_JOINS.available():
        return builder
    from lookup_source import enable_sql_joins

    try:
        return enable_sql_joins(builder)
    except ConfigurationError as error:  # no jar and no JDK: the SQL rows say so
        print(f"bench: no SQL JOIN rows: {error}", file=sys.stderr)
        return builder
