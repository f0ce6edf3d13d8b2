"""The SQL extension: a SQL JOIN against a lookup table runs as async lookups.

Spark offers a Python data source no way to receive a join's keys, so a ``JOIN`` against a
registered lookup table is otherwise a full scan and a Spark join (and fails against a store
that cannot scan, such as an HTTP API). This package ships a small Spark SQL extension in Java
(its source in ``java/``, its jar built from it: :mod:`.jar`) whose analyzer rule rewrites such a
join into a call of the table's lookup table function. A session must start with it::

    from pyspark.sql import SparkSession
    from lookup_source import enable_sql_joins

    spark = enable_sql_joins(SparkSession.builder).getOrCreate()

``spark-submit``, the ``pyspark`` shell and a Spark Connect server take the same settings on
their command line: ``python -m lookup_source sql-extension`` prints them.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from lookup_source.errors import ConfigurationError
from lookup_source.spark.internals import builder_options
from lookup_source.spark.sql_extension.jar import EXTENSION_CLASS, MissingJarError, jar_path
from lookup_source.spark.versions import SQL_JOINS

log = logging.getLogger("lookup_source")

ENABLED = "spark.asynclookup.sql.joins.enabled"
"""At run time: ``false`` turns the rewrite off (a JOIN is then Spark's scan and join)."""

__all__ = [
    "ENABLED",
    "EXTENSION_CLASS",
    "MissingJarError",
    "enable_sql_joins",
    "extension_active",
    "jar_path",
    "submit_arguments",
]


def enable_sql_joins(builder: Any) -> Any:
    """``builder`` (a ``SparkSession.builder``) with the SQL extension added: its jar in
    ``spark.jars`` and its class in ``spark.sql.extensions``, after the jars and extensions
    already set (Delta, Iceberg, Sedona...). Returns the builder.

    A SQL ``JOIN`` against a table of :func:`~lookup_source.register_lookup_table` (or any
    ``asynclookup`` view or DataFrame) then runs as async lookups of the other side's keys; set
    ``spark.asynclookup.sql.joins.enabled=false`` to turn that off at run time. Needs PySpark
    4.1 or newer. Extensions are fixed when a session starts: set this before the first
    ``getOrCreate()`` (a Spark Connect server takes them on its command line:
    ``python -m lookup_source sql-extension``)::

        spark = enable_sql_joins(SparkSession.builder.appName("etl")).getOrCreate()
    """
    SQL_JOINS.require()
    options = builder_options(builder)
    if options is None:
        raise ConfigurationError(
            "enable_sql_joins takes a SparkSession.builder (before getOrCreate); a running "
            f"session's extensions are fixed: start it with spark.sql.extensions={EXTENSION_CLASS}"
        )
    remote = str(options.get("spark.remote") or os.environ.get("SPARK_REMOTE") or "")
    if remote and not remote.startswith("local"):  # remote("local[*]") starts a server here
        raise ConfigurationError(
            "a Spark Connect session's SQL extensions are its server's: start the server with "
            "the arguments `python -m lookup_source sql-extension` prints"
        )
    jar = str(jar_path())
    jars = _listed(_configured(options, "spark.jars"))
    extensions = _listed(_configured(options, "spark.sql.extensions"))
    if _running():
        log.warning(
            "enable_sql_joins: a SparkSession is already running; getOrCreate() returns it with "
            "the extensions it started with (stop it first to start one with %s)",
            EXTENSION_CLASS,
        )
    return builder.config("spark.jars", ",".join(_added(jars, jar))).config(
        "spark.sql.extensions", ",".join(_added(extensions, EXTENSION_CLASS))
    )


def _listed(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _added(items: list[str], item: str) -> list[str]:
    return items if item in items else [*items, item]


def _configured(options: dict[str, Any], key: str) -> str:
    """``key`` as the session would get it: the builder's value, else the running
    SparkContext's, else ``spark-defaults.conf``'s (which spark-submit reads when the JVM
    starts; kept, so that Delta's or Iceberg's extension set there stays)."""
    if options.get(key):
        return str(options[key])
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    if context is not None:
        return str(context.getConf().get(key, "") or "")
    return _spark_defaults().get(key, "")


def _running() -> bool:
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession() is not None


def _spark_defaults() -> dict[str, str]:
    """The settings of ``spark-defaults.conf`` ($SPARK_CONF_DIR, else $SPARK_HOME/conf)."""
    directory = os.environ.get("SPARK_CONF_DIR") or (
        os.path.join(os.environ["SPARK_HOME"], "conf") if os.environ.get("SPARK_HOME") else None
    )
    if not directory:
        return {}
    settings = {}
    try:
        with open(os.path.join(directory, "spark-defaults.conf"), encoding="utf-8") as file:
            for line in file:
                line = line.strip()
                if line and not line.startswith("#"):
                    key, _, value = line.replace("=", " ", 1).partition(" ")
                    settings[key.strip()] = value.strip()
    except OSError:
        return {}
    return settings


def extension_active(spark: Any) -> bool:
    """Whether ``spark`` (a classic or Spark Connect session) started with the extension."""
    try:
        configured = spark.conf.get("spark.sql.extensions", "") or ""
    except Exception:
        return False
    return EXTENSION_CLASS in [e.strip() for e in configured.split(",")]


def submit_arguments(build: bool = True) -> list[str]:
    """What ``spark-submit``, ``pyspark`` or ``start-connect-server.sh`` need on their command
    line for the extension: ``--jars <jar> --conf spark.sql.extensions=<class>``."""
    return [
        "--jars",
        str(jar_path(build=build)),
        "--conf",
        f"spark.sql.extensions={EXTENSION_CLASS}",
    ]
