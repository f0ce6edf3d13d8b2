"""asynclookup: asynchronous I/O lookup joins for Apache Spark.

>>> from lookup_source import AsyncLookupDataSource, lookup_join   # doctest: +SKIP
"""

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
    PermanentError,
    RecordError,
    SchemaError,
    TransientError,
)
from lookup_source.metrics import LookupMetrics, log_metrics, lookup_metrics
from lookup_source.options import LookupOptions, parse_options

if TYPE_CHECKING:
    from lookup_source.datasource import AsyncLookupDataSource
    from lookup_source.join import lookup_join
    from lookup_source.sql import register_lookup_table

__version__ = "0.1.0"

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
    "PermanentError",
    "RecordError",
    "SchemaError",
    "TransientError",
    "__version__",
    "log_metrics",
    "lookup_join",
    "lookup_metrics",
    "parse_options",
    "register_lookup_table",
]


def __getattr__(name: str) -> Any:
    # The Spark-facing parts import pyspark; load them on first use only.
    if name == "AsyncLookupDataSource":
        from lookup_source.datasource import AsyncLookupDataSource

        return AsyncLookupDataSource
    if name == "lookup_join":
        from lookup_source.join import lookup_join

        return lookup_join
    if name == "register_lookup_table":
        from lookup_source.sql import register_lookup_table

        return register_lookup_table
    raise AttributeError(f"module 'lookup_source' has no attribute {name!r}")
