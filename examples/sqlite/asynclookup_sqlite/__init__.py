"""An example third-party connector: look keys up in a SQLite table (``connector=sqlite``).

Written from the asynclookup README's "Your own connector" section alone, on the public
connector API. SQLite's driver is synchronous, so each request runs in a thread
(``asyncio.to_thread``) on a connection of its own, opened read-only. Options:

- ``url``: the database file's path;
- ``sqlite.table``: the table (or view) to read; keys are bound parameters, never SQL text.

A key may have several rows (several matches). Columns declared as arrays, structs or maps
in the schema hold JSON text in SQLite and are parsed; booleans are 0 or 1; dates and
timestamps are ISO text.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa

from lookup_source.connector_api import (
    ConnectorConfig,
    ConnectorError,
    Key,
    LookupClient,
    LookupResult,
    OptionError,
    OptionSpec,
    PermanentError,
    RecordError,
    TransientError,
    excerpt,
    parse_required_text,
    translated_errors,
)

__version__ = "0.1.0"

_TRANSIENT = ("locked", "busy", "unable to open", "disk i/o")


def classify(error: Exception) -> type[ConnectorError] | None:
    """What sqlite3's exceptions mean: a locked, busy or missing (not yet mounted) database may
    come back; anything else (no such table, a type error) will not."""
    if isinstance(error, sqlite3.OperationalError):
        text = str(error).lower()
        return TransientError if any(word in text for word in _TRANSIENT) else PermanentError
    if isinstance(error, sqlite3.Error):
        return PermanentError
    return None


SQLITE_ERRORS = translated_errors("sqlite3", classify)


def quote(name: str) -> str:
    """A SQL identifier, quoted: ``users`` -> ``"users"``."""
    return '"' + name.replace('"', '""') + '"'


TABLE: OptionSpec[str] = OptionSpec(
    "sqlite.table", parse_required_text, None, "The table (or view) to read."
)
"""Each option is declared once, as a typed constant, and read through it: ``TABLE.get(config)``."""


class SqliteLookupClient(LookupClient):
    """Looks keys up in a SQLite table, one read-only connection per request, in a thread."""

    name: ClassVar[str] = "sqlite"
    default_batch_size: ClassVar[int] = 200
    option_specs: ClassVar[tuple[OptionSpec, ...]] = (TABLE,)

    @classmethod
    def validate_options(cls, options: ConnectorConfig) -> None:
        """On the driver, before any task runs."""
        if not options.url:
            raise OptionError("url", "is required: the path of the SQLite database file")
        if not TABLE.get(options):
            raise OptionError("sqlite.table", "is required: the table to read")

    def __init__(self, config: ConnectorConfig) -> None:
        super().__init__(config)
        table = TABLE.get(config)
        keys = config.key_columns
        columns = ", ".join(quote(c) for c in (*keys, *config.value_columns))
        if len(keys) == 1:
            where = f"{quote(keys[0])} IN ({{marks}})"
            self._mark = "?"
        else:  # row values: (tenant, id) IN (VALUES (?, ?), ...)
            where = f"({', '.join(quote(k) for k in keys)}) IN (VALUES {{marks}})"
            self._mark = "(" + ", ".join("?" * len(keys)) + ")"
        self._query = f"SELECT {columns} FROM {quote(table)} WHERE {where}"
        # SQLite stores booleans as 0/1 and nested values as JSON text: convert those columns
        self._json_columns = set()
        self._bool_columns = set()
        for name, kind in zip(config.value_columns, config.value_types):
            if pa.types.is_nested(kind):
                self._json_columns.add(name)
            elif pa.types.is_boolean(kind):
                self._bool_columns.add(name)

    async def lookup(self, keys: Sequence[Key]) -> LookupResult:
        with SQLITE_ERRORS:
            return await asyncio.to_thread(self._select, list(keys))

    def _select(self, keys: list[Key]) -> dict[Key, Any]:
        width = len(self.config.key_columns)
        query = self._query.format(marks=", ".join([self._mark] * len(keys)))
        # composite keys are tuples, flattened into the (?, ?) row values
        parameters = [part for key in keys for part in key] if width > 1 else keys  # type: ignore[attr-defined]
        uri = Path(self.config.url or "").absolute().as_uri() + "?mode=ro"
        db = sqlite3.connect(uri, uri=True, timeout=self.config.timeout_s)
        try:
            rows = db.execute(query, parameters).fetchall()
        finally:
            db.close()
        found: dict[Key, list[Any]] = {}
        for row in rows:
            key = row[0] if width == 1 else tuple(row[:width])
            found.setdefault(key, []).append(self._record(row[width:]))
        return found

    def _record(self, values: Sequence[Any]) -> dict[str, Any] | RecordError:
        record = dict(zip(self.config.value_columns, values))
        for name in self._bool_columns:
            if record.get(name) in (0, 1):
                record[name] = bool(record[name])
        for name in self._json_columns:
            text = record.get(name)
            if text is not None:
                try:
                    record[name] = json.loads(text)
                except (TypeError, ValueError):
                    shown = excerpt(str(text))
                    return RecordError(f"column {name!r} does not hold JSON: {shown!r}")
        return record


__all__ = ["SqliteLookupClient", "__version__", "classify"]
