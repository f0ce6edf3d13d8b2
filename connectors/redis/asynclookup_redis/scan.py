"""A Redis keyspace as a table: how many keys the key pattern matches (:func:`count_keys`, for
``strategy=auto``), and which scanned keys lookups reach (:func:`reachable_keys`)."""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa

from lookup_source.connector_api import ConnectorConfig, KeyTemplate, conform_column

log = logging.getLogger("lookup_source")

COUNTED_KEYS = 1_000_000
"""Up to this many keys in the database, those matching the key pattern are counted exactly."""

SAMPLE_KEYS = 20_000
"""Beyond: keys sampled by ``SCAN`` to estimate how many match the key pattern."""


async def count_keys(redis: Any, template: KeyTemplate) -> int:
    """The keys matching the key ``template``: counted by ``SCAN MATCH`` when the database
    holds at most :data:`COUNTED_KEYS` keys, else the database's size times the share of a
    sample of ``SCAN`` that matches."""
    total = int(await redis.dbsize())
    glob, regex = template.scan_pattern()

    def matches(key: bytes) -> bool:
        return regex.fullmatch(key.decode("utf-8", "surrogateescape")) is not None

    if total <= COUNTED_KEYS:
        counted = 0
        async for key in redis.scan_iter(match=glob, count=1_000):
            counted += matches(key)
        return counted
    seen = matched = 0
    cursor = 0
    while True:
        cursor, found = await redis.scan(cursor, count=1_000)
        seen += len(found)
        matched += sum(matches(key) for key in found)
        if not cursor:
            return matched  # the whole keyspace was walked
        if seen >= SAMPLE_KEYS:
            return round(total * matched / seen)


async def any_key(redis: Any, template: KeyTemplate) -> bool:
    """Whether a key matches the key ``template``: ``SCAN MATCH`` until the first one (the
    whole keyspace walked when there is none, as a scan of the table would)."""
    glob, regex = template.scan_pattern()
    async for key in redis.scan_iter(match=glob, count=1_000):
        if regex.fullmatch(key.decode("utf-8", "surrogateescape")) is not None:
            return True
    return False


def reachable_keys(
    keys: pa.RecordBatch, texts: list[str], config: ConnectorConfig, template: KeyTemplate
) -> pa.RecordBatch:
    """The scanned keys a lookup can reach: a Redis key whose parts read as the declared
    key types but are written otherwise (``user:05`` for the long key 5, whose lookup asks
    ``user:5``) belongs to no key of this table, and is left out (``texts`` with it), so
    that a scan (Spark's join) and lookups (a SQL JOIN's rewrite) see the same rows. A part
    that does not read as its type at all is kept: the scan reports it."""
    types = config.key_types
    if not types or all(t is None or pa.types.is_string(t) for t in types):
        return keys
    typed = []
    unread: set[int] = set()
    for column, name, kind in zip(keys.columns, keys.schema.names, types):
        if kind is None:
            typed.append(column)
            continue
        array, bad = conform_column(column, pa.field(name, kind))
        typed.append(array)
        unread |= set(bad)
    readable = [i for i in range(keys.num_rows) if i not in unread]
    batch = pa.RecordBatch.from_arrays(typed, names=keys.schema.names)
    rendered = dict(zip(readable, template.render_all(batch.take(pa.array(readable, pa.int64())))))
    keep = [i in unread or rendered[i] == text for i, text in enumerate(texts)]
    if all(keep):
        return keys
    log.debug(
        "asynclookup redis: the scan leaves out %d keys no lookup reaches",
        keep.count(False),
    )
    texts[:] = [text for text, kept in zip(texts, keep) if kept]
    return keys.filter(pa.array(keep))
