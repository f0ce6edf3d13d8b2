"""How Spark's own JDBC reader reads a connector's table, when it can: the fastest whole-table
scan there is on the JVM, where the store's JDBC driver is on Spark's classpath.

A connector whose store has a JDBC driver describes the read with :meth:`LookupClient.jdbc_table`
(a :class:`JdbcTable`), or raises :class:`JdbcUnavailable` saying why its options have no JDBC
form (a client key format the driver cannot read, a URL parameter it does not know...): the
table is then read through the ``asynclookup`` data source, as without a driver.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


class JdbcUnavailable(Exception):
    """Why a connector's table cannot be read by Spark's JDBC reader under these options."""


@dataclass(frozen=True)
class JdbcTable:
    """Spark's JDBC reader's options for the table: ``url`` (``jdbc:...``, no secret in it),
    ``table`` (quoted), the ``driver`` class, ``properties`` (user, password, TLS: secrets
    included, handed to Spark only, never written anywhere), and how to cut the read into
    parts: by the range of ``partition_column`` (one integer key), or by ``hash_predicate``
    (an SQL expression of the key with ``{parts}`` and ``{part}``, one predicate per part)."""

    url: str
    table: str
    driver: str
    properties: Mapping[str, str] = field(default_factory=dict, repr=False)
    partition_column: str | None = None
    hash_predicate: str | None = None
