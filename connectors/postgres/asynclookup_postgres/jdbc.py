"""The Postgres table as Spark's own JDBC reader (pgjdbc, ``org.postgresql.Driver``) reads it:
the connector's URL, password and TLS options mapped to the driver's properties.

What has no faithful JDBC form raises :class:`JdbcUnavailable` with the reason (the table is
then read through the ``asynclookup`` data source): a custom query, several hosts or a Unix
socket, a URL parameter the mapping does not know, TLS that trusts the system's CAs (pgjdbc
reads them otherwise than libpq), a client key in PEM (pgjdbc reads PKCS-8 DER or PKCS-12).
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from asynclookup_postgres.catalog import quote_identifier, split_table_name
from asynclookup_postgres.options import JDBC_KEY_FILE, TABLE
from lookup_source.connector_api import (
    ConnectorConfig,
    JdbcTable,
    JdbcUnavailable,
    TlsSettings,
    password_from_env,
)

DRIVER = "org.postgresql.Driver"

# libpq's URL parameters and pgjdbc's names for them
_PARAMETERS = {
    "sslmode": "sslmode",
    "sslrootcert": "sslrootcert",
    "sslcert": "sslcert",
    "sslkey": "sslkey",
    "sslpassword": "sslpassword",
    "connect_timeout": "connectTimeout",
    "application_name": "ApplicationName",
}
_KEY_FORMATS = (".pk8", ".der", ".p12", ".pfx")
_INTEGERS = ("int8", "int16", "int32", "int64")


def jdbc_table(config: ConnectorConfig) -> JdbcTable:
    """Spark's JDBC reader's options for ``config``'s table (see the module's doc)."""
    table = TABLE.get(config)
    if not table:
        raise JdbcUnavailable("lookups through postgres.query have no table to read")
    url = config.url or ""
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise JdbcUnavailable("the URL is not a postgresql:// URL")
    host = parts.hostname
    if not host or "," in parts.netloc:
        raise JdbcUnavailable("the URL names no host, or several (pgjdbc takes one here)")
    user = (
        unquote(parts.username) if parts.username else os.environ.get("PGUSER") or getpass.getuser()
    )
    database = unquote(parts.path.lstrip("/")) or user  # libpq's default: the user's name
    properties: dict[str, str] = {"user": user}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name == "user":
            properties["user"] = value
        elif name == "password":
            properties["password"] = value
        elif name == "dbname":
            database = value
        elif name in _PARAMETERS:
            properties[_PARAMETERS[name]] = value
        else:
            raise JdbcUnavailable(f"the URL parameter {name!r} has no JDBC counterpart here")
    if parts.password:
        properties["password"] = unquote(parts.password)
    password = password_from_env("postgres", config.options)  # read on the driver
    if password is not None:
        properties["password"] = password
    elif "password" not in properties and os.environ.get("PGPASSWORD"):
        properties["password"] = os.environ["PGPASSWORD"]  # as libpq reads it
    properties.update(_tls(config.options, properties))
    if properties.get("sslkey", "").lower().endswith((".key", ".pem")):
        raise JdbcUnavailable("pgjdbc reads a client key in PKCS-8 DER or PKCS-12, not PEM")
    keys = [quote_identifier(name) for name in config.key_columns]
    integer = (
        len(keys) == 1 and str(config.key_types[0]) in _INTEGERS if config.key_types else False
    )
    row = keys[0] if len(keys) == 1 else f"row({', '.join(keys)})"
    return JdbcTable(
        url=f"jdbc:postgresql://{_host(host)}:{parts.port or 5432}/{database}",
        table=".".join(quote_identifier(p) for p in split_table_name(table)),
        driver=DRIVER,
        properties=properties,
        partition_column=keys[0] if integer else None,
        hash_predicate=None
        if integer
        else f"mod(abs(hashtext(({row})::text)::bigint), {{parts}}) = {{part}}",
    )


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host  # an IPv6 address


def _tls(options: Mapping[str, Any], given: Mapping[str, str]) -> dict[str, str]:
    """The ``postgres.tls.*`` options as pgjdbc's properties (the URL's own win)."""
    tls = TlsSettings.from_options("postgres", options)
    if not tls.configured:
        return {}
    if not tls.ca_file:
        raise JdbcUnavailable(
            "TLS without postgres.tls.ca-file trusts the system's CAs, which pgjdbc reads "
            "otherwise than libpq"
        )
    mapped = {
        "sslmode": "verify-full" if tls.check_hostname else "verify-ca",
        "sslrootcert": tls.ca_file,
    }
    if tls.cert_file:
        key = JDBC_KEY_FILE.get(options) or tls.key_file
        if not key or not key.lower().endswith(_KEY_FORMATS):
            raise JdbcUnavailable(
                "pgjdbc reads a client key in PKCS-8 DER or PKCS-12, not PEM: give it as "
                "postgres.tls.jdbc-key-file"
            )
        mapped.update(sslcert=tls.cert_file, sslkey=key)
        password = tls.key_password()
        if password is not None:
            mapped["sslpassword"] = password
    return {name: value for name, value in mapped.items() if name not in given}
