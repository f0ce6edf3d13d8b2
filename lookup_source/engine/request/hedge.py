"""Hedged requests ("The Tail at Scale", Dean and Barroso): a request still unanswered after a
delay is sent again, the first answer wins and the other request is cancelled.

Three small parts, conducted by the request executor (:mod:`.executor`):

- :class:`LatencyWindow`: the latencies of a lookup's recent answers on this worker, for a delay
  given as a quantile (``hedge.after.ms=p95``);
- :class:`HedgeBudget`: a token bucket that keeps hedges under a share of the requests
  (``hedge.budget``): each request earns that share of a token, a hedge spends a whole one, so
  over any long stretch of requests the hedges never exceed the share; it starts full (what
  1,000 requests earn, at least 10), as gRPC's hedging throttle does, so that a job's first
  requests — the likeliest to be slow (cold caches, new connections, a service warming up) —
  are hedged too; those first tokens are an advance that the first requests' earnings repay,
  so over a worker's first ``n`` requests at most ``max(saved, share * n)`` hedges go; a
  request past its delay with no hedge to be had asks again every delay;
- :func:`race`: one attempt, hedged once past the delay — a delay the loop ran through: a
  task's loop runs only while Spark waits on it, and a request's answer that came while it did
  not is read before the request is called slow.

A lookup's :class:`Hedging` (window and budget) lives as long as the Python worker, shared by its
tasks (:meth:`~lookup_source.engine.kept.caches.KeptCaches.hedging`, kept with the worker's caches):
a stream's micro-batches learn its latencies once, and its budget is not reset by each small task.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from lookup_source.engine.loop import time_paused

if TYPE_CHECKING:
    from lookup_source.settings import HedgeSettings

WINDOW = 512
"""Latencies a :class:`LatencyWindow` keeps (the most recent ones)."""

MIN_SAMPLES = 20
"""Answers needed before a quantile delay is trusted; before that, the fixed delay given
beside the quantile (``hedge.after.ms=p95,50``) is used."""

REFRESH = 32
"""A quantile is computed again after this many new latencies."""

MAX_TOKENS = 10.0
"""The fewest hedges a :class:`HedgeBudget` may save up (a burst after a quiet stretch)."""

SAVED_REQUESTS = 1_000
"""A budget saves up what this many requests earn (``hedge.budget`` x 1,000: 50 hedges at 5%),
at least :data:`MAX_TOKENS`, and starts full, as an advance the first requests repay: over a
worker's first ``n`` requests at most ``max(saved, share * n)`` hedges, over any later stretch
of ``n`` at most ``saved + share * n``. A task sends its requests in bursts (hundreds start
within milliseconds when the service is fast), and what they earn past the cap is lost: a cap
of a few hedges leaves the slow requests of a burst unhedged."""


def saved_hedges(share: float) -> float:
    """How many hedges a budget of ``share`` may save up (and starts with)."""
    return max(MAX_TOKENS, share * SAVED_REQUESTS)


class LatencyWindow:
    """The latencies (seconds) of the last :data:`WINDOW` answers, and their quantiles."""

    def __init__(self, size: int = WINDOW) -> None:
        self._values = np.zeros(size, dtype=np.float64)
        self._count = 0
        self._cached: dict[float, float] = {}
        self._since = 0
        self._lock = threading.Lock()

    def add(self, seconds: float) -> None:
        with self._lock:
            self._values[self._count % len(self._values)] = seconds
            self._count += 1
            self._since += 1

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile of the window, or None with fewer than :data:`MIN_SAMPLES`."""
        with self._lock:
            filled = min(self._count, len(self._values))
            if filled < MIN_SAMPLES:
                return None
            if self._since >= REFRESH or q not in self._cached:
                if self._since >= REFRESH:
                    self._cached.clear()
                    self._since = 0
                self._cached[q] = float(np.quantile(self._values[:filled], q))
            return self._cached[q]


