"""How a lookup is planned (:class:`PlanSettings`: lookups, a broadcast or a scan and a join) and
how the data source reads (:class:`ReadSettings`: which keys, how many read tasks)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lookup_source.connector_api.options import (
    choice,
    int_between,
    parse_bool,
    parse_keys,
    parse_positive_int,
    parse_text,
)
from lookup_source.settings.declare import (
    FILTER_PUSHDOWN,
    KEYS,
    LOOKUP_JOIN,
    PLANS,
    READER,
    SCAN_READER,
    SQL_JOIN_FUNCTION,
    STRATEGY,
    STRATEGY_BROADCAST_MAX_ROWS,
    STRATEGY_LOOKUP_MAX_INPUT_ROWS,
    option,
)

KEYS_PER_PARTITION = 10_000
"""Keys per read task of the data source when ``partitions`` is not set."""

DEFAULT_SCAN_PARTITIONS = 4


@dataclass(frozen=True)
class PlanSettings:
    """How a lookup_join or a SQL JOIN against a lookup table is planned: as lookups, or by
    reading the whole table (a broadcast, or a scan and Spark's join)."""

    strategy: str = option(
        STRATEGY,
        choice("lookup", "broadcast", "scan", "auto"),
        "lookup",
        "`lookup`: ask the store for the keys of the input; `broadcast`: scan the whole table "
        "once and broadcast-join it; `scan`: scan the table in parallel and let Spark join it "
        "(a shuffle, then a sort-merge or hash join) — both for stores that scan and batch "
        "DataFrames; `auto`: the cheapest of the three by estimate (the table's rows, the "
        "input's from Spark's plan statistics, the connector's measured cost per key and per "
        "row; a broadcast only up to strategy.broadcast.max-rows), lookups for a stream. The "
        "choice, its reason and the estimates are in the metrics and the log. For a SQL JOIN "
        "against a lookup table (the SQL extension): `lookup` rewrites it into lookups, "
        "`scan` and `broadcast` leave Spark's scan and join, `auto` rewrites it when the "
        "input is at most strategy.lookup.max-input-rows.",
        scope=PLANS,
    )
    broadcast_max_rows: int | None = option(
        STRATEGY_BROADCAST_MAX_ROWS,
        parse_positive_int,
        None,
        "strategy=auto: the most rows a table may have to be broadcast (the driver collects "
        "it, each executor holds it in memory); a larger one is scanned and joined, or looked "
        "up. When not set: as many rows as a quarter of the driver's memory "
        "(spark.driver.memory) holds at the lookup schema's width, three times over for "
        "Spark's hash relation, within Spark's 8 GB broadcast limit.",
        scope=LOOKUP_JOIN,
        default_doc="from the driver's memory",
    )
    scan_reader: str = option(
        SCAN_READER,
        choice("auto", "jdbc", "source"),
        "auto",
        "strategy=scan and broadcast: what reads the table. `jdbc`: Spark's own JDBC reader "
        "(Postgres: the connector's URL, password and TLS options mapped to pgjdbc's, the "
        "read cut into ranges of an integer key; needs org.postgresql.Driver on Spark's "
        "classpath, and the password on the driver); `source`: the asynclookup data source; "
        "`auto`: the JDBC reader where the store has one and its driver is on the classpath, "
        "else the data source (the reason says which, and why).",
        scope=LOOKUP_JOIN,
    )
    lookup_max_input_rows: int | None = option(
        STRATEGY_LOOKUP_MAX_INPUT_ROWS,
        int_between(0, 10**15),
        None,
        "strategy=auto: the largest input (rows, by Spark's estimate) that runs as lookups; a "
        "larger one scans the table and joins it. When not set, lookup_join takes the cheapest "
        "plan by estimate, and register_lookup_table sets it for its table's SQL JOINs where "
        "the estimated costs of lookups and of a scan and a join cross (asking the store for "
        "the table's size once).",
        scope=PLANS,
        default_doc="from the estimated costs",
    )
    sql_join_function: str | None = option(
        SQL_JOIN_FUNCTION,
        parse_text,
        None,
        "Set by register_lookup_table on its view: the table function that a SQL JOIN "
        "against the view is rewritten into (the SQL extension). Not to be set by hand.",
        scope=READER,
    )


@dataclass(frozen=True)
class ReadSettings:
    """What the data source (``spark.read.format("asynclookup")``) reads: the keys given, or
    those of pushed-down filters, over how many read tasks."""

    keys: tuple[Any, ...] | None = option(
        KEYS,
        parse_keys,
        None,
        "A JSON array of keys to fetch (arrays of values for composite keys).",
        scope=READER,
    )
    filter_pushdown: bool = option(
        FILTER_PUSHDOWN,
        parse_bool,
        True,
        "With spark.sql.python.filterPushdown.enabled=true (PySpark 4.1+), turn "
        "`key IN (...)` / `key = ...` filters into the keys to fetch. Spark 4.1 to 4.3 cache a "
        "pushed-down read per DataFrame or view: see Spark caveats.",
        scope=READER,
    )
    partitions: int | None = option(
        "partitions",
        int_between(1, 1_000_000),
        None,
        "How many read tasks the keys (or a whole-table scan) are split over.",
        scope=READER,
        default_doc=f"one per {KEYS_PER_PARTITION:,} keys; a scan: {DEFAULT_SCAN_PARTITIONS}",
    )
