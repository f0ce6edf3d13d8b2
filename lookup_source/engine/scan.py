"""Read a whole table through a connector's scan, as typed Arrow batches, in one Spark task (each
chunk made into rows by :mod:`lookup_source.engine.output.scan_rows`), on the worker's loop and
client."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from lookup_source.connector_api import ConnectorConfig, LookupClient, TableFacts
from lookup_source.engine.kept.identity import client_identity
from lookup_source.engine.kept.worker import current_worker
from lookup_source.engine.loop import TaskLoop, loop_kind
from lookup_source.engine.output.scan_rows import scan_rows
from lookup_source.settings import LookupOptions


def scan_batches(
    client_class: type[LookupClient],
    config: ConnectorConfig,
    options: LookupOptions,
    key_fields: tuple[pa.Field, ...],
    value_fields: tuple[pa.Field, ...],
    partition: int,
    partitions: int,
    split: Any = None,
) -> Iterator[pa.RecordBatch]:
    """Scan part ``partition`` of ``partitions`` (its ``split`` from :func:`scan_splits`, if
    any), on the worker's loop and client (:mod:`lookup_source.engine.kept.worker`)."""
    worker = current_worker()
    lease = worker.lease_client(
        client_class,
        config,
        identity=client_identity(client_class, config, keys=worker.identity_keys),
        max_idle_s=options.connection_max_idle_s,
        max_age_s=options.connection_max_age_s,
        loop_kind=loop_kind(options.loop, client_class.preferred_loop),
    )
    client, loop = lease.client, lease.loop
    sound = False
    try:
        parts = (
            client.scan_arrow(partition, partitions)
            if split is None  # (a connector without scan_splits may not take the argument)
            else client.scan_arrow(partition, partitions, split=split)
        )
        for keys, matches in loop.iterate(parts):
            yield scan_rows(
                keys,
                matches,
                key_fields,
                value_fields,
                on_error=options.on_error,
                connector=client.name,
                address=config.url,
            )
        sound = True
    finally:
        # a scan abandoned part-way may leave a cursor open: its client is not reused
        lease.release(reusable=sound)


def scan_splits(
    client_class: type[LookupClient], config: ConnectorConfig, partitions: int
) -> list[Any] | None:
    """The connector's splits of a scan into ``partitions`` parts (``LookupClient.scan_splits``),
    asked once when the read is planned; None when it has none (or there is one part)."""
    if partitions < 2 or client_class.scan_splits is LookupClient.scan_splits:
        return None
    with TaskLoop() as loop, loop.opened(client_class(config)) as client:
        splits = loop.run(client.scan_splits(partitions))
    if splits is None:
        return None
    splits = list(splits)
    if len(splits) != partitions:
        raise TypeError(
            f"connector {client.name!r} returned {len(splits)} scan splits for "
            f"{partitions} partitions"
        )
    return splits


def estimate_rows(client_class: type[LookupClient], config: ConnectorConfig) -> int | None:
    """About how many rows the table holds (``LookupClient.estimate_rows``), asked on the
    driver; None when the connector cannot tell."""
    if client_class.estimate_rows is LookupClient.estimate_rows:
        return None
    with TaskLoop() as loop, loop.opened(client_class(config)) as client:
        estimate = loop.run(client.estimate_rows())
    return None if estimate is None else max(0, int(estimate))


def keys_match_exactly(client_class: type[LookupClient], config: ConnectorConfig) -> bool:
    """Whether a lookup of ``config`` finds every row Spark's join would and no other, asked on
    the driver: for a connector that reports its rows' keys (``reports_keys``: the engine drops
    the matches of other keys), whether every key reaches the store as itself
    (``LookupClient.keys_sent_exactly``); for another, whether the store matches keys exactly
    as Spark compares them (``LookupClient.keys_match_exactly``)."""
    if client_class.reports_keys:
        if client_class.keys_sent_exactly is LookupClient.keys_sent_exactly:
            return True
        ask = "keys_sent_exactly"
    elif client_class.keys_match_exactly is LookupClient.keys_match_exactly:
        return client_class.exact_key_match(config)
    else:
        ask = "keys_match_exactly"
    with TaskLoop() as loop, loop.opened(client_class(config)) as client:
        return bool(loop.run(getattr(client, ask)()))


def table_facts(client_class: type[LookupClient], config: ConnectorConfig) -> TableFacts:
    """What the store says of its whole table (``LookupClient.table_facts``), asked on the
    driver or by a task."""
    if client_class.table_facts is LookupClient.table_facts:
        return TableFacts()
    with TaskLoop() as loop, loop.opened(client_class(config)) as client:
        facts = loop.run(client.table_facts())
    return facts if isinstance(facts, TableFacts) else TableFacts()
