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

GRACE_S = 0.005
"""How long a request past its delay whose wait ended late waits once more (at most its
delay): long enough for the loop to read an answer that came while it was busy."""

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
    delay = None if delay_s is None else _Delay(loop, delay_s)
    first = asyncio.ensure_future(start())
    second: asyncio.Future[Any] | None = None
    may_retry = delay_s is not None and delay_s < limit_s
    place: Place | None = None
    try:
        if delay is None or delay_s is None:
            done, _ = await asyncio.wait({first}, timeout=limit_s)
            if done:
                return first.result()
        else:  # the delay is time the loop could read answers in (see _Delay)
            wait_s: float | None = min(delay_s, limit_s)
            while wait_s is not None:
                due = loop.time() + wait_s
                done, _ = await asyncio.wait({first}, timeout=wait_s)
                if done:
                    return first.result()
                wait_s = delay.next_wait(due, ends)
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


class _Delay:
    """A request's hedging delay, as time its loop could read answers in. A task's loop runs
    only while Spark waits on it: the time it did not run (:func:`time_paused`) is owed to
    the request, which is slow only once the loop has *run* its delay. A wait that ended late
    for another reason (the loop was busy: a cold start, a collection, the other processes of
    a small machine) may hold an answer not yet read: it is read in a few turns of the loop,
    given one short wait (:data:`GRACE_S`), once — not the lateness again, which on a machine
    so busy that every wait ends late kept a slow request unhedged until its timeout."""

    __slots__ = ("_delay_s", "_graced", "_loop", "_paused", "_paused_at_start", "_start")

    def __init__(self, loop: asyncio.AbstractEventLoop, delay_s: float) -> None:
        self._loop = loop
        self._delay_s = delay_s
        self._start = loop.time()
        self._paused_at_start = self._paused = time_paused()
        self._graced = False

    def next_wait(self, due: float, ends: float) -> float | None:
        """After a wait due to end at ``due`` with no answer: how long to wait again, or None
        when the request is past its delay (or its limit, ``ends``)."""
        now = self._loop.time()
        paused = time_paused()
        held_s, self._paused = paused - self._paused, paused
        late_s = now - due - held_s
        ran_s = now - self._start - (paused - self._paused_at_start)
        if ran_s < self._delay_s - 0.001:  # Spark held the task: the loop owes it that time
            wait_s = self._delay_s - ran_s
        elif late_s > 0.002 and not self._graced:  # a busy loop: read what came meanwhile
            self._graced = True
            wait_s = min(self._delay_s, GRACE_S)
        else:
            return None
        wait_s = min(wait_s, ends - now)
        return wait_s if wait_s > 0.001 else None


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
