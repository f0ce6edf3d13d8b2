"""Run the engine inside one Spark task, on a loop and a client that live as long as the
worker (:mod:`lookup_source.engine.kept.worker`): opened by the first task, reused by the next ones.

Spark hands a task an iterator of Arrow batches and expects an iterator back. The loop runs
while the engine waits for room or for answers; the requests already sent stay in flight while
Spark hands the next batch over, so ``capacity`` requests are kept busy across batch boundaries.
When the task ends — on success, on failure, and when Spark stops reading early — what is still
in flight is cancelled and the client handed back: kept for the next task when it is sound,
closed otherwise.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator

import pyarrow as pa

import lookup_source.engine.telemetry as telemetry
from lookup_source.connector_api import ConnectorConfig
from lookup_source.connector_api.client import TableFacts
from lookup_source.engine.kept.clients import ClientFactory
from lookup_source.engine.kept.task_resources import TaskResources
from lookup_source.engine.kept.worker import Worker, current_worker
from lookup_source.engine.lookup_engine import LookupEngine
from lookup_source.engine.loop import LoopFactory
from lookup_source.engine.metrics import LookupMetrics
from lookup_source.engine.spec import EngineSpec

log = logging.getLogger("lookup_source")


class LookupTask:
    """The engine of one task, driven synchronously, batch by batch::

    task = LookupTask(spec, config)
    try:
        for batch in batches:
            yield from task.submit(batch)
        yield from task.finish()
    except BaseException:
        task.close(failed=True)
        raise
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
        keep_client: bool | None = None,
        loop_factory: LoopFactory | None = None,
        worker: Worker | None = None,
    ) -> None:
        self.config = config
        self._thread = threading.get_ident()
        self._spec = spec
        self._on_metrics = on_metrics
        self._engine: LookupEngine | None = None
        self._closed = False
        self._worker: Worker = worker or current_worker()
        self._resources = TaskResources.open(
            self._worker,
            spec,
            config,
            client_factory or spec.options.connector_class(),
            keep=keep_client,
            loop_factory=loop_factory,
        )
        self._loop = self._resources.loop
        try:
            self._engine = LookupEngine(self._resources.client, spec, **self._resources.parts())
        except BaseException:
            self.close(failed=True)
            raise

    @property
    def metrics(self) -> LookupMetrics | None:
        return self._engine.metrics if self._engine is not None else None

    def table_facts(self, run: str) -> TableFacts:
        """What the store says of its whole table (``LookupClient.table_facts``), asked through
        this task's client once per ``run`` in this worker: the tasks of one run share one
        answer, the next run asks again (:mod:`~lookup_source.engine.kept.table_facts`)."""
        client = self._resources.client
        return self._worker.table_facts.get(
            self._resources.identities.local.digest("table-facts"),
            run,
            lambda: self._loop.run(client.table_facts()),
        )

    def submit(self, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        """Look up ``batch``; the output that is ready, made batch by batch as it is read."""
        assert self._engine is not None
        ready = self._loop.run(self._engine.submit(batch))
        return (out for output in ready for out in output)

    def finish(self) -> Iterator[pa.RecordBatch]:
        """The output of what is still in flight, as it becomes ready."""
        assert self._engine is not None
        while True:
            ready, done = self._loop.run(self._engine.drain())
            for output in ready:
                yield from output
            if done:
                return

    def close(self, *, failed: bool = False) -> None:
        """Cancel what is in flight and hand the client back: kept for the next task unless
        the task ``failed`` or left a request behind. Safe to call twice. Called from another
        thread than the task's (an abandoned task's generator collected elsewhere), on the
        worker's loop: done by the task's thread when it next asks for its loop (that loop
        may be running there now)."""
        if self._closed:
            return
        if threading.get_ident() != self._thread and self._resources.lease.shares_loop:
            self._worker.defer(self._thread, lambda: self._close(failed))
            return
        self._close(failed)

    def _close(self, failed: bool) -> None:
        if self._closed:
            return
        self._closed = True
        sound = not failed
        try:
            if self._engine is not None:
                sound = self._loop.run(self._engine.aclose()) and sound
        except Exception:  # never mask the task's own error with a failure to clean up
            sound = False
            log.warning(
                "asynclookup: stopping the %s lookups failed", self.config.connector, exc_info=True
            )
        finally:
            self._resources.release(sound=sound)
        if self._engine is not None:
            metrics = self._engine.metrics
            metrics.peak_rss_mb = _peak_rss_mb()
            metrics.name = self._spec.name
            if self._on_metrics is not None:
                self._on_metrics(metrics)
            if self._resources.telemetry is not None:
                telemetry.record(
                    self._resources.telemetry,
                    metrics,
                    lookup=self._spec.name,
                    connector=self.config.connector,
                )
            log.debug("asynclookup task metrics: %s", metrics)


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
    keep_client: bool | None = None,
    loop_factory: LoopFactory | None = None,
    worker: Worker | None = None,
) -> Iterator[pa.RecordBatch]:
    """Look up the keys of ``batches``; yield them with the value columns appended.

    ``keep_client``: whether the loop and the client outlive the task
    (:mod:`lookup_source.engine.kept.clients`); by default, when Spark reuses this worker.
    ``loop_factory``: the task's own event loop, and so the engine's clock (tests give
    :class:`~lookup_source.testing.clock.VirtualTimeLoop`). ``worker``: what outlives the task (this
    process's by default; tests give one on virtual time)."""
    task = LookupTask(
        spec,
        config,
        client_factory=client_factory,
        on_metrics=on_metrics,
        keep_client=keep_client,
        loop_factory=loop_factory,
        worker=worker,
    )
    failed = True
    try:
        for batch in batches:
            yield from task.submit(batch)
        yield from task.finish()
        failed = False
    except GeneratorExit:  # Spark stopped reading: not a failure of the client
        failed = False
        raise
    finally:
        task.close(failed=failed)
