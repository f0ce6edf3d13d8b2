"""The async lookup engine: pure asyncio and Arrow, no Spark.

:class:`LookupEngine` takes Arrow record batches, finds each batch's distinct non-null keys,
groups them into requests of at most ``batch.size`` keys, keeps at most ``capacity`` requests in
flight (retrying failed attempts with backoff), and emits each batch with the value columns
appended. Input is taken only while a request slot is free and the rows held back stay under a
budget: memory is bounded whatever the size of the input.

A key that a request of an earlier batch is already asking is not asked again: the later batch
waits for that answer (``shared_keys`` in the metrics). Answers travel as Arrow
(:class:`~lookup_source.connectors.base.Matches`) and are joined to the input rows with
vectorised code (:mod:`lookup_source.output`); connectors that answer in the record form have
their records of one batch converted together.

It is driven batch by batch::

    engine = LookupEngine(client, spec)
    for batch in batches:
        for out in await engine.submit(batch):
            ...
    for out in await engine.finish():
        ...
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from lookup_source.connector_api import LookupClient, Matches
from lookup_source.connector_api.keys import python_keys
from lookup_source.connector_api.values import conform_matches, records_to_matches
from lookup_source.engine.cache import MISSING, CachedError, CachedRows, cache_rows, cached_matches
from lookup_source.engine.deadline import (
    RequestDeadline,
    cancel_abandoned,
    with_deadline,
    with_timeout,
)
from lookup_source.engine.inflight import InFlightKeys
from lookup_source.engine.keys import DistinctKeys, cast_key_column, distinct_keys
from lookup_source.engine.limit import AdaptiveLimit, ConcurrencyLimit, FixedLimit
from lookup_source.engine.metrics import LookupMetrics
from lookup_source.engine.output import concat_matches, join_matches, value_failure
from lookup_source.engine.queue import OutputQueue, output_queue
from lookup_source.engine.rate_limit import RateLimiter
from lookup_source.engine.retry import RetryPolicy
from lookup_source.errors import LookupFailedError, LookupTimeoutError, OverloadedError
from lookup_source.options import ERROR_COLUMN, LookupOptions

Sleep = Callable[[float], Awaitable[Any]]


@dataclass(frozen=True)
class EngineSpec:
    """What the engine needs besides the client: which input columns hold the key, which value
    columns to append, and the options. Plain values only, so it pickles."""

    options: LookupOptions
    key_columns: tuple[str, ...]
    value_fields: tuple[pa.Field, ...]
    key_types: tuple[pa.DataType | None, ...] = ()
    how: str = "left"

    def __post_init__(self) -> None:
        if self.how not in ("left", "inner"):
            raise ValueError(f"how must be 'left' or 'inner', got {self.how!r}")

    def output_fields(self) -> list[pa.Field]:
        fields = list(self.value_fields)
        if self.options.error_column:
            fields.append(pa.field(ERROR_COLUMN, pa.string()))
        return fields


class _FinalFailure(Exception):
    def __init__(self, error: BaseException, attempts: int) -> None:
        super().__init__(str(error))
        self.error = error
        self.attempts = attempts


def describe_error(error: BaseException) -> str:
    text = str(error).strip()
    name = type(error).__name__
    return f"{name}: {text}" if text else name


@dataclass(eq=False)
class _RecordPart:
    """Answers in the record form for some of a batch's keys, converted when the batch ends."""

    positions: np.ndarray
    keys: list[Any]
    result: Mapping[Any, Any]


@dataclass(eq=False)
class _Job:
    """One input batch on its way through the engine."""

    number: int
    batch: pa.RecordBatch
    distinct: DistinctKeys
    parts: list[Matches] = field(default_factory=list)
    record_parts: list[_RecordPart] = field(default_factory=list)
    pending: int = 0
    output: pa.RecordBatch | None = None
    done: bool = False
    _python_keys: list[Any] | None = None

    def python_keys(self) -> list[Any]:
        if self._python_keys is None:
            self._python_keys = python_keys(self.distinct.keys)
        return self._python_keys


