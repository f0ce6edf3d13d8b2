"""Hedged requests ("The Tail at Scale", Dean and Barroso): a request still unanswered after a
delay is sent again, the first answer wins and the other request is cancelled.

Three small parts, conducted by the request executor (:mod:`.executor`):

- :class:`LatencyWindow`: the latencies of a lookup's recent answers on this worker, for a delay
  given as a quantile (``hedge.after.ms=p95``);
- :class:`HedgeBudget`: a token bucket that keeps hedges under a share of the requests
  (``hedge.budget``): each request earns that share of a token, a hedge spends a whole one, so
  over any stretch of requests the hedges never exceed the share (gRPC's hedging throttle);
- :func:`race`: one attempt, hedged once past the delay.

A lookup's :class:`Hedging` (window and budget) lives as long as the Python worker, shared by
its tasks (:func:`worker_hedging`, kept with the worker's caches): a stream's micro-batches
learn its latencies once, and its budget is not reset by each small task.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from lookup_source.connector_api import ConnectorConfig
from lookup_source.engine.cache import worker_cache

if TYPE_CHECKING:
    from lookup_source.options import HedgeSettings

WINDOW = 512
"""Latencies a :class:`LatencyWindow` keeps (the most recent ones)."""

MIN_SAMPLES = 20
"""Answers needed before a quantile delay is trusted; before that, no hedge is sent."""

REFRESH = 32
"""A quantile is computed again after this many new latencies."""

MAX_TOKENS = 10.0
"""Most hedges a :class:`HedgeBudget` may have saved up (a burst after a quiet stretch)."""


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


class HedgeBudget:
    """Hedges at most ``share`` of the requests: each request earns ``share`` of a token (up to
    :data:`MAX_TOKENS`), each hedge spends one."""

    def __init__(self, share: float) -> None:
        self.share = share
        self._tokens = 0.0
        self._lock = threading.Lock()

    def earn(self) -> None:
        with self._lock:
            self._tokens = min(MAX_TOKENS, self._tokens + self.share)

    def has(self) -> bool:
        """Whether a hedge could be paid for now."""
        return self._tokens >= 1.0

    def spend(self) -> bool:
        """Take a token for a hedge; False when there is none."""
        with self._lock:
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return True
            return False


class Hedging:
    """When one lookup hedges, and how many hedges it may still send: ``after_s`` (a fixed
    delay) or ``quantile`` (of :class:`LatencyWindow`), within ``budget``."""

    def __init__(self, *, after_s: float = 0.0, quantile: float = 0.0, budget: float) -> None:
        if bool(after_s) == bool(quantile):
            raise ValueError("hedging needs a fixed delay or a quantile, one of them")
        self.after_s = after_s
        self.quantile = quantile
        self.window = LatencyWindow()
        self.budget = HedgeBudget(budget)

    def delay_s(self) -> float | None:
        """How long a request waits before its hedge, or None (no hedge: too few answers yet
        to know the quantile)."""
        if self.after_s:
            return self.after_s
        return self.window.quantile(self.quantile)

    @classmethod
    def of(cls, settings: HedgeSettings) -> Hedging:
        """The hedging ``hedge.after.ms`` and ``hedge.budget`` ask for (``after`` set)."""
        assert settings.after is not None
        after = settings.after
        return cls(after_s=after.seconds, quantile=after.quantile, budget=settings.budget)

    def answered(self, seconds: float) -> None:
        """A request was answered in ``seconds`` (first answer, hedged or not)."""
        self.window.add(seconds)


class NoHedge(Exception):
    """Raised by a hedge that was not sent after all (no budget left once a slot was free)."""


async def race(
    start: Callable[[], Awaitable[Any]],
    *,
    limit_s: float,
    delay_s: float | None,
    may_hedge: Callable[[], bool],
    start_hedge: Callable[[], Awaitable[Any]],
    hedge_won: Callable[[], None],
    abandoned: set[asyncio.Future[Any]],
) -> Any:
    """One attempt, hedged: ``start()`` the request; if it is unanswered after ``delay_s`` and
    ``may_hedge()``, ``start_hedge()`` the same request again (which may wait for a slot and
    the rate limiter, or raise :class:`NoHedge`). The first answer wins; the other request is
    cancelled (left in ``abandoned`` until it ends, for the task's close). An error of one
    request waits for the other; both failing raise the first request's error. Raises
    ``TimeoutError`` when no answer came within ``limit_s``."""
    loop = asyncio.get_running_loop()
    ends = loop.time() + limit_s
    first = asyncio.ensure_future(start())
    second: asyncio.Future[Any] | None = None
    try:
        wait_s = limit_s if delay_s is None else min(delay_s, limit_s)
        done, _ = await asyncio.wait({first}, timeout=wait_s)
        if done:
            return first.result()
        if delay_s is not None and delay_s < limit_s and may_hedge():
            second = asyncio.ensure_future(start_hedge())
        pending: set[asyncio.Future[Any]] = {first} if second is None else {first, second}
        error: BaseException | None = None
        while pending:
            left = ends - loop.time()
            if left <= 0:
                break
            done, pending = await asyncio.wait(
                pending, timeout=left, return_when=asyncio.FIRST_COMPLETED
            )
            for finished in (first, second):  # the first request's outcome first
                if finished is None or finished not in done:
                    continue
                failure = finished.exception()
                if failure is None:
                    if finished is second:
                        hedge_won()
                    return finished.result()
                if isinstance(failure, NoHedge):
                    continue
                if error is None or finished is first:
                    error = failure
        if error is not None and not pending:
            raise error
        raise TimeoutError
    finally:
        for request in (first, second):
            if request is not None and not request.done():
                request.cancel()
                abandoned.add(request)
                request.add_done_callback(abandoned.discard)
                request.add_done_callback(_consume)


def _consume(future: asyncio.Future[Any]) -> None:
    """Take a cancelled loser's outcome, so that nothing logs "exception was never retrieved"."""
    with contextlib.suppress(BaseException):
        future.result()


def worker_hedging(config: ConnectorConfig, settings: HedgeSettings) -> Hedging:
    """This worker's :class:`Hedging` of the lookup ``config`` with these settings (made on
    first use, then shared by the worker's tasks, like its caches)."""
    return worker_cache(
        f"hedge after={settings.after} budget={settings.budget}",
        config,
        lambda: Hedging.of(settings),
    )


__all__ = [
    "HedgeBudget",
    "Hedging",
    "LatencyWindow",
    "NoHedge",
    "race",
    "worker_hedging",
]
