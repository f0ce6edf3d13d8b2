"""Run the engine inside one Spark task: one event loop and one client per task.

Spark hands a task an iterator of Arrow batches and expects an iterator back. The task's event
loop runs while the engine waits for room or for answers; the requests already sent stay in
flight while Spark hands the next batch over, so ``capacity`` requests are kept busy across
batch boundaries. The client is opened once and closed at the end, on success, on failure, and
when Spark stops reading early.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Iterator

import pyarrow as pa

from lookup_source.connectors.base import ConnectorConfig, LookupClient
from lookup_source.engine import EngineSpec, LookupEngine, LookupStats

log = logging.getLogger("lookup_source")

ClientFactory = Callable[[ConnectorConfig], LookupClient]


def run_lookups(
    batches: Iterable[pa.RecordBatch],
    spec: EngineSpec,
    config: ConnectorConfig,
    *,
    client_factory: ClientFactory | None = None,
    on_stats: Callable[[LookupStats], None] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Look up the keys of ``batches``; yield them with the value columns appended."""
    factory = client_factory or spec.options.connector_class()
    loop = asyncio.new_event_loop()
    client: LookupClient | None = None
    engine: LookupEngine | None = None
    try:
        client = factory(config)
        loop.run_until_complete(client.open())
        engine = LookupEngine(client, spec)
        for batch in batches:
            yield from loop.run_until_complete(engine.submit(batch))
        yield from loop.run_until_complete(engine.finish())
    finally:
        try:
            if engine is not None:
                loop.run_until_complete(engine.aclose())
            if client is not None:
                loop.run_until_complete(client.close())
            loop.run_until_complete(loop.shutdown_asyncgens())
        except Exception:  # never mask the task's own error with a failure to clean up
            log.warning(
                "asynclookup: closing the %s client failed", config.connector, exc_info=True
            )
        finally:
            loop.close()
        if engine is not None:
            if on_stats is not None:
                on_stats(engine.stats)
            log.debug("asynclookup task stats: %s", engine.stats)