class Place(Protocol):
    """A request past its delay, asking for a hedge (:meth:`HedgeBudget.join`)."""

    def take(self) -> bool:
        """Take a hedge, when there is one to take."""
        ...

    def leave(self) -> None:
        """No longer asking (answered, hedged or given up). Safe to call twice."""
        ...


class Gate(Protocol):
    """What lets a request past its delay be hedged (a :class:`HedgeBudget`)."""

    def join(self) -> Place: ...


class HedgeBudget:
    """Hedges at most ``share`` of the requests: each request earns ``share`` of a token (up
    to :func:`saved_hedges`), each hedge spends one. It starts with :func:`saved_hedges`
    tokens lent in advance: what the first requests earn repays the advance before it adds a
    token, so the hedges of a worker's first ``n`` requests stay within
    ``max(saved, share * n)`` — a job's first slow requests are hedged, and a job of more than
    ``saved / share`` requests stays within ``share`` of them."""

    def __init__(self, share: float, tokens: float | None = None) -> None:
        self.share = share
        self.saved = saved_hedges(share)
        self._tokens = self.saved if tokens is None else min(self.saved, tokens)
        self._advance = self._tokens
        self._lock = threading.Lock()

    def earn(self) -> None:
        with self._lock:
            if self._advance > 0.0:  # what is left of the advance, to within rounding
                self._advance = self._advance - self.share
                if self._advance < 1e-9:
                    self._advance = 0.0
                return
            self._tokens = min(self.saved, self._tokens + self.share)

    def has(self) -> bool:
        """Whether a hedge could be paid for now."""
        return self._tokens >= 1.0

    def spend(self) -> bool:
        """Take a token for a hedge; False when there is none."""
        with self._lock:
            return self._spend()

    def _spend(self) -> bool:
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False

    def join(self) -> _Place:
        """A request past its delay, asking for a hedge."""
        return _Place(self)


class _Place:
    __slots__ = ("_budget",)

    def __init__(self, budget: HedgeBudget) -> None:
        self._budget = budget

    def take(self) -> bool:
        return self._budget.spend()

    def leave(self) -> None:
        return None


class Unlimited:
    """A :class:`Gate` that always lets a hedge go (for tests of :func:`race`)."""

    def join(self) -> Place:
        return _Always()


class _Always:
    def take(self) -> bool:
        return True

    def leave(self) -> None:
        return None


class Hedging:
    """When one lookup hedges, and how many hedges it may still send: after ``after_s``, or
    past the ``quantile`` of :class:`LatencyWindow` once it knows enough answers (``after_s``
    until then), within ``budget``."""

    def __init__(self, *, after_s: float, quantile: float = 0.0, budget: float) -> None:
        if not after_s > 0:
            raise ValueError("hedging needs a delay (the one until a quantile is known)")
        self.after_s = after_s
        self.quantile = quantile
        self.window = LatencyWindow()
        self.budget = HedgeBudget(budget)

    def delay_s(self) -> float:
        """How long a request waits before its hedge: the quantile of the recent answers, or
        the fixed delay (always, or while too few answers are known)."""
        if self.quantile:
            known = self.window.quantile(self.quantile)
            if known is not None:
                return known
        return self.after_s

    @classmethod
    def of(cls, settings: HedgeSettings) -> Hedging:
        """The hedging ``hedge.after.ms`` and ``hedge.budget`` ask for (``after`` set)."""
        assert settings.after is not None
        after = settings.after
        return cls(after_s=after.seconds, quantile=after.quantile, budget=settings.budget)

    def answered(self, seconds: float) -> None:
        """A request was answered in ``seconds`` (first answer, hedged or not)."""
        self.window.add(seconds)