@dataclass(eq=False)
class _Request:
    """One request: some distinct keys of one batch, and the later batches sharing it."""

    keys: pa.RecordBatch
    owner: _Job
    positions: np.ndarray
    subscribers: list[tuple[_Job, np.ndarray, np.ndarray]] = field(default_factory=list)
    _python_keys: list[Any] | None = None

    def python_keys(self) -> list[Any]:
        if self._python_keys is None:
            everything = self.owner.python_keys()
            self._python_keys = [everything[p] for p in self.positions.tolist()]
        return self._python_keys


def _absent(value: Any) -> bool:
    """Whether a record-form value means "no match": None, or an empty list of records."""
    return value is None or (isinstance(value, (list, tuple)) and not value)


_Answer = Matches | Mapping[Any, Any]
"""A request's answer: columnar (index = rows of the request's keys) or the record form."""


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
        cache: Any = None,
    ) -> None:
        options = spec.options
        self.client = client
        self.spec = spec
        self.stats = LookupMetrics(tasks=1)
        self._fields = list(spec.value_fields)
        self._key_names = list(client.config.key_columns) or list(spec.key_columns)
        self._columnar = client.columnar
        self._cache = cache
        self._cache_missing = options.cache.missing_keys
        self._limit: ConcurrencyLimit = (
            AdaptiveLimit(options.capacity, tolerance=options.capacity_latency_tolerance)
            if options.capacity_adaptive
            else FixedLimit(options.capacity)
        )
        if self._limit.adaptive:
            self.stats.record_limit(time.time(), self._limit.value)
        self._batch_size = options.batch_size
        self._timeout_s = options.timeout_ms / 1000.0
        self._deadline_s = options.deadline_ms / 1000.0
        self._retry = RetryPolicy(options.retry, retry_on_miss=options.retry_on_miss)
        self._sleep = sleep
        self._rng = rng
        self._limiter = RateLimiter(options.rate_limit, sleep=sleep) if options.rate_limit else None
        self._buffer_rows = buffer_rows or max(2 * options.capacity * options.batch_size, 20_000)
        self._queue: OutputQueue[_Job] = output_queue(options.ordered)
        self._numbers = itertools.count()
        self._in_flight_keys: InFlightKeys[_Request] = InFlightKeys()
        self._tasks: set[asyncio.Task[None]] = set()
        self._abandoned: set[asyncio.Future[Any]] = set()
        self._cheap_deadline = bool(getattr(client, "honours_cancellation", False))
        self._in_flight = 0
        self._buffered_rows = 0
        self._failure: BaseException | None = None
        self._changed: asyncio.Event | None = None
        self._closed = False

    # -- public API ----------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        return self._in_flight

    async def submit(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        """Start the lookups of ``batch``; return the output batches that are ready.

        Returns once all of the batch's requests are in flight and there is room for more
        input: a free request slot and fewer buffered rows than the budget.
        """
        self._raise_if_failed()
        job = self._new_job(batch)
        self._queue.put(job)
        self._buffered_rows += batch.num_rows
        wanted = self._from_cache(job)
        wanted = self._share_in_flight(job, wanted)
        size = self._batch_size
        job.pending += (len(wanted) + size - 1) // size
        if job.pending == 0:
            self._complete(job)
        for start in range(0, len(wanted), size):
            await self._wait_until(lambda: self._in_flight < self._limit.value)
            self._start_request(job, wanted[start : start + size])
        await self._wait_until(self._has_room)
        return self._take_ready()

    async def finish(self) -> list[pa.RecordBatch]:
        """Wait for every outstanding lookup; return the remaining output batches in order."""
        await self._wait_until(self._queue.all_done)
        return self._take_ready()

    async def aclose(self) -> None:
        """Cancel whatever is still in flight (after a failure, or when output is abandoned)."""
        self._closed = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        await cancel_abandoned(self._abandoned)

    # -- scheduling ----------------------------------------------------------------------------

    def _has_room(self) -> bool:
        if self._in_flight >= self._limit.value:
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

    def _new_job(self, batch: pa.RecordBatch) -> _Job:
        spec = self.spec
        columns = []
        for position, name in enumerate(spec.key_columns):
            array = batch.column(name)
            if isinstance(array, pa.ChunkedArray):
                array = array.combine_chunks()
            key_type = spec.key_types[position] if position < len(spec.key_types) else None
            columns.append(cast_key_column(array, key_type, name))
        distinct = distinct_keys(columns, self._key_names)
        self.stats.rows += batch.num_rows
        self.stats.keys += len(distinct)
        self.stats.null_keys += distinct.indices.null_count
        return _Job(next(self._numbers), batch, distinct)

    def _from_cache(self, job: _Job) -> np.ndarray:
        """Answer what the cache knows; return the positions of the keys still to fetch."""
        everything = np.arange(len(job.distinct), dtype=np.int64)
        if self._cache is None or not len(everything):
            return everything
        keys = job.python_keys()
        hits = self._cache.get_many(keys)
        if not hits:
            self.stats.cache_misses += len(keys)
            return everything
        wanted: list[int] = []
        columnar: list[tuple[int, CachedRows | CachedError]] = []
        records: dict[Any, Any] = {}
        record_positions: list[int] = []
        for position, key in enumerate(keys):
            value = hits.get(key)
            if value is None:
                wanted.append(position)
            elif value is MISSING:
                self.stats.missing_keys += 1
            elif isinstance(value, (CachedRows, CachedError)):
                columnar.append((position, value))
            else:
                records[key] = value
                record_positions.append(position)
        if columnar:
            hits = cached_matches(columnar, self._fields)
            job.parts.append(self._with_key_messages(hits, job.python_keys))
        if records:
            positions = np.asarray(record_positions, dtype=np.int64)
            job.record_parts.append(_RecordPart(positions, [keys[p] for p in positions], records))
        self.stats.cache_hits += len(keys) - len(wanted)
        self.stats.cache_misses += len(wanted)
        return np.asarray(wanted, dtype=np.int64)

    def _share_in_flight(self, job: _Job, wanted: np.ndarray) -> np.ndarray:
        """Subscribe ``job`` to the requests in flight that already ask some of its keys;
        return the positions still to ask."""
        if not len(self._in_flight_keys) or not len(wanted):
            return wanted
        keys = job.distinct.keys
        probe = keys if len(wanted) == keys.num_rows else keys.take(pa.array(wanted))
        shared = self._in_flight_keys.find(probe)
        if not shared:
            return wanted
        taken = np.zeros(len(wanted), dtype=bool)
        for request, rows, request_rows in shared:
            request.subscribers.append((job, wanted[rows], request_rows))
            job.pending += 1
            taken[rows] = True
        self.stats.shared_keys += int(taken.sum())
        return wanted[~taken]

    def _start_request(self, job: _Job, positions: np.ndarray) -> None:
        keys = job.distinct.keys
        if len(positions) == keys.num_rows:
            chosen = keys
        elif positions[-1] - positions[0] + 1 == len(positions):  # contiguous: no copy
            chosen = keys.slice(int(positions[0]), len(positions))
        else:
            chosen = keys.take(pa.array(positions))
        request = _Request(chosen, job, positions)
        self._in_flight += 1
        self.stats.peak_in_flight = max(self.stats.peak_in_flight, self._in_flight)
        self._in_flight_keys.add(request, chosen)
        task = asyncio.ensure_future(self._run(request))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- one request ---------------------------------------------------------------------------

    async def _run(self, request: _Request) -> None:
        try:
            try:
                answer = await self._lookup_with_retry(request)
            except _FinalFailure as failure:
                self._request_failed(request, failure)
            else:
                self._deliver(request, answer)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug in a connector's result must not hang the task
            self._fail(exc)
        finally:
            self._in_flight -= 1
            self._in_flight_keys.discard(request)
            for job in [request.owner] + [s[0] for s in request.subscribers]:
                job.pending -= 1
                if job.pending == 0 and not self._closed and self._failure is None:
                    self._complete(job)
            self._notify()

    async def _attempt(self, request: _Request, rows: np.ndarray | None, limit_s: float) -> Any:
        """One call to the client for the request's keys (or the given rows of them), for at
        most ``limit_s`` seconds."""
        if self._columnar:
            keys = request.keys if rows is None else request.keys.take(pa.array(rows))
            call: Awaitable[Any] = self.client.lookup_arrow(keys)
        else:
            everything = request.python_keys()
            call = self.client.lookup(everything if rows is None else [everything[r] for r in rows])
        if self._cheap_deadline:
            return await with_timeout(call, limit_s)
        return await with_deadline(call, limit_s, self._abandoned)

    def _checked(self, result: Any) -> _Answer:
        """The client's answer, or a TypeError that fails the task (a connector bug)."""
        if self._columnar:
            if not isinstance(result, Matches):
                raise TypeError(
                    f"connector {self.client.name!r} returned {type(result).__name__} from "
                    "lookup_arrow(); it must return Matches"
                )
            return result
        if result is None:
            return {}
        if not isinstance(result, Mapping):
            raise TypeError(
                f"connector {self.client.name!r} returned {type(result).__name__} from "
                "lookup(); it must return a mapping of key -> record"
            )
        return result

    async def _lookup_with_retry(self, request: _Request) -> _Answer:
        loop = asyncio.get_running_loop()
        retry = self._retry
        answers: list[Matches] = []
        merged: dict[Any, Any] = {}
        rows: np.ndarray | None = None  # None: every key of the request
        attempt = 0
        deadline = RequestDeadline(self._timeout_s, self._deadline_s, loop.time())
        while True:
            attempt += 1
            if self._limiter is not None:
                await self._limiter.acquire()
            limit_s = deadline.limit_s(loop.time())
            if limit_s <= 0:  # the rate limiter held the attempt past the deadline
                raise _FinalFailure(deadline.error(attempt - 1), attempt - 1)
            self.stats.requests += 1
            started = loop.time()
            try:
                result = await self._attempt(request, rows, limit_s)
            except (asyncio.TimeoutError, TimeoutError) as exc:
                self.stats.timeouts += 1
                self._limit_changed(self._limit.on_overload(started, loop.time()))
                error: BaseException = (
                    exc
                    if isinstance(exc, LookupTimeoutError)
                    else deadline.error(attempt)
                    if limit_s < self._timeout_s
                    else LookupTimeoutError(
                        f"no answer within timeout.ms={self.spec.options.timeout_ms}"
                    )
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                error = exc
                if isinstance(exc, OverloadedError):
                    self._limit_changed(self._limit.on_overload(started, loop.time()))
            else:
                now = loop.time()
                self.stats.record_latency(now - started)
                self._limit_changed(self._limit.on_success(started, now, self._in_flight))
                result = self._checked(result)
                if not retry.retry_on_miss and rows is None:  # the common case: one answer
                    return self._merge([result]) if isinstance(result, Matches) else result
                if isinstance(result, Matches):
                    if rows is not None:
                        result = Matches(rows[result.key_index], result.values, result.errors)
                    answers.append(result)
                    missing = self._missing_rows(request, answers)
                else:
                    merged.update(result)
                    missing = np.asarray(
                        [r for r, k in enumerate(request.python_keys()) if _absent(merged.get(k))],
                        dtype=np.int64,
                    )
                delay = retry.delay_s(attempt, rng=self._rng)
                if not retry.retry_missing(attempt, len(missing)) or not deadline.allows(
                    loop.time() + delay
                ):
                    return self._merge(answers) if self._columnar else merged
                rows = missing  # late dimension rows: ask again for the missing keys only
                self.stats.retries += 1
                await self._sleep(delay)
                continue
            if not retry.retry_error(attempt, self.client.is_retryable(error)):
                raise _FinalFailure(error, attempt)
            retry_after = getattr(error, "retry_after", None)
            delay = retry.delay_s(attempt, retry_after_s=retry_after, rng=self._rng)
            if not deadline.allows(loop.time() + delay):
                raise _FinalFailure(deadline.error(attempt, error), attempt)
            self.stats.retries += 1
            await self._sleep(delay)

    def _limit_changed(self, changed: bool) -> None:
        if changed:
            self.stats.record_limit(time.time(), self._limit.value)
            self._notify()  # a higher limit frees slots

    def _missing_rows(self, request: _Request, answers: list[Matches]) -> np.ndarray:
        found = np.zeros(request.keys.num_rows, dtype=bool)
        for answer in answers:
            found[answer.key_index] = True
        return np.flatnonzero(~found)

    def _merge(self, answers: list[Matches]) -> Matches:
        conformed = [conform_matches(answer, self._fields) for answer in answers]
        return concat_matches(conformed, self._fields)

    # -- answers -------------------------------------------------------------------------------

    def _deliver(self, request: _Request, answer: _Answer) -> None:
        """Hand the answer to the batch that asked and to those sharing the request."""
        size = request.keys.num_rows
        if isinstance(answer, Matches):
            answer = self._with_key_messages(answer, request.python_keys)
            found = np.zeros(size, dtype=bool)
            found[answer.key_index] = True
            self._cache_answer(request, answer, found)
            request.owner.parts.append(
                Matches(request.positions[answer.key_index], answer.values, answer.errors)
            )
            self.stats.missing_keys += int(size - found.sum())
            for job, positions, request_rows in request.subscribers:
                slot = np.full(size, -1, dtype=np.int64)
                slot[request_rows] = positions
                mine = slot[answer.key_index]
                keep = mine >= 0
                rows = pa.array(np.flatnonzero(keep))
                errors = answer.errors.take(rows) if answer.errors is not None else None
                job.parts.append(Matches(mine[keep], answer.values.take(rows), errors))
                self.stats.missing_keys += int((~found[request_rows]).sum())
            return
        keys = request.python_keys()
        self._cache_records(keys, answer)
        request.owner.record_parts.append(_RecordPart(request.positions, keys, answer))
        self.stats.missing_keys += sum(1 for k in keys if _absent(answer.get(k)))
        for job, positions, request_rows in request.subscribers:
            shared = [keys[r] for r in request_rows]
            job.record_parts.append(_RecordPart(positions, shared, answer))
            self.stats.missing_keys += sum(1 for k in shared if _absent(answer.get(k)))

    def _with_key_messages(self, matches: Matches, keys: Callable[[], list[Any]]) -> Matches:
        """Prefix each error message with the key it concerns: ``key 7: ...``."""
        errors = matches.errors
        if errors is None or errors.null_count == len(errors):
            return matches
        everything = keys()
        texts = errors.to_pylist()
        index = matches.key_index
        messages = [
            None if text is None else f"key {everything[index[row]]!r}: {text}"
            for row, text in enumerate(texts)
        ]
        return Matches(index, matches.values, pa.array(messages, type=pa.string()))

    def _cache_answer(self, request: _Request, answer: Matches, found: np.ndarray) -> None:
        if self._cache is None or not hasattr(self._cache, "put_many"):
            return
        self._cache.put_many(
            cache_rows(request.python_keys(), answer, found, cache_missing=self._cache_missing)
        )

    def _cache_records(self, keys: list[Any], result: Mapping[Any, Any]) -> None:
        if self._cache is None or not hasattr(self._cache, "put_many"):
            return
        items = []
        for key in keys:
            value = result.get(key)
            if _absent(value):
                if self._cache_missing:
                    items.append((key, MISSING))
            elif isinstance(value, Mapping) or (
                isinstance(value, (list, tuple)) and all(isinstance(v, Mapping) for v in value)
            ):
                items.append((key, value))
        if items:
            self._cache.put_many(items)

    def _request_failed(self, request: _Request, failure: _FinalFailure) -> None:
        keys = request.python_keys()
        shared = sum(len(rows) for _, rows, _ in request.subscribers)
        self.stats.failed_requests += 1
        self.stats.failed_keys += len(keys) + shared
        reason = describe_error(failure.error)
        if self.spec.options.on_error == "fail":
            # (the batches sharing the request asked the same keys: not counted again)
            if isinstance(self._failure, LookupFailedError):  # failed before the task stopped
                self._failure = self._failure.with_more(len(keys), keys)
                return
            error = LookupFailedError(
                connector=self.client.name,
                address=self.client.config.url,
                failed_keys=len(keys),
                attempts=failure.attempts,
                reason=reason,
                sample_keys=keys,
            )
            error.__cause__ = failure.error
            self._fail(error)
            return
        attempts = f" after {failure.attempts} attempts" if failure.attempts > 1 else ""
        message = f"{self.client.name} lookup failed{attempts}: {reason}"
        targets = [(request.owner, request.positions)] + [
            (job, positions) for job, positions, _ in request.subscribers
        ]
        for job, positions in targets:
            values = pa.RecordBatch.from_pylist([], schema=pa.schema(self._fields))
            nulls = values.take(pa.nulls(len(positions), type=pa.int64()))
            errors = pa.array([message] * len(positions), type=pa.string())
            job.parts.append(Matches(positions, nulls, errors))

    # -- output --------------------------------------------------------------------------------

    def _complete(self, job: _Job) -> None:
        try:
            job.output = self._build_output(job)
        except Exception as exc:
            self._fail(exc)
            return
        job.done = True
        job.batch = job.output  # the input batch is no longer needed
        self._queue.complete(job)

    def _records_as_matches(self, job: _Job) -> Matches:
        parts = job.record_parts
        positions = np.concatenate([p.positions for p in parts])
        keys = [k for p in parts for k in p.keys]
        merged: dict[Any, Any] = {}
        for part in parts:
            merged.update(part.result)
        matches = records_to_matches(keys, merged, self._fields)
        matches = self._with_key_messages(matches, lambda: keys)
        return Matches(positions[matches.key_index], matches.values, matches.errors)

    def _bounded(self, matches: Matches, job: _Job) -> Matches:
        """``matches`` with each key that has more than ``lookup.max-matches`` replaced by one
        error naming it (then handled by on.error)."""
        limit = self.spec.options.max_matches
        if len(matches.key_index) <= limit:
            return matches
        counts = np.bincount(matches.key_index, minlength=len(job.distinct))
        over = np.flatnonzero(counts > limit)
        if not len(over):
            return matches
        keys = job.python_keys()
        rows = pa.array(np.flatnonzero(~np.isin(matches.key_index, over)))
        errors = matches.errors
        kept = Matches(
            matches.key_index[rows.to_numpy()],
            matches.values.take(rows),
            errors.take(rows) if errors is not None else None,
        )
        messages = [
            f"key {keys[k]!r}: {counts[k]:,} matches, more than lookup.max-matches={limit} "
            "(raise it, or set it to 0 for no limit)"
            for k in over
        ]
        nulls = pa.RecordBatch.from_arrays(
            [pa.nulls(len(over), f.type) for f in self._fields], schema=pa.schema(self._fields)
        )
        failed = Matches(over.astype(np.int64), nulls, pa.array(messages, pa.string()))
        return concat_matches([kept, failed], self._fields)

    def _build_output(self, job: _Job) -> pa.RecordBatch:
        spec = self.spec
        parts = [conform_matches(part, self._fields) for part in job.parts]
        if job.record_parts:
            parts.append(self._records_as_matches(job))
        matches = concat_matches(parts, self._fields)
        if spec.options.max_matches:
            matches = self._bounded(matches, job)
        if spec.options.on_error == "fail":
            failure = value_failure(
                matches,
                job.python_keys(),
                connector=self.client.name,
                address=self.client.config.url,
            )
            if failure is not None:
                raise failure
        return join_matches(
            job.batch,
            job.distinct.indices,
            len(job.distinct),
            matches,
            how=spec.how,
            error_column=ERROR_COLUMN if spec.options.error_column else None,
            fields=self._fields,
        )

    def _take_ready(self) -> list[pa.RecordBatch]:
        ready = []
        for job in self._queue.pop_ready():
            self._buffered_rows -= len(job.distinct.indices)
            assert job.output is not None
            ready.append(job.output)
            job.output = None
        return ready
