"""How a ``lookup_join`` is carried out: key by key against the store (``lookup``), by
scanning the table once and broadcast-joining it (``broadcast``), or by scanning it in parallel
and letting Spark join it (``scan``); ``auto`` chooses the cheapest by estimate.

A scan gives what the lookups give only for a batch DataFrame, over a store that can scan and
whose scanned keys equal the asked ones. Among the plans that can run, ``auto`` estimates each
one's cost from the table's rows (the store's own estimate), the input's (Spark's plan
statistics) and the connector's measured figures (:mod:`.plan_cost`), and takes the cheapest::

    choose("auto", streaming=False, can_scan=True, exact_keys=True,
           table_rows=lambda: 2_000_000, input_rows=lambda: 2_000_000, max_rows=1_000_000)
    # Choice('scan', 'the cheapest by estimate: scan ~5.20 core-s, lookup ~14 core-s; ...')
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.types import StringType, StructField

from lookup_source.connector_api.secrets import read_on_driver
from lookup_source.engine.scan import estimate_rows
from lookup_source.errors import OptionError
from lookup_source.settings import ERROR_COLUMN, STRATEGY_LOOKUP_MAX_INPUT_ROWS
from lookup_source.spark import plan_cost
from lookup_source.spark.plan import LookupPlan
from lookup_source.spark.plan_cost import DEFAULT_COSTS, StoreCosts
from lookup_source.spark.plan_sizes import input_rows, row_width
from lookup_source.spark.table_read import TableReader, read_table, table_reader
from lookup_source.spark.versions import BROADCAST

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger("lookup_source")


@dataclass(frozen=True)
class Choice:
    """The strategy of one lookup_join, and why (and for a scan or a broadcast, what reads the
    table)."""

    strategy: str
    reason: str
    reader: TableReader | None = None


def _rows(count: int) -> str:
    return f"~{count:,} rows"


def choose(
    requested: str,
    *,
    streaming: bool,
    can_scan: bool,
    exact_keys: bool,
    table_rows: Callable[[], int | None],
    input_rows: Callable[[], int | None],
    max_rows: int,
    connector: str = "",
    data_source: bool | None = None,
    costs: StoreCosts = DEFAULT_COSTS,
    max_lookup_rows: int | None = None,
) -> Choice:
    """The strategy for ``requested`` (``auto`` only: ``lookup``, ``broadcast`` and ``scan``
    are taken as they are, once checked by the caller). ``table_rows`` and ``input_rows``
    estimate the sizes, asked only when the choice depends on them; ``costs``: the
    connector's figures (:mod:`.plan_cost`); ``max_lookup_rows``: the input up to which
    lookups are taken (``strategy.lookup.max-input-rows``), instead of the estimates."""
    if requested != "auto":
        return Choice(requested, f"strategy={requested}")
    if streaming:
        return Choice("lookup", "the input is a stream: a table scanned once would go stale")
    if not (BROADCAST.available() if data_source is None else data_source):
        return Choice("lookup", BROADCAST.message().split(": on PySpark")[0])
    if not can_scan:
        return Choice("lookup", f"the {connector} connector cannot scan its table")
    if not exact_keys:
        return Choice(
            "lookup",
            "the key's type compares otherwise in the store than in Spark (a scan "
            "and a join could match other rows)",
        )
    if max_lookup_rows is not None:  # strategy.lookup.max-input-rows: the user's own limit
        return _by_input_limit(max_lookup_rows, table_rows, input_rows, max_rows)
    return _by_estimate(table_rows, input_rows, max_rows, costs)


def _by_input_limit(
    max_lookup_rows: int,
    table_rows: Callable[[], int | None],
    input_rows: Callable[[], int | None],
    max_rows: int,
) -> Choice:
    """Lookups for an input of at most ``strategy.lookup.max-input-rows``; else a broadcast
    of a table within ``strategy.broadcast.max-rows``, or a scan and a join."""
    rows = input_rows()
    if rows is None:
        return Choice("lookup", "the input's size is unknown")
    limit = f"strategy.lookup.max-input-rows ({max_lookup_rows:,})"
    if rows <= max_lookup_rows:
        return Choice("lookup", f"the input ({_rows(rows)}) is within {limit}")
    table = table_rows()
    plan = "broadcast" if table is not None and table <= max_rows else "scan"
    return Choice(plan, f"the input ({_rows(rows)}) is larger than {limit}")


def _by_estimate(
    table_rows: Callable[[], int | None],
    input_rows: Callable[[], int | None],
    max_rows: int,
    costs: StoreCosts,
) -> Choice:
    """The cheapest plan by the estimated costs of the table's and the input's sizes."""
    table = table_rows()
    if table is None:
        return Choice("lookup", "the table's size is unknown")
    rows = input_rows()
    fits = table <= max_rows
    if rows is None:  # only the table is known: broadcast a small one, else ask for keys
        if fits:
            return Choice(
                "broadcast",
                f"the table ({_rows(table)}) fits strategy.broadcast.max-rows ({max_rows:,}) "
                "and the input's size is unknown",
            )
        return Choice(
            "lookup",
            f"the input's size is unknown and the table ({_rows(table)}) is larger than "
            f"strategy.broadcast.max-rows ({max_rows:,})",
        )
    estimate = plan_cost.estimate(rows, table, costs, broadcast=fits)
    best = estimate.cheapest
    sizes = f"the table {_rows(table)}, the input {_rows(rows)}"
    if not fits:
        sizes += f" (more than strategy.broadcast.max-rows, {max_rows:,}: no broadcast)"
    return Choice(best, f"the cheapest by estimate: {estimate.describe()}; {sizes}")


BROADCAST_BYTES = 8 * 2**30
"""Spark's own limit on a broadcast table (``BroadcastExchangeExec``): 8 GB."""
HASH_OVERHEAD = 3
"""A broadcast row's bytes in Spark's hash relation, for each of its bytes in Spark's estimate."""


