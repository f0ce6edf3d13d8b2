"""The request executor: one request to the store, from its first attempt to its answer or its
final failure (:class:`RequestExecutor`). The retry strategy it follows is
:mod:`.retry`'s; its time limits are :mod:`.deadline`'s."""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from lookup_source.connector_api import LookupClient, Matches, is_retryable
from lookup_source.engine.loop import time_paused
from lookup_source.engine.metrics import LookupMetrics
from lookup_source.engine.request.answers import Answer, answer_of, merge
from lookup_source.engine.request.budget import TaskBudget
from lookup_source.engine.request.deadline import AttemptTimer, RequestDeadline
from lookup_source.engine.request.hedge import Hedging, race
from lookup_source.engine.request.key_rules import STORE_RULES, KeyRules
from lookup_source.engine.request.limit import ConcurrencyLimit
from lookup_source.engine.request.pacing import Admission, AskedKeys, Pacing
from lookup_source.engine.request.rate_limit import RateLimiter
from lookup_source.engine.request.retry import FinalFailure, RetryPolicy
from lookup_source.engine.request.slots import RequestSlots
from lookup_source.errors import OverloadedError, RecordError
from lookup_source.redaction import redact_text

if TYPE_CHECKING:
    from lookup_source.settings import LookupOptions


class Feedback:
    """What hears how each attempt went: the metrics (requests, latencies, timeouts), the
    concurrency limit (an adaptive one hears every answer; any, every timeout and overload,
    through ``limit_changed``) and the hedging (every request earns its budget; an answer's
    latency joins its window)."""

    def __init__(
        self,
        metrics: LookupMetrics,
        limit: ConcurrencyLimit,
        limit_changed: Callable[[bool], None],
        in_flight: Callable[[], int],
        hedging: Hedging | None,
    ) -> None:
        self._metrics = metrics
        self._limit = limit
        self._limit_changed = limit_changed
        self._in_flight = in_flight
        self._hedging = hedging

    def sent(self) -> None:
        self._metrics.requests += 1
        if self._hedging is not None:
            self._hedging.budget.earn()

    def paused(self) -> float:
        """The time the task's loop has not run so far, when hedging listens (0.0 else): its
        window takes latencies as time the loop ran, the unit of its delay."""
        return time_paused() if self._hedging is not None else 0.0

    def answered(self, started: float, now: float, paused: float) -> None:
        """An attempt sent at ``started`` was answered at ``now``; ``paused``: what
        :meth:`paused` said when it was sent."""
        self._metrics.record_latency(now - started)
        if self._hedging is not None:
            # the time Spark held the task is not the store's: a window of wall times would
            # put a busy machine's pauses into the quantile, and the delay (time the loop
            # ran, see hedge._Delay) past the requests it should hedge
            self._hedging.answered(max(0.0, now - started - (time_paused() - paused)))
        if self._limit.adaptive:
            self._limit_changed(self._limit.on_success(started, now, self._in_flight()))

    def timed_out(self, started: float, now: float) -> None:
        self._metrics.timeouts += 1
        self._limit_changed(self._limit.on_overload(started, now))

    def failed(self, error: BaseException, started: float, now: float) -> None:
        if isinstance(error, OverloadedError):
            self._limit_changed(self._limit.on_overload(started, now))


