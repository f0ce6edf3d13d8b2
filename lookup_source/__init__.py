"""asynclookup: asynchronous I/O lookup joins for Apache Spark.

>>> from lookup_source import AsyncLookupDataSource, lookup_join   # doctest: +SKIP
"""

import logging
from typing import TYPE_CHECKING, Any

from lookup_source.connector_api import ConnectorConfig, LookupClient, Matches
from lookup_source.errors import (
    AsyncLookupError,
    ConfigurationError,
    ConnectorError,
    ConnectorNotFoundError,
    LookupFailedError,
    LookupTimeoutError,
    OptionError,
    OverloadedError,
    PermanentError,
    RecordError,
    SchemaError,
    TransientError,
    UnsupportedSparkError,
)
from lookup_source.redaction import install_log_redaction

install_log_redaction(logging.getLogger("lookup_source"))  # no secret in any log of ours

if TYPE_CHECKING:
    from lookup_source.engine.metrics import LookupMetrics
    from lookup_source.settings import LookupOptions, parse_options
    from lookup_source.spark.datasource import AsyncLookupDataSource
    from lookup_source.spark.join import lookup_join
    from lookup_source.spark.metrics import log_metrics, lookup_metrics
    from lookup_source.spark.progress import progress_metrics
    from lookup_source.spark.source_registry import register_data_source
    from lookup_source.spark.sql import register_lookup_table
    from lookup_source.spark.sql_extension import enable_sql_joins

__version__ = "0.3.0"

__all__ = [
    "AsyncLookupDataSource",
    "AsyncLookupError",
    "ConfigurationError",
    "ConnectorConfig",
    "ConnectorError",
    "ConnectorNotFoundError",
    "LookupClient",
    "LookupFailedError",
    "LookupMetrics",
    "LookupOptions",
    "LookupTimeoutError",
    "Matches",
    "OptionError",
    "OverloadedError",
    "PermanentError",
    "RecordError",
    "SchemaError",
    "TransientError",
    "UnsupportedSparkError",
    "__version__",
    "enable_sql_joins",
    "log_metrics",
    "lookup_join",
    "lookup_metrics",
    "parse_options",
    "progress_metrics",
    "register_data_source",
    "register_lookup_table",
]


_LAZY = {  # name -> the module that defines it, imported on first use
    "LookupMetrics": "lookup_source.engine.metrics",
    "LookupOptions": "lookup_source.options",
    "parse_options": "lookup_source.options",
    "AsyncLookupDataSource": "lookup_source.spark.datasource",
    "lookup_join": "lookup_source.spark.join",
    "register_lookup_table": "lookup_source.spark.sql",
    "register_data_source": "lookup_source.spark.source_registry",
    "enable_sql_joins": "lookup_source.spark.sql_extension",
    "lookup_metrics": "lookup_source.spark.metrics",
    "log_metrics": "lookup_source.spark.metrics",
    "progress_metrics": "lookup_source.spark.progress",
}


def __getattr__(name: str) -> Any:
    # The Spark layer imports pyspark, the engine the options parser: load each on first use
    # only, so that the connector API and the engine import without what they do not need.
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'lookup_source' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
