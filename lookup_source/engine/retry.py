"""Retries: the backoff between attempts, the policy that decides what is tried again, and the
attempt loop of one request (:class:`Attempts`), in the manner of Flink's
``RetryableResultHandlerDelegator`` and redis-py's ``Retry``: the engine hands a request over
and gets an answer back, or a :class:`FinalFailure` once the policy gives up.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from lookup_source.connector_api import LookupClient, Matches, is_retryable
from lookup_source.engine.answers import Answer, merge
from lookup_source.engine.deadline import RequestDeadline, with_deadline, with_timeout
from lookup_source.engine.limit import ConcurrencyLimit
from lookup_source.engine.metrics import LookupMetrics
from lookup_source.engine.rate_limit import RateLimiter
from lookup_source.errors import OverloadedError
from lookup_source.options import RetrySettings

Sleep = Callable[[float], Awaitable[Any]]


@dataclass(frozen=True)
class Backoff:
    """Computes the delay before each retry.

    ``exponential``: ``initial * 2**(retry-1)``, capped at ``max``, then "equal jitter" (a
    uniform draw between half the delay and the delay), so that many tasks retrying at once do
    not hammer the store in lock step. ``fixed``: always ``initial``.

    >>> Backoff(RetrySettings(backoff="fixed", initial_delay_s=0.2)).delay_s(3)
    0.2
    """

    settings: RetrySettings

    def base_delay_s(self, retry: int) -> float:
        """The delay before retry number ``retry`` (1 = the first retry), without jitter."""
        initial = self.settings.initial_delay_s
        cap = self.settings.max_delay_s
        if self.settings.backoff == "fixed":
            return min(initial, cap)
        return min(cap, initial * (2 ** max(0, retry - 1)))

    def delay_s(
        self, retry: int, *, retry_after_s: float | None = None, rng: random.Random | None = None
    ) -> float:
        """The delay to wait before retry ``retry``; a store's ``Retry-After`` hint wins when
        longer, still capped at ``retry.max-delay.ms``."""
        base = self.base_delay_s(retry)
        if self.settings.backoff == "exponential" and base > 0:
            draw = (rng or random).random()
            base = base / 2 + draw * base / 2
        if retry_after_s is not None and retry_after_s > base:
            base = min(retry_after_s, self.settings.max_delay_s)
        return base


@dataclass(frozen=True)
class RetryPolicy:
    """When a request is tried again, and after how long: the retry strategy object of the
    engine (Flink's ``AsyncRetryStrategy``, redis-py's ``Retry``).

    Two predicates decide: an *error* predicate (the one rule,
    :func:`~lookup_source.connector_api.is_retryable`, given per call) and a *result*
    predicate, ``retry.on-miss``: keys the store does not have yet are asked again (late
    dimension rows). Both stop after ``max_attempts`` attempts.

    >>> policy = RetryPolicy(RetrySettings(max_attempts=2, backoff="fixed", on_miss=True))
    >>> policy.retry_missing(attempt=1, missing=3), policy.retry_missing(attempt=2, missing=3)
    (True, False)
    """

    settings: RetrySettings

    @property
    def retry_on_miss(self) -> bool:
        return self.settings.on_miss

    def retry_error(self, attempt: int, retryable: bool) -> bool:
        """Whether attempt number ``attempt`` (1 = the first), which failed, is tried again."""
        return retryable and attempt < self.settings.max_attempts

    def retry_missing(self, attempt: int, missing: int) -> bool:
        """Whether the ``missing`` keys of attempt number ``attempt`` are asked again."""
        return self.retry_on_miss and missing > 0 and attempt < self.settings.max_attempts

    def delay_s(
        self, attempt: int, *, retry_after_s: float | None = None, rng: random.Random | None = None
    ) -> float:
        """The wait before the attempt after ``attempt``."""
        return Backoff(self.settings).delay_s(attempt, retry_after_s=retry_after_s, rng=rng)


class FinalFailure(Exception):
    """A request that failed for good: the last error, after ``attempts`` attempts."""

    def __init__(self, error: BaseException, attempts: int) -> None:
        super().__init__(str(error))
        self.error = error
        self.attempts = attempts


class Attempts:
    """The attempt loop of a task's requests: each attempt waits for the rate limiter, runs
    under its time limit (``timeout.ms``, less near ``deadline.ms``), and is counted; a failed
    attempt is retried as the :class:`RetryPolicy` says, after its backoff (or the store's
    ``retry_after``), and so are missing keys under ``retry.on-miss``. The concurrency limit
    hears of every answer, timeout and overload."""

    def __init__(
        self,
        client: LookupClient,
        policy: RetryPolicy,
        *,
        deadline: Callable[[float], RequestDeadline],
        limit: ConcurrencyLimit,
        limit_changed: Callable[[bool], None],
        in_flight: Callable[[], int],
        metrics: LookupMetrics,
        fields: list[pa.Field],
        rate_limiter: RateLimiter | None = None,
        sleep: Sleep = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self._client = client
        self._policy = policy
        self._deadline = deadline
        self._limit = limit
        self._limit_changed = limit_changed
        self._in_flight = in_flight
        self._metrics = metrics
        self._fields = fields
        self._rate_limiter = rate_limiter
        self._sleep = sleep
        self._rng = rng
        self._columnar = client.columnar
        self._cheap_deadline = bool(getattr(client, "honours_cancellation", False))
        self.abandoned: set[asyncio.Future[Any]] = set()
        """Attempts that overstayed their time limit and ignored cancellation."""

    async def run(self, keys: pa.RecordBatch, python_keys: Callable[[], list[Any]]) -> Answer:
        """The answer for ``keys`` (``python_keys()``: the same keys as Python values), or
        :class:`FinalFailure`."""
        loop = asyncio.get_running_loop()
        policy = self._policy
        metrics = self._metrics
        size = keys.num_rows
        answers: list[Answer] = []
        found = np.zeros(0, dtype=bool)
        rows: np.ndarray | None = None  # None: every key of the request
        attempt = 0
        deadline = self._deadline(loop.time())
        while True:
            attempt += 1
            if self._rate_limiter is not None:
                await self._rate_limiter.acquire()
            limit_s = deadline.limit_s(loop.time())
            if limit_s <= 0:  # the rate limiter held the attempt past the deadline
                raise FinalFailure(deadline.error(attempt - 1), attempt - 1)
            metrics.requests += 1
            started = loop.time()
            try:
                result = await self._attempt(keys, python_keys, rows, limit_s)
            except (asyncio.TimeoutError, TimeoutError) as exc:
                metrics.timeouts += 1
                self._limit_changed(self._limit.on_overload(started, loop.time()))
                error: BaseException = deadline.timeout_error(exc, limit_s, attempt)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                error = exc
                if isinstance(exc, OverloadedError):
                    self._limit_changed(self._limit.on_overload(started, loop.time()))
            else:
                now = loop.time()
                metrics.record_latency(now - started)
                self._limit_changed(self._limit.on_success(started, now, self._in_flight()))
                answer = self._answer(self._checked(result), size, python_keys, rows)
                if not policy.retry_on_miss and rows is None:  # the common case: one answer
                    return answer
                answers.append(answer)
                found = answer.found() if rows is None else found | answer.found()
                missing = np.flatnonzero(~found)
                delay = policy.delay_s(attempt, rng=self._rng)
                if not policy.retry_missing(attempt, len(missing)) or not deadline.allows(
                    loop.time() + delay
                ):
                    return merge(answers, self._fields)
                rows = missing  # late dimension rows: ask again for the missing keys only
                metrics.retries += 1
                await self._sleep(delay)
                continue
            if not policy.retry_error(attempt, is_retryable(error)):
                raise FinalFailure(error, attempt)
            retry_after = getattr(error, "retry_after", None)
            delay = policy.delay_s(attempt, retry_after_s=retry_after, rng=self._rng)
            if not deadline.allows(loop.time() + delay):
                raise FinalFailure(deadline.error(attempt, error), attempt)
            metrics.retries += 1
            await self._sleep(delay)

    def _answer(
        self,
        result: Matches | Mapping[Any, Any],
        size: int,
        python_keys: Callable[[], list[Any]],
        rows: np.ndarray | None,
    ) -> Answer:
        """The client's answer to the keys it was asked (all, or those at ``rows``), as an
        :class:`Answer` to the whole request."""
        if rows is None:
            if isinstance(result, Matches):
                return Answer.columnar(result, size, python_keys)
            return Answer.records(result, python_keys())
        everything = python_keys()
        asked = [everything[row] for row in rows.tolist()]
        part = (
            Answer.columnar(result, len(asked), lambda: asked)
            if isinstance(result, Matches)
            else Answer.records(result, asked)
        )
        return part.placed(rows, size, python_keys)

    async def _attempt(
        self,
        keys: pa.RecordBatch,
        python_keys: Callable[[], list[Any]],
        rows: np.ndarray | None,
        limit_s: float,
    ) -> Any:
        """One call to the client for the keys (or the given rows of them), for at most
        ``limit_s`` seconds."""
        if self._columnar:
            asked = keys if rows is None else keys.take(pa.array(rows))
            call: Awaitable[Any] = self._client.lookup_arrow(asked)
        else:
            everything = python_keys()
            call = self._client.lookup(
                everything if rows is None else [everything[r] for r in rows]
            )
        if self._cheap_deadline:
            return await with_timeout(call, limit_s)
        return await with_deadline(call, limit_s, self.abandoned)

    def _checked(self, result: Any) -> Matches | Mapping[Any, Any]:
        """The client's answer, or a TypeError that fails the task (a connector bug)."""
        name = self._client.name
        if self._columnar:
            if not isinstance(result, Matches):
                raise TypeError(
                    f"connector {name!r} returned {type(result).__name__} from "
                    "lookup_arrow(); it must return Matches"
                )
            return result
        if result is None:
            return {}
        if not isinstance(result, Mapping):
            raise TypeError(
                f"connector {name!r} returned {type(result).__name__} from "
                "lookup(); it must return a mapping of key -> record"
            )
        return result
