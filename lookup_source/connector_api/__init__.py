"""The public connector API: everything a connector is built on, and nothing else.

A connector (built-in or third-party) imports only from here. It is a leaf of the package: it
imports nothing of Spark, of the engine or of the options parser, only pyarrow, numpy,
msgspec and the exception tree::

    import pyarrow as pa

    from lookup_source.connector_api import LookupClient, Matches, OptionSpec, parse_text


    class DictClient(LookupClient):
        name = "dict"
        option_specs = (OptionSpec("dict.table", parse_text, None, "Which table."),)

        async def lookup(self, keys):  # the record form: {key: record}
            return {k: TABLE[k] for k in keys if k in TABLE}

- a budget's coordinator (:class:`BudgetCoordinator`, with :class:`BudgetLimits`,
  :class:`BudgetAsk` and :class:`BudgetGrant`), and a shared cache tier's store
  (:class:`SharedCacheStore`): plugins found by URL scheme;
- :class:`LookupClient`: the base class (``lookup`` or ``lookup_arrow``, ``open``, ``close``,
  ``scan`` or ``scan_arrow``), given a :class:`ConnectorConfig` (``ConnectorOptions`` before the
  schema is known);
- :class:`Matches`: the columnar answer; ``records_to_matches`` and ``to_arrow_column`` convert
  Python values with the checks the engine applies; ``JsonColumns`` decodes JSON documents
  into typed columns in native code; ``python_keys`` and ``match_rows`` handle keys;
- :class:`OptionSpec` and its parsers; :class:`KeyTemplate`; :func:`secret_from_env`;
- the kit every connector shares: :func:`require_url`, :func:`password_env_option` and
  :func:`password_from_env`, :func:`excerpt` (of a bad answer), :func:`error_rows`,
  :func:`scanned_keys`, :func:`pooled` (a connection dropped when an exchange is in doubt);
- Spark's own JDBC reader of a connector's table (:class:`JdbcTable`,
  :class:`JdbcUnavailable`, ``LookupClient.jdbc_table``);
- TLS: :func:`tls_option_specs` (the ``<name>.tls.*`` options), :class:`TlsSettings` (their
  ``ssl.SSLContext``), :func:`tls_failure` (a certificate problem as an error naming the
  option to fix) and :func:`handshake_check` (a TLS 1.3 refusal that showed as a reset
  connection, named all the same);
- the errors a connector raises: :class:`TransientError` (retried; :class:`OverloadedError`
  when the store says it has too much to do), :class:`PermanentError`
  (not retried), :class:`RecordError` (one key's value is malformed). Translate your library's
  exceptions into these at the connector's boundary (:func:`translated_errors`): the engine
  never sees them; :func:`is_retryable` and :func:`failure_kind` are the one rule of what is
  retried; :func:`redact_url` hides a password in a URL you put in a message.
"""

from lookup_source.connector_api.boundary import (
    Classifier,
    translate_error,
    translated_errors,
)
from lookup_source.connector_api.budget import (
    BUDGET_COORDINATOR_GROUP,
    BudgetAsk,
    BudgetConflictError,
    BudgetCoordinator,
    BudgetGrant,
    BudgetLimits,
)
from lookup_source.connector_api.client import (
    SCAN_CHUNK_ROWS,
    Key,
    LookupClient,
    LookupResult,
    Record,
    TableFacts,
)
from lookup_source.connector_api.config import ConnectorConfig, ConnectorOptions
from lookup_source.connector_api.jdbc import JdbcTable, JdbcUnavailable
from lookup_source.connector_api.json_columns import DECODE_ERRORS, JsonColumns
from lookup_source.connector_api.keys import encode_rows, match_rows, python_keys
from lookup_source.connector_api.kit import (
    EXCERPT_CHARS,
    error_rows,
    excerpt,
    password_env_option,
    password_from_env,
    pooled,
    require_url,
    scanned_keys,
)
from lookup_source.connector_api.matches import Matches, value_batch
from lookup_source.connector_api.options import (
    INT_LIMIT,
    OptionSpec,
    Parser,
    choice,
    int_between,
    parse_bool,
    parse_column_list,
    parse_keys,
    parse_non_negative_int,
    parse_positive_int,
    parse_rate,
    parse_required_text,
    parse_text,
)
from lookup_source.connector_api.ranges import KeyRange, key_columns_of, ranges_of
from lookup_source.connector_api.retryable import failure_kind, is_retryable
from lookup_source.connector_api.secrets import secret_from_env
from lookup_source.connector_api.shared_cache import SHARED_CACHE_GROUP, SharedCacheStore
from lookup_source.connector_api.templates import KeyTemplate, key_text
from lookup_source.connector_api.tls import (
    HandshakeCheck,
    TlsSettings,
    handshake_check,
    handshake_refusal,
    tls_failure,
    tls_option_specs,
)
from lookup_source.connector_api.values import (
    as_records,
    cast_strings,
    conform_column,
    conform_matches,
    convert_columns,
    describe_type,
    records_from_matches,
    records_to_matches,
    to_arrow_column,
)
from lookup_source.errors import (
    ConfigurationError,
    ConnectorError,
    LookupTimeoutError,
    OptionError,
    OverloadedError,
    PermanentError,
    RecordError,
    SchemaError,
    TransientError,
)
from lookup_source.redaction import Redactor, redact_url

__all__ = [
    "BUDGET_COORDINATOR_GROUP",
    "DECODE_ERRORS",
    "EXCERPT_CHARS",
    "INT_LIMIT",
    "SCAN_CHUNK_ROWS",
    "SHARED_CACHE_GROUP",
    "BudgetAsk",
    "BudgetConflictError",
    "BudgetCoordinator",
    "BudgetGrant",
    "BudgetLimits",
    "Classifier",
    "ConfigurationError",
    "ConnectorConfig",
    "ConnectorError",
    "ConnectorOptions",
    "HandshakeCheck",
    "JdbcTable",
    "JdbcUnavailable",
    "JsonColumns",
    "Key",
    "KeyRange",
    "KeyTemplate",
    "LookupClient",
    "LookupResult",
    "LookupTimeoutError",
    "Matches",
    "OptionError",
    "OptionSpec",
    "OverloadedError",
    "Parser",
    "PermanentError",
    "Record",
    "RecordError",
    "Redactor",
    "SchemaError",
    "SharedCacheStore",
    "TableFacts",
    "TlsSettings",
    "TransientError",
    "as_records",
    "cast_strings",
    "choice",
    "conform_column",
    "conform_matches",
    "convert_columns",
    "describe_type",
    "encode_rows",
    "error_rows",
    "excerpt",
    "failure_kind",
    "handshake_check",
    "handshake_refusal",
    "int_between",
    "is_retryable",
    "key_columns_of",
    "key_text",
    "match_rows",
    "parse_bool",
    "parse_column_list",
    "parse_keys",
    "parse_non_negative_int",
    "parse_positive_int",
    "parse_rate",
    "parse_required_text",
    "parse_text",
    "password_env_option",
    "password_from_env",
    "pooled",
    "python_keys",
    "ranges_of",
    "records_from_matches",
    "records_to_matches",
    "redact_url",
    "require_url",
    "scanned_keys",
    "secret_from_env",
    "tls_failure",
    "tls_option_specs",
    "to_arrow_column",
    "translate_error",
    "translated_errors",
    "value_batch",
]
