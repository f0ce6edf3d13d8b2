"""Every way a Spark user could do the lookup join, each timed on the same input and store: the
catalogue, and which of them a throughput scenario runs against a store (:func:`methods_for`).

Each method takes a :class:`Context` and returns a :class:`Result` (rows, seconds, requests).
They live by kind: :mod:`.blocking` (the synchronous alternatives), :mod:`.scans` (the table
read whole and broadcast-joined), :mod:`.asynclookup_methods` (asynclookup's own, with a user's
own functions in :mod:`.user_functions`), :mod:`.floor` (the same Spark job with no I/O) and
:mod:`.ceiling` (the raw client alone); what they share is in :mod:`.context` and
:mod:`.timing` (the CPU meter the runner sets there, :data:`.timing.METER`).
"""

from __future__ import annotations

from lookup_source.bench.asynclookup_methods import (
    asynclookup,
    asynclookup_fetch,
    asynclookup_fetch_many_redis,
    asynclookup_strategy,
    fanout,
    sql_table_function,
)
from lookup_source.bench.blocking import arrow_udf, batched_loop, sync_udf, thread_pool
from lookup_source.bench.ceiling import ceiling
from lookup_source.bench.context import POSTGRES_THREADS, Context, Method, Result
from lookup_source.bench.floor import floor, floor_columns
from lookup_source.bench.scans import JDBC_JAR, jdbc_broadcast, scan_broadcast
from lookup_source.bench.stores import Store
from lookup_source.bench.timing import timed
from lookup_source.bench.user_functions import HttpFetch, RedisFetchMany

SLOW_METHODS: tuple[Method, ...] = (sync_udf, arrow_udf, thread_pool)
"""Methods that take minutes at full size, and are run once whatever ``--repeat`` says."""


def methods_for(store: Store, distribution: str) -> list[Method]:
    """The methods a throughput scenario runs against ``store``, in the report's order."""
    chosen: list[Method] = [sync_udf, arrow_udf, thread_pool]
    if store.kind != "http" or store.batch:
        chosen.append(batched_loop)
    if store.can_scan:
        chosen.append(scan_broadcast)
    if store.kind == "postgres":
        chosen.append(jdbc_broadcast)
    chosen += [asynclookup(mode) for mode in ("ordered", "unordered", "key-ordered")]
    if store.kind == "http":
        chosen.append(asynclookup_fetch)
    if store.kind == "redis":
        chosen += [asynclookup_fetch_many_redis(columnar) for columnar in (False, True)]
    if store.can_scan:
        chosen += [asynclookup_strategy("broadcast"), asynclookup_strategy("auto")]
    if distribution == "zipf":
        chosen.append(asynclookup("ordered", cache=True))
        chosen.append(asynclookup("ordered", cache=True, by_key=True))
    chosen += [sql_table_function, floor]
    return chosen


__all__ = [
    "JDBC_JAR",
    "POSTGRES_THREADS",
    "SLOW_METHODS",
    "Context",
    "HttpFetch",
    "Method",
    "RedisFetchMany",
    "Result",
    "arrow_udf",
    "asynclookup",
    "asynclookup_fetch",
    "asynclookup_fetch_many_redis",
    "asynclookup_strategy",
    "batched_loop",
    "ceiling",
    "fanout",
    "floor",
    "floor_columns",
    "jdbc_broadcast",
    "methods_for",
    "scan_broadcast",
    "sql_table_function",
    "sync_udf",
    "thread_pool",
    "timed",
]