class RequestExecutor:
    """Runs a task's requests to the store, each to its answer or its final failure: the retry loop
    (Flink's ``RetryableResultHandlerDelegator``), each attempt under its time limit
    (``timeout.ms``, less near ``deadline.ms``), retried as the
    :class:`~lookup_source.engine.request.retry.RetryPolicy` says after its backoff (or the store's
    ``retry_after``), and so are missing keys under ``retry.on-miss``. Around each call, small
    wrappers: :class:`Pacing` (the rate limiter and the cluster budget, before it is sent),
    :class:`Feedback` (metrics, the concurrency limit, hedging's window, after), and with
    ``hedging``, :func:`~lookup_source.engine.request.hedge.race`: an attempt still unanswered past
    its delay is sent once more when the hedge budget allows, as a request like any other — it waits
    for a free slot (``hedge_slot``: wait for one and take it, give it back) and for its pacing."""

    def __init__(
        self,
        client: LookupClient,
        policy: RetryPolicy,
        *,
        deadline: Callable[[float], RequestDeadline],
        pacing: Pacing,
        feedback: Feedback,
        metrics: LookupMetrics,
        fields: list[pa.Field],
        rng: random.Random | None = None,
        hedging: Hedging | None = None,
        hedge_slot: tuple[Callable[[], Awaitable[None]], Callable[[], None]] | None = None,
        redact: Callable[[str], str] = redact_text,
        key_rules: KeyRules = STORE_RULES,
    ) -> None:
        self._client = client
        self._key_rules = key_rules
        self._redact = redact
        self._policy = policy
        self._deadline = deadline
        self._pacing = pacing
        self._feedback = feedback
        self._metrics = metrics
        self._fields = fields
        self._rng = rng
        self._hedging = hedging
        self._take_slot, self._give_slot = hedge_slot or (_no_wait, _nothing)
        self._columnar = client.columnar
        self._cheap_deadline = bool(getattr(client, "honours_cancellation", False))
        self.abandoned: set[asyncio.Future[Any]] = set()
        """Attempts that overstayed their time limit and ignored cancellation."""
        self.timer = AttemptTimer()
        """The time limits of the attempts in flight."""

    @classmethod
    def of(
        cls,
        client: LookupClient,
        options: LookupOptions,
        slots: RequestSlots,
        metrics: LookupMetrics,
        fields: list[pa.Field],
        *,
        hedging: Hedging | None = None,
        budget: TaskBudget | None = None,
        rng: random.Random | None = None,
        redact: Callable[[str], str] = redact_text,
    ) -> RequestExecutor:
        """The executor a task's ``options`` describe (retry, time limits, ``rate.limit``),
        its requests counted in ``slots``; with ``hedging`` and a cluster ``budget``."""
        rate_limiter = RateLimiter(options.rate_limit) if options.rate_limit else None
        return cls(
            client,
            RetryPolicy(options.retry),
            deadline=RequestDeadline.factory(options.timeout_s, options.deadline_s),
            pacing=Pacing(rate_limiter, budget),
            feedback=Feedback(
                metrics, slots.limit, slots.limit_changed, lambda: slots.in_flight, hedging
            ),
            metrics=metrics,
            fields=fields,
            rng=rng,
            hedging=hedging,
            hedge_slot=(slots.take_for_hedge, slots.release),
            redact=redact,
            key_rules=KeyRules.of(options.keys.equality, options.keys.on_unfit),
        )

    async def run(self, asked: AskedKeys) -> Answer:
        """The answer for the keys ``asked``, or :class:`FinalFailure`."""
        loop = asyncio.get_running_loop()
        policy = self._policy
        feedback = self._feedback
        answers: list[Answer] = []
        rows: np.ndarray | None = None  # None: every key of the request
        attempt = 0
        deadline = self._deadline(loop.time())
        while True:
            attempt += 1
            pacing = self._pacing
            admission = None if pacing.waits_for_nothing else await pacing.admit(asked, rows)
            limit_s = deadline.limit_s(loop.time())
            if limit_s <= 0:  # the rate limiter or the budget held it past the deadline
                if admission is not None:
                    admission.release()
                raise FinalFailure(deadline.error(attempt - 1), attempt - 1)
            feedback.sent()
            started, paused = loop.time(), feedback.paused()
            try:
                result = await self._attempt(asked, rows, limit_s, admission)
            except (asyncio.TimeoutError, TimeoutError) as exc:
                feedback.timed_out(started, loop.time())
                error: BaseException = deadline.timeout_error(exc, limit_s, attempt)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                feedback.failed(exc, started, loop.time())
                error = exc
            else:
                feedback.answered(started, loop.time(), paused)
                settled = self._settled(self._checked(result), asked, rows)
                answer = self._answer(settled, asked.size, asked.python_keys, rows)
                if not policy.retry_on_miss and rows is None:  # the common case: one answer
                    return answer
                answers.append(answer)
                rows, delay = self._still_missing(answers, attempt, deadline, loop.time())
                if rows is None:
                    return merge(answers)
                self._metrics.retries += 1  # late dimension rows: the missing keys again
                await asyncio.sleep(delay)
                continue
            finally:
                if admission is not None:
                    admission.release_unless_started()  # a started call gives it back itself
            if not policy.retry_error(attempt, is_retryable(error)):
                raise FinalFailure(error, attempt)
            retry_after = getattr(error, "retry_after", None)
            delay = policy.delay_s(attempt, retry_after_s=retry_after, rng=self._rng)
            if not deadline.allows(loop.time() + delay):
                raise FinalFailure(deadline.error(attempt, error), attempt)
            self._metrics.retries += 1
            await asyncio.sleep(delay)

    def _still_missing(
        self, answers: list[Answer], attempt: int, deadline: RequestDeadline, now: float
    ) -> tuple[np.ndarray | None, float]:
        """``retry.on-miss``: the rows of the keys no answer found yet and the delay before
        asking them again, or None when they are not asked again (none left, no attempt
        left, or past the deadline)."""
        found = answers[0].found()
        for answer in answers[1:]:
            found = found | answer.found()
        missing = np.flatnonzero(~found)
        delay = self._policy.delay_s(attempt, rng=self._rng)
        if not self._policy.retry_missing(attempt, len(missing)) or not deadline.allows(
            now + delay
        ):
            return None, delay
        return missing, delay

    def _settled(
        self, result: Matches | Mapping[Any, Any], asked: AskedKeys, rows: np.ndarray | None
    ) -> Matches | Mapping[Any, Any]:
        """A columnar answer as the lookup's key rules want it (:mod:`.key_rules`)."""
        if not isinstance(result, Matches) or (result.keys is None and not result.unfit):
            return result
        keys = asked.keys()
        if rows is not None:
            keys = keys.take(pa.array(rows))
        return self._key_rules.settle(result, keys, self._fields, self._metrics)

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
            return answer_of(result, size, python_keys, self._fields)
        everything = python_keys()
        asked = [everything[row] for row in rows.tolist()]
        part = answer_of(result, len(asked), lambda: asked, self._fields)
        return part.placed(rows, size, python_keys)

    def _attempt(
        self,
        asked: AskedKeys,
        rows: np.ndarray | None,
        limit_s: float,
        admission: Admission | None = None,
    ) -> Awaitable[Any]:
        """One call to the client for the keys (or the given rows of them), for at most
        ``limit_s`` seconds (hedged once, with ``hedging``), holding ``admission``'s lease
        until the call really ends: what to await (no coroutine of its own on the path)."""
        if self._hedging is not None:

            def call() -> Awaitable[Any]:
                made = self._call(asked, rows)
                return admission.holding(made) if admission is not None else made

            return self._hedged(lambda: self._call(asked, rows), call, limit_s, asked, rows)
        made = self._call(asked, rows)
        if admission is not None:
            made = admission.holding(made)
        if self._cheap_deadline:
            return self.timer.within(made, limit_s)
        return self.timer.abandoning(made, limit_s, self.abandoned)

    def _call(self, asked: AskedKeys, rows: np.ndarray | None) -> Awaitable[Any]:
        """The client's lookup of the keys (or the given rows of them), not yet awaited."""
        if self._columnar:
            keys = asked.keys()
            return self._client.lookup_arrow(keys if rows is None else keys.take(pa.array(rows)))
        everything = asked.python_keys()
        return self._client.lookup(everything if rows is None else [everything[r] for r in rows])

    async def _hedged(
        self,
        raw: Callable[[], Awaitable[Any]],
        call: Callable[[], Awaitable[Any]],
        limit_s: float,
        asked: AskedKeys,
        rows: np.ndarray | None,
    ) -> Any:
        """``call()`` raced against a hedge of ``raw()`` past the delay (each holding a lease
        of the budget of its own until it really ends)."""
        hedging = self._hedging
        assert hedging is not None
        metrics = self._metrics

        async def hedge() -> Any:  # its budget taken: a request like any other from here
            await self._take_slot()  # it waits for a free slot
            admission = None
            try:
                admission = await self._pacing.admit(asked, rows)
                metrics.hedges += 1
                metrics.requests += 1
                return await (admission.holding(raw()) if admission is not None else raw())
            finally:
                if admission is not None:
                    admission.release_unless_started()
                self._give_slot()

        def won() -> None:
            metrics.hedges_won += 1

        return await race(
            call,
            limit_s=limit_s,
            delay_s=hedging.delay_s(),
            gate=hedging.budget,
            start_hedge=hedge,
            hedge_won=won,
            abandoned=self.abandoned,
        )

    def _checked(self, result: Any) -> Matches | Mapping[Any, Any]:
        """The client's answer, or a TypeError that fails the task (a connector bug)."""
        name = self._client.name
        if self._columnar:
            if not isinstance(result, Matches):
                raise TypeError(
                    f"connector {name!r} returned {type(result).__name__} from "
                    "lookup_arrow(); it must return Matches"
                )
            errors = result.errors
            if errors is not None and errors.null_count < len(errors):  # a connector's texts
                errors = redact_texts(errors, self._redact)
                return dataclasses.replace(result, errors=errors)
            if result.unfit:
                unfit = {p: self._redact(str(why)) for p, why in result.unfit.items()}
                return dataclasses.replace(result, unfit=unfit)
            return result
        if result is None:
            return {}
        if not isinstance(result, Mapping):
            raise TypeError(
                f"connector {name!r} returned {type(result).__name__} from "
                "lookup(); it must return a mapping of key -> record"
            )
        if any(isinstance(value, RecordError) for value in result.values()):
            redact = self._redact
            return {
                key: RecordError(redact(str(value))) if isinstance(value, RecordError) else value
                for key, value in result.items()
            }
        return result


async def _no_wait() -> None:
    """No slot to wait for (an executor used without an engine)."""


def _nothing() -> None:
    pass


def redact_texts(texts: pa.Array, redact: Callable[[str], str] = redact_text) -> pa.Array:
    """A column of messages, redacted (a connector's error rows)."""
    return pa.array(
        [None if text is None else redact(text) for text in texts.to_pylist()],
        type=pa.string(),
    )
