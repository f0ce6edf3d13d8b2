"""The settings of a lookup: every option declared once on the field it fills, parsed once into
a typed, validated :class:`LookupOptions`.

A layer below the engine and the Spark surfaces, which both read it; it knows the connector API
and the registry, nothing of Spark. Its modules, one group each: ``declare`` (how an option is
declared), ``attempts`` (retries, hedges), ``cache`` (the caches), ``budget`` (a shared
budget), ``plan`` (planning and the data source's reads), ``lookup`` (:class:`LookupOptions`,
which holds them all) and ``parse`` (:func:`parse_options`).
"""

from lookup_source.settings.attempts import HedgeAfter, HedgeSettings, RetrySettings
from lookup_source.settings.budget import BudgetSettings
from lookup_source.settings.cache import CacheSettings, SharedCacheSettings
from lookup_source.settings.declare import (
    BUDGET_TASKS,
    CONNECTOR,
    FILTER_PUSHDOWN,
    KEY_COLUMN,
    KEYS,
    PARTITION_BY_KEY,
    RATE_LIMIT,
    RATE_LIMIT_TOTAL,
    SCAN_READER,
    SQL_JOIN_FUNCTION,
    STRATEGY,
    STRATEGY_BROADCAST_MAX_ROWS,
    STRATEGY_LOOKUP_MAX_INPUT_ROWS,
    CoreOption,
)
from lookup_source.settings.keys import KeySettings
from lookup_source.settings.lookup import ERROR_COLUMN, LookupOptions
from lookup_source.settings.parse import (
    CORE_OPTIONS,
    DECLARED,
    option_strings,
    option_text,
    parse_options,
)
from lookup_source.settings.plan import (
    DEFAULT_SCAN_PARTITIONS,
    KEYS_PER_PARTITION,
    PlanSettings,
    ReadSettings,
)

__all__ = [
    "BUDGET_TASKS",
    "CONNECTOR",
    "CORE_OPTIONS",
    "DECLARED",
    "DEFAULT_SCAN_PARTITIONS",
    "ERROR_COLUMN",
    "FILTER_PUSHDOWN",
    "KEYS",
    "KEYS_PER_PARTITION",
    "KEY_COLUMN",
    "PARTITION_BY_KEY",
    "RATE_LIMIT",
    "RATE_LIMIT_TOTAL",
    "SCAN_READER",
    "SQL_JOIN_FUNCTION",
    "STRATEGY",
    "STRATEGY_BROADCAST_MAX_ROWS",
    "STRATEGY_LOOKUP_MAX_INPUT_ROWS",
    "BudgetSettings",
    "CacheSettings",
    "CoreOption",
    "HedgeAfter",
    "HedgeSettings",
    "KeySettings",
    "LookupOptions",
    "PlanSettings",
    "ReadSettings",
    "RetrySettings",
    "SharedCacheSettings",
    "option_strings",
    "option_text",
    "parse_options",
]
