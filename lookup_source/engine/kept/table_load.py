"""The whole table in a :class:`~lookup_source.engine.kept.cache.FullCache`: loaded through the
connector's scan (:func:`load_table`), and reloaded when due (:func:`reload_table`, in a thread
the worker tracks)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from lookup_source.connector_api import Key, LookupClient
from lookup_source.connector_api.keys import encode_rows, python_keys
from lookup_source.engine.kept.cache import FullCache
from lookup_source.engine.kept.clients import close_quietly
from lookup_source.engine.loop import TaskLoop
from lookup_source.engine.output.scan_rows import scan_rows
from lookup_source.engine.request.answers import CachedError, CachedRows
from lookup_source.settings import ERROR_COLUMN

log = logging.getLogger("lookup_source")


async def load_table(
    client: LookupClient, key_fields: Sequence[pa.Field], value_fields: Sequence[pa.Field]
) -> dict[Key, Any]:
    """Read the whole table through ``client.scan_arrow()``: key -> :class:`CachedRows` (all
    its rows, in one Arrow batch for the whole table) or :class:`CachedError` (a malformed
    value, reported for the key each time it is looked up, until the next reload)."""
    chunks = []
    async for keys, matches in client.scan_arrow(0, 1):
        chunks.append(
            scan_rows(
                keys,
                matches,
                key_fields,
                value_fields,
                on_error="column",
                connector=client.name,
                address=client.config.url,
                name_keys=False,  # the engine names the key as it is asked
            )
        )
    if not chunks:
        return {}
    rows = pa.Table.from_batches(chunks).combine_chunks().to_batches()[0]
    width = len(key_fields)
    codes = encode_rows(rows.columns[:width])
    order = np.argsort(codes, kind="stable")
    order = order[codes[order] >= 0]  # a key that did not convert can never be asked
    rows = rows.take(pa.array(order))
    codes = codes[order]
    _, starts, counts = np.unique(codes, return_index=True, return_counts=True)
    keys = python_keys(rows.select(list(range(width))))
    values = rows.select([f.name for f in value_fields])
    errors = rows.column(ERROR_COLUMN).to_pylist()
    table: dict[Key, Any] = {}
    for start, count in zip(starts.tolist(), counts.tolist()):
        failure = next((e for e in errors[start : start + count] if e), None)
        table[keys[start]] = CachedError(failure) if failure else CachedRows(values, start, count)
    return table


def reload_table(
    cache: FullCache,
    factory: Callable[[], LookupClient],
    key_fields: Sequence[pa.Field],
    value_fields: Sequence[pa.Field],
) -> None:
    """Reload ``cache`` with a loop and a client of its own (the worker runs this in a thread
    it tracks); a failure is logged and the old table kept. Never raises: the client's close
    is bounded and a failure to close is logged (:func:`~.clients.close_quietly`)."""
    with TaskLoop() as loop:
        client = None
        try:
            client = factory()
            loop.run(client.open())
            cache.install(loop.run(load_table(client, key_fields, value_fields)))
        except Exception:
            log.warning(
                "asynclookup: reloading the full cache failed; keeping the old table",
                exc_info=True,
            )
            cache.release_reload()
        finally:
            if client is not None:
                close_quietly(loop, client, client.config)
