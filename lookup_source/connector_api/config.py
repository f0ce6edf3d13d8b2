"""What a connector is told about its lookup: :class:`ConnectorConfig`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from lookup_source.redaction import redact_url


@dataclass(frozen=True)
class ConnectorConfig:
    """Everything a connector is told about the lookup, in one type: its options, parsed, the
    core settings it may depend on, and the lookup's schema. Built on the driver; it pickles.

    Before the schema is known (``validate_options``, ``infer_schema``,
    ``batch_size_default``), the value columns are empty and ``key_columns`` holds what
    ``key.column`` says, if anything. A connector reads its own options through its typed
    constants: ``KEY_PATTERN.get(config)`` (:meth:`OptionSpec.get`)."""

    connector: str
    url: str | None
    key_columns: tuple[str, ...] = ()
    value_columns: tuple[str, ...] = ()
    value_types: tuple[pa.DataType, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    capacity: int = 100
    batch_size: int = 500
    timeout_s: float = 10.0
    key_types: tuple[pa.DataType, ...] = ()
    budget_in_flight: int = 0
    """The most requests the whole cluster may have in flight for this lookup
    (``budget.max-in-flight``; 0: no such budget): no worker needs more connections."""
    key_equality: str = "store"
    """``key.equality``: ``spark`` when the engine keeps only the matches whose own key equals
    the asked key (a SQL JOIN's lookups): a connector that can report each match's key as
    the store holds it (``Matches.keys``, :attr:`LookupClient.reports_keys`) should then."""

    @property
    def display_url(self) -> str | None:
        return redact_url(self.url) if self.url else None

    def value_type(self, column: str) -> pa.DataType:
        return self.value_types[self.value_columns.index(column)]

    def __repr__(self) -> str:  # never show a password in a plan, log or error
        return (
            f"ConnectorConfig(connector={self.connector!r}, url={self.display_url!r}, "
            f"key_columns={self.key_columns!r}, value_columns={self.value_columns!r}, "
            f"capacity={self.capacity}, batch_size={self.batch_size})"
        )


ConnectorOptions = ConnectorConfig
"""The name ``ConnectorConfig`` had, before the schema is known, in asynclookup 0.4 and
earlier: one type now (kept so that connectors written for 0.4 still import)."""
