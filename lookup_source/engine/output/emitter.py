"""A task's output side (:class:`Emitter`): the queue that says what may leave (:mod:`.queue`),
the builder that makes it (:mod:`.builder`), and the count of rows held back meanwhile — the
engine takes input only while they stay under its budget."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pyarrow as pa

from lookup_source.engine.intake.batches import BatchEntry, Request
from lookup_source.engine.metrics import LookupMetrics
from lookup_source.engine.output.builder import OutputBuilder
from lookup_source.engine.output.queue import OutputQueue
from lookup_source.engine.request.retry import FinalFailure


class Emitter:
    """Builds a task's output as its queue releases it, in batches of at most
    ``output_rows``; ``fail`` fails the task (a value that cannot be output under
    ``on.error=fail``, a connector's bug)."""

    def __init__(
        self,
        queue: OutputQueue,
        builder: OutputBuilder,
        metrics: LookupMetrics,
        output_rows: int,
        fail: Callable[[BaseException], None],
    ) -> None:
        self.queue = queue
        self.buffered_rows = 0
        """Rows the task holds back: its batches' input rows, then their matches."""
        self._builder = builder
        self._metrics = metrics
        self._output_rows = output_rows
        self._fail = fail

    def put(self, job: BatchEntry) -> None:
        """A batch arrives: it waits in the queue, its rows held back."""
        self.queue.put(job)
        self.buffered_rows += job.held_rows

    def complete(self, job: BatchEntry) -> None:
        """All of ``job``'s lookups are done."""
        self.queue.complete(job, self._build_whole)

    def _build_whole(self, job: BatchEntry) -> bool:
        """Build a whole batch's output (when its queue asks); False if that failed the task."""
        try:
            job.output = self._builder.build(job)
        except Exception as exc:
            self._fail(exc)
            return False
        finally:
            self._metrics.failed_keys += job.keys_with_bad_values
            job.parts, job.failed_parts = [], []  # in its output now (and no cycle is kept)
        job.held_rows += job.output.held_rows  # its matches wait with it until emitted
        self.buffered_rows += job.output.held_rows
        return True

    def ready(self) -> list[Iterator[pa.RecordBatch]]:
        """The output of what may leave now (whole batches, or the rows of answered keys),
        each made lazily in batches of at most ``output_rows`` rows; stops at a failure."""
        ready = []
        for release in self.queue.pop_ready():
            job = release.job
            if release.last:
                self.buffered_rows -= job.held_rows
            if release.positions is None:
                assert job.output is not None
                ready.append(job.output.batches(self._output_rows))
                job.output = None
                continue
            bad_before = job.keys_with_bad_values
            try:
                output = self._builder.build_part(job, release.positions, release.nulls)
            except Exception as exc:
                self._fail(exc)
                break
            finally:
                self._metrics.failed_keys += job.keys_with_bad_values - bad_before
            if output.num_rows:
                ready.append(output.batches(self._output_rows))
        return ready

    def request_failed(
        self, request: Request, failure: FinalFailure, current: BaseException | None
    ) -> BaseException | None:
        """A request failed for good: its keys' rows as ``on.error`` says; the error that
        fails the task (``on.error=fail``), else None (``current``: the task's failure)."""
        keys = request.python_keys()
        self._metrics.failed_requests += 1
        self._metrics.failed_keys += len(keys) + request.shared_keys()
        return self._builder.request_failed(
            failure.error, failure.attempts, keys, request.targets(), current
        )
