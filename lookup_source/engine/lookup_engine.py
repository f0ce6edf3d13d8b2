"""The async lookup engine: pure asyncio and Arrow, no Spark.

:class:`LookupEngine` only conducts: it takes Arrow record batches, finds each batch's distinct
non-null keys, asks what the task already knows (:mod:`lookup_source.engine.intake.known_answers`:
the worker's cache, the shared tier), shares the keys that a request in flight already asks
(:mod:`lookup_source.engine.intake.inflight`), groups the rest into requests of at most
``batch.size`` keys, keeps at most the limit's requests in flight
(:mod:`lookup_source.engine.request.slots`, :mod:`lookup_source.engine.request.limit`), each run by
the request executor (:mod:`lookup_source.engine.request.executor`: the retry loop, with pacing,
feedback and hedging around each call), and hands each batch to the output side
(:mod:`lookup_source.engine.output.emitter`), whose queue (:mod:`lookup_source.engine.output.queue`)
owns each entry's progress and says what leaves, built by
:mod:`lookup_source.engine.output.builder`. Input is taken only while a request slot is free and the
rows held back stay under a budget: memory is bounded whatever the size of the input.

It is driven batch by batch::

    engine = LookupEngine(client, spec, **resources.parts())  # the task's: kept/task_resources.py
    for batch in batches:
        for output in await engine.submit(batch):
            for out in output:          # bounded batches, made one at a time
                ...
    for output in await engine.finish():
        ...
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import random
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from lookup_source.connector_api import ConnectorError, LookupClient
from lookup_source.engine.intake.batches import BatchEntry, Request
from lookup_source.engine.intake.inflight import InFlightKeys, deliver
from lookup_source.engine.intake.known_answers import KnownAnswers
from lookup_source.engine.kept.cache_layer import CacheLayer
from lookup_source.engine.kept.shared_cache import SharedTier
from lookup_source.engine.metrics import LookupMetrics
from lookup_source.engine.output.builder import OutputBuilder
from lookup_source.engine.output.emitter import Emitter
from lookup_source.engine.output.queue import OutputQueue, output_queue
from lookup_source.engine.request.answers import Answer
from lookup_source.engine.request.budget import TaskBudget
from lookup_source.engine.request.deadline import cancel_abandoned
from lookup_source.engine.request.executor import RequestExecutor
from lookup_source.engine.request.hedge import Hedging
from lookup_source.engine.request.limit import limit_of
from lookup_source.engine.request.retry import FinalFailure
from lookup_source.engine.request.slots import RequestSlots
from lookup_source.engine.spec import EngineSpec
from lookup_source.redaction import Redactor

STRAY_CANCELLATION = (
    "the request was cancelled, though not by asynclookup (a cancellation the client left "
    "behind): its keys have no answer"
)

MIN_BUFFER_ROWS = 20_000
"""Input rows a task may hold back at least, whatever its capacity and batch size."""


class LookupEngine:
    """Looks up the keys of Arrow batches through one :class:`LookupClient`."""

    def __init__(
        self,
        client: LookupClient,
        spec: EngineSpec,
        *,
        rng: random.Random | None = None,
        buffer_rows: int | None = None,
        cache: CacheLayer | None = None,
        hedging: Hedging | None = None,
        shared: SharedTier | None = None,
        metrics: LookupMetrics | None = None,
        budget: TaskBudget | None = None,
        redact: Redactor,
    ) -> None:
        options = spec.options
        if spec.pushed_ranges and not (client.columnar and client.takes_ranges(client.config)):
            spec = dataclasses.replace(spec, pushed_ranges=())  # the conditions judge alone
        self.client = client
        self.spec = spec
        self.metrics = metrics or LookupMetrics(tasks=1)
        self._fields = list(spec.value_fields)
        self._key_names = list(client.config.key_columns) or list(spec.key_columns)
        self._budget = budget
        limit = limit_of(
            options.capacity,
            adaptive=options.capacity_adaptive,
            tolerance=options.capacity_latency_tolerance,
        )
        self._slots = RequestSlots(limit, self.metrics, self._raise_if_failed)
        self._failure: BaseException | None = None
        self._requests = RequestExecutor.of(
            client,
            options,
            self._slots,
            self.metrics,
            self._fields,
            hedging=hedging,
            budget=budget,
            rng=rng,
            redact=redact,
        )
        self._batch_size = options.batch_size
        self._columnar = client.columnar
        self._buffer_rows = buffer_rows or max(
            2 * options.capacity * options.batch_size, MIN_BUFFER_ROWS
        )
        self._queue: OutputQueue = output_queue(options.output_mode)
        output = OutputBuilder(
            options,
            self._fields,
            how=spec.how,
            matched_column=spec.matched_column,
            output_fields=spec.output_fields,
            conditions=spec.match_conditions,
            connector=client.name,
            address=client.config.url,
            redact=redact,
        )
        self._emitter = Emitter(self._queue, output, self.metrics, spec.output_rows, self._fail)
        # ranges sent with the keys: an answer is its batch's alone, neither cached nor shared
        self._shares = not spec.pushed_ranges
        self._known = (
            KnownAnswers(cache, shared, self.metrics, self._queue)
            if self._shares
            else KnownAnswers(None, None, self.metrics, self._queue)
        )
        self._numbers = itertools.count()
        self._in_flight_keys: InFlightKeys[Request] = InFlightKeys()
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    # -- public API ----------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        return self._slots.in_flight

    @property
    def buffered_rows(self) -> int:
        """Rows held back now: input rows of batches not yet out, and their matches."""
        return self._emitter.buffered_rows

    async def submit(self, batch: pa.RecordBatch) -> list[Iterator[pa.RecordBatch]]:
        """Start the lookups of ``batch``; return the output of the batches that are ready
        (each an iterator of bounded batches, made as it is read).

        Returns once all of the batch's requests are in flight and there is room for more
        input: a free request slot and fewer buffered rows than the budget.
        """
        self._raise_if_failed()
        job = self._new_job(batch)
        self._emitter.put(job)
        to_fetch = self._known.from_cache(job)
        wanted, shared = (
            self._in_flight_keys.share(job, to_fetch) if self._shares else (to_fetch, 0)
        )
        self.metrics.shared_keys += shared
        wanted = await self._known.from_shared(job, wanted)
        size = self._batch_size
        job.expect((len(wanted) + size - 1) // size)
        job.seal()  # nothing more is asked for it: it completes when its requests end
        # a columnar client takes its keys in Arrow: taken once for the batch, then sliced
        keys = job.keys_at(wanted) if self._columnar and len(wanted) > size else None
        for start in range(0, len(wanted), size):
            if self._failure is not None or not self._slots.free():
                await self._slots.wait_until(self._slots.free)
            chosen = None if keys is None else keys.slice(start, size)
            self._start_request(job, wanted[start : start + size], chosen)
        await self._slots.wait_until(self._has_room)
        return self._ready()

    async def finish(self) -> list[Iterator[pa.RecordBatch]]:
        """Wait for every outstanding lookup; return the output of the remaining batches."""
        await self._slots.wait_until(self._queue.all_done)
        return self._ready()

    async def drain(self) -> tuple[list[Iterator[pa.RecordBatch]], bool]:
        """After the last batch: wait until some output may leave, or every lookup is done;
        return that output and whether everything has left. Called until it says so, it
        hands the output on as it becomes ready, not all at the end."""
        await self._slots.wait_until(lambda: self._queue.all_done() or self._queue.has_ready())
        ready = self._ready()
        return ready, not len(self._queue)

    async def aclose(self) -> bool:
        """Cancel whatever is still in flight (after a failure, or when output is abandoned);
        return whether every request ended (none was left behind ignoring its cancellation)."""
        self._closed = True
        await self._known.aclose(flush=self._failure is None)  # the tier's last writes
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._requests.timer.close()
        await cancel_abandoned(self._requests.abandoned)
        if self._budget is not None:  # every lease back to the coordinator
            await self._budget.aclose()
        return not any(not future.done() for future in self._requests.abandoned)

    # -- scheduling ----------------------------------------------------------------------------

    def _has_room(self) -> bool:
        if not self._slots.free():
            return False
        return self._queue.unfinished() <= 1 or self._emitter.buffered_rows < self._buffer_rows

    def _ready(self) -> list[Iterator[pa.RecordBatch]]:
        ready = self._emitter.ready()
        self._raise_if_failed()
        return ready

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _fail(self, error: BaseException) -> None:
        if self._failure is None:
            self._failure = error
        self._slots.notify()

    # -- a batch's keys ------------------------------------------------------------------------

    def _new_job(self, batch: pa.RecordBatch) -> BatchEntry:
        job = BatchEntry.of(
            next(self._numbers), batch, self.spec, self._key_names, on_complete=self._completed
        )
        self.metrics.rows += batch.num_rows
        self.metrics.keys += len(job.distinct)
        self.metrics.null_keys += job.distinct.indices.null_count
        return job

    def _completed(self, job: BatchEntry) -> None:
        """A batch's lookups are all done: its output is built, unless the task stops."""
        if not self._closed and self._failure is None:
            self._emitter.complete(job)

    # -- one request ---------------------------------------------------------------------------

    def _start_request(
        self, job: BatchEntry, positions: np.ndarray, keys: pa.RecordBatch | None = None
    ) -> None:
        request = Request(job, positions, _keys=keys)
        self._slots.occupy()
        self._in_flight_keys.add(request, request.keys)
        task = asyncio.get_running_loop().create_task(self._run(request))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, request: Request) -> None:
        try:
            try:
                answer = await self._requests.run(request)
            except FinalFailure as failure:
                self._request_failed(request, failure)
            except asyncio.CancelledError:
                if self._closed:
                    raise
                # a cancellation the engine never asked for (a client's, leaked): the keys
                # fail, as any error of the request does; never completed without an answer
                self._request_failed(request, FinalFailure(ConnectorError(STRAY_CANCELLATION), 1))
            else:
                self._answered(request, answer)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug in a connector's result must not hang the task
            self._fail(exc)
        finally:
            self._slots.release()
            self._in_flight_keys.discard(request)
            self._queue.request_done(request.targets)
            for job in request.jobs():
                job.settle()
            request.subscribers = []  # done: what it delivered owes it nothing (no cycle)

    def _answered(self, request: Request, answer: Answer) -> None:
        """Keep what the cache should know of ``answer``; hand it to every batch waiting."""
        self._known.keep(answer)
        self.metrics.missing_keys += deliver(request, answer)

    def _request_failed(self, request: Request, failure: FinalFailure) -> None:
        failing = self._emitter.request_failed(request, failure, self._failure)
        if failing is not None and failing is not self._failure:
            self._failure = failing
            self._slots.notify()
