"""Run the engine inside one Spark task: one event loop and one client per task.

Spark hands a task an iterator of Arrow batches and expects an iterator back. The task's event
loop runs while the engine waits for room or for answers; the requests already sent stay in
flight while Spark hands the next batch over, so ``capacity`` requests are kept busy across
batch boundaries. The client is opened once and closed at the end, on success, on failure, and
when Spark stops reading early.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator

import pyarrow as pa

from lookup_source.connector_api import ConnectorConfig, LookupClient
from lookup_source.engine.cache import task_cache
from lookup_source.engine.loop import TaskLoop
from lookup_source.engine.metrics import LookupMetrics
from lookup_source.engine.operator import LookupEngine
from lookup_source.engine.spec import EngineSpec

log = logging.getLogger("lookup_source")

ClientFactory = Callable[[ConnectorConfig], LookupClient]


class LookupTask:
    """The engine of one task, driven synchronously, batch by batch::

    task = LookupTask(spec, config)
    try:
        for batch in batches:
            yield from task.submit(batch)
        yield from task.finish()
    finally:
        task.close()
    """

    def __init__(
        self,
        spec: EngineSpec,
        config: ConnectorConfig,
        *,
        client_factory: ClientFactory | None = None,
        on_metrics: Callable[[LookupMetrics], None] | None = None,
    ) -> None:
        self.config = config
        self._on_metrics = on_metrics
        self._loop = TaskLoop()
        self._client: LookupClient | None = None
        self._engine: LookupEngine | None = None
        self._closed = False
        try:
            factory = client_factory or spec.options.connector_class()
            self._client = factory(config)
            self._loop.run(self._client.open())
            cache = task_cache(
                spec.options.cache, config, self._client, self._loop, factory, spec.value_fields
            )
            self._engine = LookupEngine(self._client, spec, cache=cache)
        except BaseException:
            self.close()
            raise

    @property
    def metrics(self) -> LookupMetrics | None:
        return self._engine.metrics if self._engine is not None else None

    def submit(self, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        """Look up ``batch``; the output that is ready, made batch by batch as it is read."""
        assert self._engine is not None
        ready = self._loop.run(self._engine.submit(batch))
        return (out for output in ready for out in output)

    def finish(self) -> Iterator[pa.RecordBatch]:
        assert self._engine is not None
        ready = self._loop.run(self._engine.finish())
        return (out for output in ready for out in output)

    def close(self) -> None:
        """Cancel what is in flight, close the client and the loop. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        loop = self._loop
        try:
            if self._engine is not None:
                loop.run(self._engine.aclose())
            if self._client is not None:
                loop.run(self._client.close())
        except Exception:  # never mask the task's own error with a failure to clean up
            log.warning(
                "asynclookup: closing the %s client failed", self.config.connector, exc_info=True
            )
        finally:
            loop.close()
        if self._engine is not None:
            self._engine.metrics.peak_rss_mb = _peak_rss_mb()
            if self._on_metrics is not None:
                self._on_metrics(self._engine.metrics)
            log.debug("asynclookup task metrics: %s", self._engine.metrics)


def _peak_rss_mb() -> float:
    """Peak resident memory of this worker process so far (Linux reports KiB)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Windows
        return 0.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def run_lookups(
    batches: Iterable[pa.RecordBatch],
    spec: EngineSpec,
    config: ConnectorConfig,
    *,
    client_factory: ClientFactory | None = None,
    on_metrics: Callable[[LookupMetrics], None] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Look up the keys of ``batches``; yield them with the value columns appended."""
    task = LookupTask(spec, config, client_factory=client_factory, on_metrics=on_metrics)
    try:
        for batch in batches:
            yield from task.submit(batch)
        yield from task.finish()
    finally:
        task.close()
