"""Read a whole table through a connector's scan, as typed Arrow batches."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

from lookup_source.arrow_values import null_out, typed_columns, value_failure
from lookup_source.connectors.base import ConnectorConfig, Key, LookupClient, Record
from lookup_source.options import ERROR_COLUMN, LookupOptions

SCAN_BATCH_ROWS = 10_000


def _build_batch(
    pairs: list[tuple[Key, Record]],
    key_fields: tuple[pa.Field, ...],
    value_fields: tuple[pa.Field, ...],
    options: LookupOptions,
    connector: str,
    address: str | None,
) -> pa.RecordBatch:
    keys = [key if isinstance(key, tuple) else (key,) for key, _ in pairs]
    errors: dict[int, str] = {}
    records: list[Record] = []
    for position, (key, record) in enumerate(pairs):
        if isinstance(record, Mapping):
            records.append(record)
        else:
            errors[position] = f"key {key!r}: {record}"
            records.append({})
    names = [key for key, _ in pairs]
    arrays = typed_columns(
        [(field, [k[index] for k in keys]) for index, field in enumerate(key_fields)]
        + [(field, [record.get(field.name) for record in records]) for field in value_fields],
        names,
        errors,
    )
    if errors and options.on_error == "fail":
        raise value_failure(errors, names, connector=connector, address=address)
    failed = set(errors)
    width = len(key_fields)
    arrays = arrays[:width] + [null_out(a, failed) for a in arrays[width:]]
    fields = list(key_fields) + list(value_fields)
    if options.error_column:
        arrays.append(pa.array([errors.get(i) for i in range(len(pairs))], type=pa.string()))
        fields.append(pa.field(ERROR_COLUMN, pa.string()))
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def scan_batches(
    client_class: type[LookupClient],
    config: ConnectorConfig,
    options: LookupOptions,
    key_fields: tuple[pa.Field, ...],
    value_fields: tuple[pa.Field, ...],
    partition: int,
    partitions: int,
) -> Iterator[pa.RecordBatch]:
    """Scan part ``partition`` of ``partitions``; one event loop and one client for the task."""
    loop = asyncio.new_event_loop()
    client = client_class(config)
    rows = client.scan(partition, partitions)
    try:
        loop.run_until_complete(client.open())

        async def fill(pairs: list[tuple[Key, Record]]) -> bool:
            async for pair in rows:
                pairs.append(pair)
                if len(pairs) >= SCAN_BATCH_ROWS:
                    return False
            return True

        done = False
        while not done:
            pairs: list[tuple[Key, Record]] = []
            done = loop.run_until_complete(fill(pairs))
            if pairs:
                yield _build_batch(
                    pairs, key_fields, value_fields, options, client.name, config.url
                )
    finally:
        try:
            aclose: Any = getattr(rows, "aclose", None)
            if aclose is not None:
                loop.run_until_complete(aclose())
            loop.run_until_complete(client.close())
        finally:
            loop.close()
