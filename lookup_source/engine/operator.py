"""The async lookup engine: pure asyncio and Arrow, no Spark.

:class:`LookupEngine` conducts: it takes Arrow record batches, finds each batch's distinct
non-null keys, asks the cache (:mod:`.cache`), shares the keys that a request in flight already
asks (:mod:`.inflight`), groups the rest into requests of at most ``batch.size`` keys, keeps at
most ``capacity`` of them in flight (:mod:`.limit`), each run by the request executor
(:mod:`.executor`, with :mod:`.retry`'s policy), and emits each batch, in the order
:mod:`.queue` says, with what :mod:`.output` makes of its answers. Input is taken only while a
request slot is free and the rows held back stay under a budget: memory is bounded whatever the
size of the input.

It is driven batch by batch::

    engine = LookupEngine(client, spec)
    for batch in batches:
        for output in await engine.submit(batch):
            for out in output:          # bounded batches, made one at a time
                ...
    for output in await engine.finish():
        ...
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa

from lookup_source.connector_api import LookupClient
from lookup_source.engine.answers import Answer, Part
from lookup_source.engine.batches import Job, Request
from lookup_source.engine.budget import TaskBudget
from lookup_source.engine.cache_layer import CacheLayer
from lookup_source.engine.deadline import RequestDeadline, cancel_abandoned
from lookup_source.engine.executor import RequestExecutor
from lookup_source.engine.hedge import Hedging
from lookup_source.engine.identity import secret_values
from lookup_source.engine.inflight import InFlightKeys, deliver
from lookup_source.engine.limit import AdaptiveLimit, ConcurrencyLimit, FixedLimit
from lookup_source.engine.metrics import LookupMetrics
from lookup_source.engine.output import OutputBuilder
from lookup_source.engine.queue import OutputQueue, output_queue
from lookup_source.engine.rate_limit import RateLimiter
from lookup_source.engine.retry import FinalFailure, RetryPolicy, Sleep
from lookup_source.engine.shared_cache import SharedTier
from lookup_source.engine.spec import EngineSpec
from lookup_source.redaction import Redactor

MIN_BUFFER_ROWS = 20_000
"""Input rows a task may hold back at least, whatever its capacity and batch size."""


class LookupEngine:
    """Looks up the keys of Arrow batches through one :class:`LookupClient`."""

    def __init__(
        self,
        client: LookupClient,
        spec: EngineSpec,
        *,
        sleep: Sleep = asyncio.sleep,
        rng: random.Random | None = None,
        buffer_rows: int | None = None,
        cache: CacheLayer | None = None,
        hedging: Hedging | None = None,
        shared: SharedTier | None = None,
        metrics: LookupMetrics | None = None,
        budget: TaskBudget | None = None,
    ) -> None:
        options = spec.options
        self.client = client
        self.spec = spec
        self.metrics = metrics or LookupMetrics(tasks=1)
        self._fields = list(spec.value_fields)
        self._key_names = list(client.config.key_columns) or list(spec.key_columns)
        self._cache = cache
        self._shared = shared
        self._budget = budget
        if hedging is None and options.hedge.after is not None:
            hedging = Hedging.of(options.hedge)
        redact = Redactor(secret_values(client.config))  # messages never quote our secrets
        self._concurrency: ConcurrencyLimit = (
            AdaptiveLimit(options.capacity, tolerance=options.capacity_latency_tolerance)
            if options.capacity_adaptive
            else FixedLimit(options.capacity)
        )
        if self._concurrency.adaptive:
            self.metrics.record_limit(time.time(), self._concurrency.value)
        self._requests = RequestExecutor(
            client,
            RetryPolicy(options.retry),
            deadline=RequestDeadline.factory(options.timeout_s, options.deadline_s),
            limit=self._concurrency,
            limit_changed=self._limit_changed,
            in_flight=lambda: self._in_flight,
            metrics=self.metrics,
            fields=self._fields,
            rate_limiter=RateLimiter(options.rate_limit, sleep=sleep)
            if options.rate_limit
            else None,
            sleep=sleep,
            rng=rng,
            hedging=hedging,
            hedge_slot=(self._take_slot, self._give_slot),
            redact=redact,
            budget=budget,
        )
        self._output = OutputBuilder(
            options,
            self._fields,
            how=spec.how,
            connector=client.name,
            address=client.config.url,
            redact=redact,
        )
        self._batch_size = options.batch_size
        self._columnar = client.columnar
        self._buffer_rows = buffer_rows or max(
            2 * options.capacity * options.batch_size, MIN_BUFFER_ROWS
        )
        self._queue: OutputQueue = output_queue(options.output_mode)
        self._numbers = itertools.count()
        self._in_flight_keys: InFlightKeys[Request] = InFlightKeys()
        self._tasks: set[asyncio.Task[None]] = set()
        self._in_flight = 0
        self._hedges_waiting = 0
        self._buffered_rows = 0
        self._failure: BaseException | None = None
        self._changed: asyncio.Event | None = None
        self._closed = False

    # -- public API ----------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        return self._in_flight

    async def submit(self, batch: pa.RecordBatch) -> list[Iterator[pa.RecordBatch]]:
        """Start the lookups of ``batch``; return the output of the batches that are ready
        (each an iterator of bounded batches, made as it is read).

        Returns once all of the batch's requests are in flight and there is room for more
        input: a free request slot and fewer buffered rows than the budget.
        """
        self._raise_if_failed()
        job = self._new_job(batch)
        self._queue.put(job)
        self._buffered_rows += job.held_rows
        to_fetch = self._from_cache(job)
        if self._queue.partial and len(to_fetch) < len(job.distinct):
            known = np.ones(len(job.distinct), dtype=bool)
            known[to_fetch] = False
            self._queue.answered(job, np.flatnonzero(known))  # the cache's answers
        wanted, shared = self._in_flight_keys.share(job, to_fetch)
        self.metrics.shared_keys += shared
        if self._shared is not None and len(wanted):
            job.pending += 1  # not complete while the shared tier is asked
            try:
                wanted = await self._from_shared(job, wanted)
            finally:
                job.pending -= 1
        size = self._batch_size
        job.pending += (len(wanted) + size - 1) // size
        if job.pending == 0:
            self._complete(job)
        # a columnar client takes its keys in Arrow: taken once for the batch, then sliced
        keys = job.keys_at(wanted) if self._columnar and len(wanted) > size else None
        for start in range(0, len(wanted), size):
            if self._failure is not None or not self._slot_free():
                await self._wait_until(self._slot_free)
            chosen = None if keys is None else keys.slice(start, size)
            self._start_request(job, wanted[start : start + size], chosen)
        await self._wait_until(self._has_room)
        return self._take_ready()

    async def finish(self) -> list[Iterator[pa.RecordBatch]]:
        """Wait for every outstanding lookup; return the output of the remaining batches."""
        await self._wait_until(self._queue.all_done)
        return self._take_ready()

    async def drain(self) -> tuple[list[Iterator[pa.RecordBatch]], bool]:
        """After the last batch: wait until some output may leave, or every lookup is done;
        return that output and whether everything has left. Called until it says so, it
        hands the output on as it becomes ready, not all at the end."""
        await self._wait_until(lambda: self._queue.all_done() or self._queue.has_ready())
        ready = self._take_ready()
        return ready, not len(self._queue)

    async def aclose(self) -> bool:
        """Cancel whatever is still in flight (after a failure, or when output is abandoned);
        return whether every request ended (none was left behind ignoring its cancellation)."""
        self._closed = True
        if self._shared is not None:  # the last answers' writes, unless the task failed
            await self._shared.aclose(flush=self._failure is None)
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

    def _slot_free(self) -> bool:
        """Whether a new request may start (a hedge waiting for a slot goes first)."""
        return self._in_flight + self._hedges_waiting < self._concurrency.value

    def _has_room(self) -> bool:
        if not self._slot_free():
            return False
        return self._queue.unfinished() <= 1 or self._buffered_rows < self._buffer_rows

    async def _wait_until(self, condition: Callable[[], bool]) -> None:
        if self._changed is None:
            self._changed = asyncio.Event()
        while True:
            self._raise_if_failed()
            if condition():
                return
            self._changed.clear()
            await self._changed.wait()

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _fail(self, error: BaseException) -> None:
        if self._failure is None:
            self._failure = error
        self._notify()

    async def _take_slot(self) -> None:
        """Wait for a free request slot and take it (for a hedge: before any new request)."""
        self._hedges_waiting += 1
        try:
            await self._wait_until(lambda: self._in_flight < self._concurrency.value)
        finally:
            self._hedges_waiting -= 1
        self._occupy()

    def _occupy(self) -> None:
        """One more request in flight (a new one, or a hedge)."""
        self._in_flight += 1
        self.metrics.peak_in_flight = max(self.metrics.peak_in_flight, self._in_flight)

    def _give_slot(self) -> None:
        self._in_flight -= 1
        self._notify()

    def _limit_changed(self, changed: bool) -> None:
        if changed:
            self.metrics.record_limit(time.time(), self._concurrency.value)
            self._notify()  # a higher limit frees slots

    # -- a batch's keys ------------------------------------------------------------------------

    def _new_job(self, batch: pa.RecordBatch) -> Job:
        job = Job.of(next(self._numbers), batch, self.spec, self._key_names)
        self.metrics.rows += batch.num_rows
        self.metrics.keys += len(job.distinct)
        self.metrics.null_keys += job.distinct.indices.null_count
        return job

    def _from_cache(self, job: Job) -> np.ndarray:
        """Answer what the cache knows; return the positions of the keys still to fetch."""
        if self._cache is None or not len(job.distinct):
            return np.arange(len(job.distinct), dtype=np.int64)
        known = self._cache.lookup(job.python_keys(), self._fields)
        job.parts.extend(known.parts)
        self.metrics.cache_hits += known.hits
        self.metrics.cache_misses += known.misses
        self.metrics.missing_keys += known.missing
        return known.wanted

    async def _from_shared(self, job: Job, wanted: np.ndarray) -> np.ndarray:
        """Answer what the shared tier knows of the keys at ``wanted`` (also kept in the
        worker's cache); return the positions still to fetch."""
        assert self._shared is not None
        everything = job.python_keys()
        known = await self._shared.lookup([everything[p] for p in wanted.tolist()])
        for part in known.parts:
            job.parts.append(Part(wanted[part.positions], part.answer))
            if self._cache is not None:
                self._cache.store(part.answer, ttl_s=known.ttl_s)  # its time left
        self.metrics.missing_keys += known.missing
        if self._queue.partial and len(known.wanted) < len(wanted):
            answered = np.ones(len(wanted), dtype=bool)
            answered[known.wanted] = False
            self._queue.answered(job, wanted[answered])
        return wanted[known.wanted]

    # -- one request ---------------------------------------------------------------------------

    def _start_request(
        self, job: Job, positions: np.ndarray, keys: pa.RecordBatch | None = None
    ) -> None:
        request = Request(job, positions, _keys=keys)
        self._occupy()
        self._in_flight_keys.add(request, request.keys)
        task = asyncio.ensure_future(self._run(request))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, request: Request) -> None:
        try:
            try:
                answer = await self._requests.run(request)
            except FinalFailure as failure:
                self._request_failed(request, failure)
            else:
                self._answered(request, answer)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug in a connector's result must not hang the task
            self._fail(exc)
        finally:
            self._in_flight -= 1
            self._in_flight_keys.discard(request)
            if self._queue.partial:
                for job, positions in request.targets():
                    self._queue.answered(job, positions)
            for job in request.jobs():
                job.pending -= 1
                if job.pending == 0 and not self._closed and self._failure is None:
                    self._complete(job)
            request.subscribers = []  # done: what it delivered owes it nothing (no cycle)
            self._notify()

    def _answered(self, request: Request, answer: Answer) -> None:
        """Keep what the cache should know of ``answer``; hand it to every batch waiting."""
        if self._cache is not None:
            self._cache.store(answer)
        if self._shared is not None:
            self._shared.store(answer)
        self.metrics.missing_keys += deliver(request, answer)

    def _request_failed(self, request: Request, failure: FinalFailure) -> None:
        keys = request.python_keys()
        self.metrics.failed_requests += 1
        self.metrics.failed_keys += len(keys) + request.shared_keys()
        failing = self._output.request_failed(
            failure.error, failure.attempts, keys, request.targets(), self._failure
        )
        if failing is not None and failing is not self._failure:
            self._failure = failing
            self._notify()

    # -- output --------------------------------------------------------------------------------

    def _complete(self, job: Job) -> None:
        if self._queue.partial:  # its rows leave in parts, as their keys are answered
            job.done = True
            self._queue.complete(job)
            return
        try:
            job.output = self._output.build(job)
        except Exception as exc:
            self._fail(exc)
            return
        finally:
            self.metrics.failed_keys += job.keys_with_bad_values
            job.parts, job.failed_parts = [], []  # in its output now (and no cycle is kept)
        job.done = True
        job.held_rows += job.output.held_rows  # its matches wait with it until emitted
        self._buffered_rows += job.output.held_rows
        self._queue.complete(job)

    def _take_ready(self) -> list[Iterator[pa.RecordBatch]]:
        """The output of what may leave now (whole batches, or the rows of answered keys),
        each made lazily in batches of at most ``output_rows`` rows."""
        ready = []
        for release in self._queue.pop_ready():
            job = release.job
            if release.last:
                self._buffered_rows -= job.held_rows
            if release.positions is None:
                assert job.output is not None
                ready.append(job.output.batches(self.spec.output_rows))
                job.output = None
                continue
            bad_before = job.keys_with_bad_values
            try:
                output = self._output.build_part(job, release.positions, release.nulls)
            except Exception as exc:
                self._fail(exc)
                break
            finally:
                self.metrics.failed_keys += job.keys_with_bad_values - bad_before
            if output.num_rows:
                ready.append(output.batches(self.spec.output_rows))
        self._raise_if_failed()
        return ready
