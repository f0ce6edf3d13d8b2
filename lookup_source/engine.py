"""The async lookup engine: pure asyncio and Arrow, no Spark.

:class:`LookupEngine` takes Arrow record batches, finds each batch's distinct non-null keys,
groups them into requests of at most ``batch.size`` keys, keeps at most ``capacity`` requests in
flight (retrying failed attempts with backoff), and emits each batch with the value columns
appended. Input is taken only while a request slot is free and the rows held back stay under a
budget: memory is bounded whatever the size of the input.

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
import contextlib
import itertools
import random
import sys
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from lookup_source.arrow_values import null_out, typed_columns, value_failure
from lookup_source.cache import MISSING
from lookup_source.connectors.base import Key, LookupClient
from lookup_source.errors import LookupFailedError, LookupTimeoutError, RecordError
from lookup_source.keys import DistinctKeys, cast_key_column, distinct_keys
from lookup_source.metrics import LookupMetrics
from lookup_source.options import ERROR_COLUMN, LookupOptions
from lookup_source.rate_limit import RateLimiter
from lookup_source.retry import Backoff

Sleep = Callable[[float], Awaitable[Any]]

if sys.version_info >= (3, 11):

    async def _with_timeout(awaitable: Awaitable[Any], seconds: float) -> Any:
        async with asyncio.timeout(seconds):  # no extra task per request
            return await awaitable

else:  # pragma: no cover - Python 3.10

    async def _with_timeout(awaitable: Awaitable[Any], seconds: float) -> Any:
        return await asyncio.wait_for(awaitable, seconds)


_GRACE_S = 1.0
"""How long a timed-out request may take to honour its cancellation before it is abandoned."""


async def _with_deadline(
    awaitable: Awaitable[Any], seconds: float, abandoned: set[asyncio.Future[Any]]
) -> Any:
    """Await ``awaitable`` for at most ``seconds``; raise ``TimeoutError`` after that.

    The deadline holds even for a client that swallows cancellation (a driver stuck on a dead
    connection): the request is cancelled, given a short grace, then abandoned so the task
    goes on; abandoned requests are cancelled again when the task closes.
    """
    task = asyncio.ensure_future(awaitable)
    try:
        done, _ = await asyncio.wait({task}, timeout=seconds)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if done:
        return task.result()
    task.cancel()
    await asyncio.wait({task}, timeout=min(_GRACE_S, seconds))
    if not task.done():
        abandoned.add(task)
        task.add_done_callback(abandoned.discard)
    else:
        with contextlib.suppress(BaseException):
            task.result()  # consume its outcome: never "exception was never retrieved"
    raise TimeoutError


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
class _Job:
    """One input batch on its way through the engine."""

    number: int
    batch: pa.RecordBatch
    distinct: DistinctKeys
    records: list[Any]
    errors: dict[int, str] = field(default_factory=dict)
    attempts: int = 0
    pending: int = 0
    output: pa.RecordBatch | None = None
    done: bool = False


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
        self._cache = cache
        self._cache_missing = options.cache.missing_keys
        self._capacity = options.capacity
        self._batch_size = options.batch_size
        self._timeout_s = options.timeout_ms / 1000.0
        self._backoff = Backoff(options.retry)
        self._sleep = sleep
        self._rng = rng
        self._limiter = RateLimiter(options.rate_limit, sleep=sleep) if options.rate_limit else None
        self._buffer_rows = buffer_rows or max(2 * options.capacity * options.batch_size, 20_000)
        self._jobs: deque[_Job] = deque()
        self._finished: deque[_Job] = deque()
        self._numbers = itertools.count()
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
        self._jobs.append(job)
        self._buffered_rows += batch.num_rows
        wanted = self._from_cache(job)
        size = self._batch_size
        job.pending = (len(wanted) + size - 1) // size
        if not wanted:
            self._complete(job)
        for start in range(0, len(wanted), size):
            await self._wait_until(lambda: self._in_flight < self._capacity)
            self._start_request(job, wanted[start : start + size])
        await self._wait_until(self._has_room)
        return self._take_ready()

    async def finish(self) -> list[pa.RecordBatch]:
        """Wait for every outstanding lookup; return the remaining output batches in order."""
        await self._wait_until(lambda: all(job.done for job in self._jobs))
        return self._take_ready()

    async def aclose(self) -> None:
        """Cancel whatever is still in flight (after a failure, or when output is abandoned)."""
        self._closed = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        stuck = list(self._abandoned)
        for future in stuck:
            future.cancel()
        if stuck:  # requests that ignored their cancellation: do not wait for them forever
            await asyncio.wait(stuck, timeout=_GRACE_S)

    # -- scheduling ----------------------------------------------------------------------------

    def _has_room(self) -> bool:
        if self._in_flight >= self._capacity:
            return False
        unfinished = sum(1 for job in self._jobs if not job.done)
        return unfinished <= 1 or self._buffered_rows < self._buffer_rows

    def _from_cache(self, job: _Job) -> list[int]:
        """Answer what the cache knows; return the positions of the keys still to fetch."""
        keys = job.distinct.keys
        if self._cache is None:
            return list(range(len(keys)))
        hits = self._cache.get_many(keys)
        wanted = []
        for position, key in enumerate(keys):
            value = hits.get(key)
            if value is None:
                wanted.append(position)
            elif value is MISSING:
                self.stats.missing_keys += 1
            else:
                job.records[position] = value
        self.stats.cache_hits += len(keys) - len(wanted)
        self.stats.cache_misses += len(wanted)
        return wanted

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
        distinct = distinct_keys(columns)
        self.stats.rows += batch.num_rows
        self.stats.keys += len(distinct.keys)
        self.stats.null_keys += distinct.indices.null_count
        return _Job(next(self._numbers), batch, distinct, [None] * len(distinct.keys))

    def _start_request(self, job: _Job, positions: list[int]) -> None:
        self._in_flight += 1
        self.stats.peak_in_flight = max(self.stats.peak_in_flight, self._in_flight)
        task = asyncio.ensure_future(self._request(job, positions))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- one request ---------------------------------------------------------------------------

    async def _request(self, job: _Job, positions: list[int]) -> None:
        all_keys = job.distinct.keys
        keys = [all_keys[position] for position in positions]
        try:
            try:
                result, attempts = await self._lookup_with_retry(keys)
            except _FinalFailure as failure:
                self._request_failed(job, positions, keys, failure)
            else:
                job.attempts = max(job.attempts, attempts)
                self._store(job, positions, keys, result)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug in a connector's result must not hang the task
            self._fail(exc)
        finally:
            self._in_flight -= 1
            job.pending -= 1
            if job.pending == 0 and not self._closed and self._failure is None:
                self._complete(job)
            self._notify()

    async def _lookup_with_retry(self, keys: Sequence[Key]) -> tuple[Mapping[Any, Any], int]:
        loop = asyncio.get_running_loop()
        options = self.spec.options
        merged: dict[Any, Any] = {}
        pending = list(keys)
        attempt = 0
        while True:
            attempt += 1
            if self._limiter is not None:
                await self._limiter.acquire()
            self.stats.requests += 1
            started = loop.time()
            try:
                if self._cheap_deadline:
                    result = await _with_timeout(self.client.lookup(pending), self._timeout_s)
                else:
                    result = await _with_deadline(
                        self.client.lookup(pending), self._timeout_s, self._abandoned
                    )
            except (asyncio.TimeoutError, TimeoutError) as exc:
                self.stats.timeouts += 1
                error: BaseException = (
                    exc
                    if isinstance(exc, LookupTimeoutError)
                    else LookupTimeoutError(f"no answer within timeout.ms={options.timeout_ms}")
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                error = exc
            else:
                self.stats.record_latency(loop.time() - started)
                if result is None:
                    result = {}
                if not isinstance(result, Mapping):
                    raise TypeError(
                        f"connector {self.client.name!r} returned {type(result).__name__} from "
                        "lookup(); it must return a mapping of key -> record"
                    )
                merged.update(result)
                missing = [key for key in pending if result.get(key) is None]
                if not (options.retry_on_miss and missing and attempt < options.retry.max_attempts):
                    return merged, attempt
                pending = missing  # late dimension rows: ask again for the missing keys only
                self.stats.retries += 1
                await self._sleep(self._backoff.delay_s(attempt, rng=self._rng))
                continue
            if attempt >= options.retry.max_attempts or not self.client.is_retryable(error):
                raise _FinalFailure(error, attempt)
            self.stats.retries += 1
            retry_after = getattr(error, "retry_after", None)
            await self._sleep(
                self._backoff.delay_s(attempt, retry_after_s=retry_after, rng=self._rng)
            )

    def _store(
        self, job: _Job, positions: list[int], keys: Sequence[Key], result: Mapping[Any, Any]
    ) -> None:
        cacheable: list[tuple[Key, Any]] = []
        for position, key in zip(positions, keys):
            value = result.get(key)
            if value is None:
                self.stats.missing_keys += 1
                if self._cache_missing:
                    cacheable.append((key, MISSING))
            elif isinstance(value, RecordError):
                job.errors[position] = f"key {key!r}: {value}"
            elif isinstance(value, Mapping):
                job.records[position] = value
                cacheable.append((key, value))
            else:
                job.errors[position] = (
                    f"key {key!r}: connector returned {type(value).__name__}, not a record"
                )
        if self._cache is not None and cacheable and hasattr(self._cache, "put_many"):
            self._cache.put_many(cacheable)

    def _request_failed(
        self, job: _Job, positions: list[int], keys: Sequence[Key], failure: _FinalFailure
    ) -> None:
        self.stats.failed_requests += 1
        self.stats.failed_keys += len(keys)
        reason = describe_error(failure.error)
        if self.spec.options.on_error == "fail":
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
        for position in positions:
            job.errors[position] = message

    # -- output --------------------------------------------------------------------------------

    def _complete(self, job: _Job) -> None:
        try:
            job.output = self._build_output(job)
        except Exception as exc:
            self._fail(exc)
            return
        job.done = True
        job.batch = job.output  # the input batch is no longer needed
        self._finished.append(job)

    def _build_output(self, job: _Job) -> pa.RecordBatch:
        spec = self.spec
        records = job.records
        errors = job.errors
        keys = job.distinct.keys
        arrays = typed_columns(
            [
                (field, [None if record is None else record.get(field.name) for record in records])
                for field in spec.value_fields
            ],
            keys,
            errors,
        )
        if errors and spec.options.on_error == "fail":
            raise value_failure(
                errors, keys, connector=self.client.name, address=self.client.config.url
            )
        failed = set(errors)
        indices = job.distinct.indices
        columns = list(job.batch.columns)
        columns += [null_out(array, failed).take(indices) for array in arrays]
        if spec.options.error_column:
            messages = [errors.get(position) for position in range(len(records))]
            columns.append(pa.array(messages, type=pa.string()).take(indices))
        schema = pa.schema(list(job.batch.schema) + spec.output_fields())
        output = pa.RecordBatch.from_arrays(columns, schema=schema)
        if spec.how == "inner":
            keep = pa.array(
                [
                    record is not None or position in failed
                    for position, record in enumerate(records)
                ],
                type=pa.bool_(),
            ).take(indices)
            output = output.filter(keep.fill_null(False))
        return output

    def _take_ready(self) -> list[pa.RecordBatch]:
        ready: list[pa.RecordBatch] = []
        if self.spec.options.ordered:
            while self._jobs and self._jobs[0].done:
                ready.append(self._release(self._jobs.popleft()))
            self._finished.clear()
        else:
            while self._finished:
                job = self._finished.popleft()
                self._jobs.remove(job)
                ready.append(self._release(job))
        return ready

    def _release(self, job: _Job) -> pa.RecordBatch:
        self._buffered_rows -= len(job.distinct.indices)
        output = job.output
        assert output is not None
        job.output = None
        return output
