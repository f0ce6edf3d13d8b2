"""What every Spark surface is given and makes of it, once: the options of a lookup (a mapping,
parsed ``LookupOptions``, or your own function's), and how many of its tasks run at once (what
``rate.limit.total`` is split over)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lookup_source.errors import ConfigurationError, OptionError
from lookup_source.functions import LookupFunction
from lookup_source.registry import FIRST_PARTY
from lookup_source.settings import (
    BUDGET_TASKS,
    RATE_LIMIT_TOTAL,
    LookupOptions,
    option_strings,
    parse_options,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def lookup_options_of(
    options: Mapping[str, Any] | LookupOptions | None, function: LookupFunction | None
) -> LookupOptions:
    """The options of a lookup through their connector, or through ``function``, parsed once:
    every surface hands the :class:`LookupOptions` on from here."""
    if function is not None:
        check_pickles(function)
        given = options.to_strings() if isinstance(options, LookupOptions) else options
        return parse_options(function.options(given))
    if options is None:
        raise OptionError(
            "connector",
            f"is required: give options={{'connector': {_QUOTED_CONNECTORS} | ...}}, or "
            "your own async function as fetch= or fetch_many=",
        )
    if isinstance(options, LookupOptions):
        return options
    return parse_options(option_strings(options))


def check_pickles(function: LookupFunction) -> None:
    """Fail now, naming the function, if it cannot travel to the executors (Spark would fail
    later, with a long trace)."""
    from pyspark import cloudpickle

    try:
        cloudpickle.dumps(function.function)
    except Exception as exc:
        raise ConfigurationError(
            f"{function.argument}={function.name} cannot be pickled to the executors "
            f"({type(exc).__name__}: {exc}): make sessions, clients and locks in "
            "async def open(self), not before"
        ) from None


_OVER_CONNECT = {
    RATE_LIMIT_TOTAL: "set rate.limit (per task) instead",
    BUDGET_TASKS: "set budget.tasks (what a budget is split over while no coordinator "
    "answers) beside the budget",
}


def cluster_cores(spark: Any, needed_by: str = RATE_LIMIT_TOTAL) -> int:
    """The cores of the cluster (``defaultParallelism``), which ``rate.limit.total`` and a
    budget's static share are split over; over Spark Connect, which does not tell them, a clear
    error naming the option ``needed_by`` that asked."""
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception as exc:  # Spark Connect: no SparkContext
        raise OptionError(
            needed_by,
            "needs a classic SparkSession to know how many tasks run at once; over Spark "
            f"Connect, {_OVER_CONNECT.get(needed_by, 'set a per-task limit instead')}",
        ) from exc


def concurrent_tasks(df: DataFrame, needed_by: str = RATE_LIMIT_TOTAL) -> int:
    """The most tasks of a lookup over ``df`` that can run at once: its partitions, at most
    the cores of the cluster (what ``rate.limit.total`` and a budget are split over)."""
    cores = cluster_cores(df.sparkSession, needed_by)
    try:
        partitions = int(df.rdd.getNumPartitions())
    except Exception:  # a streaming DataFrame: its micro-batches run on every core
        return cores
    return max(1, min(partitions, cores))


_QUOTED_CONNECTORS = " | ".join(repr(name) for name in FIRST_PARTY)