def broadcast_limit(spark: Any, plan: LookupPlan) -> int:
    """The most rows a table may have to be broadcast: ``strategy.broadcast.max-rows`` when
    set, else as many as a quarter of the driver's memory holds at the lookup schema's width
    (three times over for the hash relation), within Spark's 8 GB broadcast limit."""
    given = plan.options.plan.broadcast_max_rows
    if given is not None:
        return given
    memory = _driver_memory(spark)
    width = row_width(plan.schema) * HASH_OVERHEAD
    return max(1, int(min(memory // 4, BROADCAST_BYTES) // width))


def _driver_memory(spark: Any) -> int:
    """``spark.driver.memory`` in bytes (Spark's default, 1 GB, where unset or unreadable)."""
    try:
        text = str(spark.conf.get("spark.driver.memory", "1g")).strip().lower()
    except Exception:
        text = "1g"
    units = {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
    text = text.removesuffix("b")
    scale = units.get(text[-1:], 1)
    try:
        return int(float(text[:-1] if scale > 1 else text) * scale)
    except ValueError:
        return 2**30


def _costs(client_class: Any, reader: TableReader | None = None) -> StoreCosts:
    """The connector's figures, or the defaults for those it does not state; a table that
    Spark's JDBC reader reads costs that reader's figure per row."""
    scan_us = (
        DEFAULT_COSTS.scan_us if client_class.scan_cost_us is None else client_class.scan_cost_us
    )
    if reader is not None and reader.kind == "jdbc":
        scan_us = plan_cost.JDBC_SCAN_US
    return StoreCosts(
        lookup_us=DEFAULT_COSTS.lookup_us
        if client_class.lookup_cost_us is None
        else client_class.lookup_cost_us,
        scan_us=scan_us,
    )


def _table_rows(client_class: Any, config: Any, unknown: list[str]) -> int | None:
    """The store's estimate of its table's rows, or None (the reason appended to
    ``unknown``): an estimate never fails the job."""
    try:
        with read_on_driver(ESTIMATING):
            return estimate_rows(client_class, config)
    except Exception as error:
        unknown.append(str(error))
        log.info("asynclookup: the table's size is unknown: %s", error)
        return None


def sql_join_limit(plan: LookupPlan) -> tuple[int | None, str]:
    """For a registered table's SQL JOINs under ``strategy=auto``: the largest input (rows) to
    rewrite into lookups — ``strategy.lookup.max-input-rows`` when given, else where the
    estimated costs of lookups and of a scan and Spark's join cross — or None (always
    lookups); and why. Asks the store for its table's size once."""
    lookup_options = plan.options
    if lookup_options.plan.lookup_max_input_rows is not None:
        return lookup_options.plan.lookup_max_input_rows, "strategy.lookup.max-input-rows"
    client_class = lookup_options.connector_class()
    config = plan.connector_config()
    if not client_class.can_scan(config):
        return None, f"the {client_class.name} connector cannot scan its table"
    if not client_class.exact_key_match(config):
        return None, "the key's type compares otherwise in the store than in Spark"
    unknown: list[str] = []
    table = _table_rows(client_class, config, unknown)
    if table is None:
        return None, "the table's size is unknown" + (f" ({unknown[0]})" if unknown else "")
    limit = plan_cost.lookup_break_even(table, _costs(client_class))
    if limit is None:
        return None, f"lookups cost less than a scan at any input size (the table {_rows(table)})"
    return limit, f"where lookups and a scan of the table ({_rows(table)}) cost the same"


def sql_join_decision(plan: LookupPlan, input_rows: int | None) -> tuple[bool, str]:
    """Whether a SQL JOIN against ``plan``'s table runs as lookups, as its ``strategy`` says, and
    why, for an input of about ``input_rows`` rows (Spark's estimate, which the SQL extension
    hands the table function; None: unknown): ``lookup`` always; ``scan`` and ``broadcast``
    never (Spark scans the table and joins it); ``auto`` for an input of at most
    ``strategy.lookup.max-input-rows`` (given, or worked out by register_lookup_table from the
    table's size: :func:`sql_join_limit`), and when either size is unknown::

        sql_join_decision(plan, 100_000)
        # (False, "strategy=auto: a scan and Spark's join: the input ~100,000 rows, lookups
        #  up to 20 (strategy.lookup.max-input-rows)")
    """
    requested = plan.options.plan.strategy
    if requested != "auto":
        if requested == "lookup":
            return True, "strategy=lookup"
        return False, f"strategy={requested}: Spark scans the table and joins it"
    limit = plan.options.plan.lookup_max_input_rows
    if limit is None:
        return True, (
            "strategy=auto and no strategy.lookup.max-input-rows: lookups (the table's size is "
            "unknown, or only lookups can read it)"
        )
    if input_rows is None:
        return True, "strategy=auto: the input's size is unknown: lookups"
    sizes = (
        f"the input ~{input_rows:,} rows, lookups up to {limit:,} "
        f"({STRATEGY_LOOKUP_MAX_INPUT_ROWS})"
    )
    if input_rows <= limit:
        return True, f"strategy=auto: lookups: {sizes}"
    return False, f"strategy=auto: a scan and Spark's join: {sizes}"


def strategy_of(df: DataFrame, plan: LookupPlan) -> Choice:
    """The strategy of a lookup_join (``strategy``): checked when asked for, chosen from sizes
    under ``auto``, logged in one line; for a scan or a broadcast, the reader of the table
    (``scan.reader``)."""
    lookup_options = plan.options
    requested = lookup_options.plan.strategy
    client_class = lookup_options.connector_class()
    config = plan.connector_config()
    can_scan = client_class.can_scan(config)
    reader: TableReader | None = None
    if requested in ("broadcast", "scan"):
        if can_scan and not df.isStreaming:
            reader = table_reader(df.sparkSession, plan)
        if reader is None or reader.kind == "source":  # Spark's JDBC reader needs no data source
            BROADCAST.require()
        why = (
            "the input is a stream: a table scanned once would go stale"
            if df.isStreaming
            else f"the {client_class.name} connector cannot scan its table"
            if not can_scan
            else None
        )
        if why is not None:
            raise OptionError("strategy", f"is {requested}, but {why}; use lookup or auto")
    elif requested == "auto" and not df.isStreaming and can_scan:
        reader = table_reader(df.sparkSession, plan)

    unknown: list[str] = []

    def table_rows() -> int | None:
        return _table_rows(client_class, config, unknown)

    choice = choose(
        requested,
        streaming=df.isStreaming,
        can_scan=can_scan,
        exact_keys=client_class.exact_key_match(config),
        table_rows=table_rows,
        input_rows=lambda: input_rows(df),
        max_rows=broadcast_limit(df.sparkSession, plan),
        connector=client_class.name,
        data_source=BROADCAST.available() or (reader is not None and reader.kind == "jdbc"),
        costs=_costs(client_class, reader),
        max_lookup_rows=lookup_options.plan.lookup_max_input_rows,
    )
    if unknown and choice.reason == "the table's size is unknown":
        choice = Choice(choice.strategy, f"{choice.reason} ({unknown[0]})")
    if choice.strategy in ("broadcast", "scan") and reader is not None:
        choice = Choice(choice.strategy, f"{choice.reason}; {reader.describe()}", reader)
    log.info("asynclookup: strategy %s: %s", choice.strategy, choice.reason)
    return choice


ESTIMATING = (
    "strategy=auto estimates the table's size (or set strategy=lookup or broadcast, and only "
    "the executors need the variable)"
)
"""Why a secret is read on the driver when strategy=auto asks the store for its size."""


def table_join(
    df: DataFrame,
    on_columns: Sequence[str],
    plan: LookupPlan,
    *,
    how: str,
    broadcast: bool,
    reader: TableReader | None = None,
) -> DataFrame:
    """``df`` joined to the whole table, read once (by ``reader``: Spark's JDBC reader or the
    data source): broadcast (``strategy=broadcast``), or read in parallel and joined as Spark's
    planner decides, a shuffle and a sort-merge or shuffled hash join (``strategy=scan``). The
    same rows lookups give, for a table that does not change meanwhile."""
    from pyspark.sql import functions as F

    spark = df.sparkSession
    fields = list(plan.schema.fields)
    if plan.options.error_column:
        fields.append(StructField(ERROR_COLUMN, StringType(), True))
    chosen = reader or table_reader(spark, plan)
    table = read_table(spark, plan, chosen, fields)
    keys = [f"__asynclookup_key_{i}" for i in range(len(on_columns))]
    carried = [F.col(f.name) for f in plan.value_fields]
    if plan.options.error_column:
        carried.append(F.col(ERROR_COLUMN))
    table = table.select(*[F.col(k).alias(a) for k, a in zip(plan.key_names, keys)], *carried)
    condition = functools.reduce(
        lambda a, b: a & b, [df[o] == F.col(k) for o, k in zip(on_columns, keys)]
    )
    spark_how = {"semi": "left_semi", "anti": "left_anti"}.get(how, how)
    joined = df.join(F.broadcast(table) if broadcast else table, condition, spark_how)
    return joined if how in ("semi", "anti") else joined.drop(*keys)
