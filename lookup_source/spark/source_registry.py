"""The ``asynclookup`` data source, registered in a Spark session.

::

    from lookup_source import register_data_source

    register_data_source(spark)          # any session: spark, spark.newSession(), ...
    spark.read.format("asynclookup").options(...).load()

Spark keeps a session's Python data sources in that session, but checks a new name against the
data sources of the session that is *active* in the JVM (4.0 to 4.3): registering in
``spark.newSession()`` while the first session is the active one fails with
``DATA_SOURCE_ALREADY_EXISTS``, and the new session then has none (``DATA_SOURCE_NOT_FOUND``).
:func:`register_data_source` makes the session active in the JVM while it registers, and
registers once per session.
"""

from __future__ import annotations

from typing import Any

from lookup_source.spark.versions import DATA_SOURCE, is_connect

SOURCE_NAME = "asynclookup"
"""The data source's name, as ``spark.read.format(...)`` and ``USING`` take it."""


def register_data_source(spark: Any) -> None:
    """Register :class:`~lookup_source.AsyncLookupDataSource` as ``asynclookup`` in ``spark``
    (a classic session or a Spark Connect one), unless it is there already."""
    DATA_SOURCE.require()
    from lookup_source.spark.datasource import AsyncLookupDataSource

    if is_connect(spark):  # the server's sessions: Spark Connect keeps them apart
        spark.dataSource.register(AsyncLookupDataSource)
        return
    session = spark._jsparkSession
    if _registered(session):
        return
    sessions = spark._jvm.org.apache.spark.sql.SparkSession
    active = sessions.getActiveSession()
    sessions.setActiveSession(session)
    try:
        spark.dataSource.register(AsyncLookupDataSource)
    finally:
        if active.isDefined():
            sessions.setActiveSession(active.get())
        else:
            sessions.clearActiveSession()


def _registered(session: Any) -> bool:
    try:
        return bool(session.sessionState().dataSourceManager().dataSourceExists(SOURCE_NAME))
    except Exception:  # another Spark's internals: register (Spark warns and replaces it)
        return False