async def race(
    start: Callable[[], Awaitable[Any]],
    *,
    limit_s: float,
    delay_s: float | None,
    gate: Gate,
    start_hedge: Callable[[], Awaitable[Any]],
    hedge_won: Callable[[], None],
    abandoned: set[asyncio.Future[Any]],
) -> Any:
    """One attempt, hedged: ``start()`` the request; if it is unanswered after ``delay_s`` (of
    time the loop could read answers in), it asks ``gate`` for a hedge and, as soon as one is
    to be had (asked again every ``delay_s``), ``start_hedge()`` the same
    request again (which may wait for a slot and the rate limiter). The first answer wins; the
    other request is cancelled (left in ``abandoned`` until it ends, for the task's close). An
    error of one request waits for the other; both failing raise the first request's error.
    Raises ``TimeoutError`` when no answer came within ``limit_s``."""
    loop = asyncio.get_running_loop()
    ends = loop.time() + limit_s
    paused = time_paused()
    first = asyncio.ensure_future(start())
    second: asyncio.Future[Any] | None = None
    may_retry = delay_s is not None and delay_s < limit_s
    place: Place | None = None
    # lateness is credited until the request has waited twice its delay (see _unread_s)
    late_until = loop.time() + 2 * (delay_s or 0.0)
    try:
        wait_s = limit_s if delay_s is None else min(delay_s, limit_s)
        while True:  # the delay is time the loop could read answers in (see _unread_s)
            waited_from = loop.time()
            done, _ = await asyncio.wait({first}, timeout=wait_s)
            if done:
                return first.result()
            held_s, late_s, paused = _unread_s(loop, waited_from + wait_s, paused)
            late_until += held_s
            late_s = min(late_s, max(0.0, late_until - loop.time()))
            wait_s = min(held_s + late_s, ends - loop.time())
            if wait_s <= 0.001:
                break
        # past the delay: hedge once, when the budget has one (others may have taken those
        # there were: asked again every delay, while the request is unanswered)
        place = gate.join() if may_retry else None
        error: BaseException | None = None
        while True:
            left = ends - loop.time()
            if left <= 0:
                break
            if second is None and place is not None and place.take():
                second = asyncio.ensure_future(start_hedge())
            pending = {f for f in (first, second) if f is not None and not f.done()}
            if not pending:
                break
            waiting = second is None and place is not None and may_retry
            timeout = min(delay_s, left) if waiting and delay_s else left
            done, _ = await asyncio.wait(
                pending, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            for finished in (first, second):  # the first request's outcome first
                if finished is None or finished not in done:
                    continue
                failure = finished.exception()
                if failure is None:
                    if finished is second:
                        hedge_won()
                    return finished.result()
                if finished is second:
                    may_retry = False  # one hedge per request, answered or failed
                if error is None or finished is first:
                    error = failure
            if first.done() and (second is None or second.done()) and error is not None:
                break
        pending = {f for f in (first, second) if f is not None and not f.done()}
        if error is not None and not pending:
            raise error
        raise TimeoutError
    finally:
        if place is not None:
            place.leave()
        for request in (first, second):
            if request is not None and not request.done():
                request.cancel()
                abandoned.add(request)
                request.add_done_callback(abandoned.discard)
                request.add_done_callback(_consume)


def _unread_s(
    loop: asyncio.AbstractEventLoop, due: float, paused_before: float
) -> tuple[float, float, float]:
    """How long a request's answer may have waited unread during a wait that was due at
    ``due``: the time the loop did not run since ``paused_before`` (Spark held the task between
    two runs), and how late the wait ended (the loop was busy: a cold start, a collection, the
    other processes of a small machine). A request is slow only when it is still unanswered
    that much longer — the held time in full, the lateness until it has waited twice its
    delay (:func:`race`): on a machine so busy that every wait ends late, a request is hedged
    by twice its delay, not never. Returns the held time, the lateness, and the loop's paused
    time now."""
    paused_now = time_paused()
    late = max(0.0, loop.time() - due)
    return paused_now - paused_before, (late if late > 0.002 else 0.0), paused_now


def _consume(future: asyncio.Future[Any]) -> None:
    """Take a cancelled loser's outcome, so that nothing logs "exception was never retrieved"."""
    with contextlib.suppress(BaseException):
        future.result()


__all__ = [
    "Gate",
    "HedgeBudget",
    "Hedging",
    "LatencyWindow",
    "Place",
    "Unlimited",
    "race",
]
