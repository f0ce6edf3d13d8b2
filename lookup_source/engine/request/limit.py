"""How many requests a task keeps in flight: a fixed ``capacity``, or a limit that adapts.

:class:`FixedLimit` is ``capacity``. :class:`AdaptiveLimit` (``capacity.adaptive=true``) treats
``capacity`` as a ceiling and finds the concurrency the store can take, the way TCP finds a
link's bandwidth (additive increase, multiplicative decrease), with latency as an early signal
as in Netflix's concurrency-limits::

    limit = AdaptiveLimit(ceiling=100)
    started = loop.time()
    ...                                       # the request
    limit.on_success(started, loop.time(), in_flight)  # or on_overload(started, loop.time())
    while in_flight >= limit.value: ...       # wait for a slot

- it starts at ``min(ceiling, 10)`` and, until the first sign of overload, grows by one for each
  answered request (doubling every round trip: TCP's slow start); after that, by one per
  round trip's worth of answers;
- it grows only while the limit is in use (at least half of it in flight) and the latency stays
  within ``tolerance`` times the lowest latency seen lately;
- it shrinks by a quarter on a timeout or an overload answer (:class:`OverloadedError`: HTTP
  429, 503), by a tenth on a latency above that bound, at most once per round trip: only a
  request started after the last decrease can cause the next one, so a burst of failures of
  the requests that were already in flight counts once.

Pure bookkeeping: no asyncio, no clock of its own (times come from the caller).
"""

from __future__ import annotations

import math

INITIAL = 10
"""Where an adaptive limit starts (or at the ceiling, if lower)."""

BACKOFF = 0.75
"""What an adaptive limit keeps of itself on a sign of overload."""

LATENCY_BACKOFF = 0.9
"""What an adaptive limit keeps of itself when answers only slow down (nothing failed)."""

_WINDOW = 250
"""Answers per window of the lowest-latency baseline: the baseline is the lowest latency of
this window and the previous one, so it follows a store that gets slower for good."""

_SMOOTHING = 0.2
"""Weight of each new answer in the recent latency (an exponential moving average)."""


class FixedLimit:
    """``capacity`` requests in flight, always."""

    adaptive = False

    def __init__(self, capacity: int) -> None:
        self.value = capacity

    def on_success(self, started: float, now: float, in_flight: int) -> bool:
        return False

    def on_overload(self, started: float, now: float) -> bool:
        return False


class AdaptiveLimit:
    """A limit between ``floor`` and ``ceiling`` that follows what the store can take."""

    adaptive = True

    def __init__(
        self,
        ceiling: int,
        *,
        floor: int = 1,
        tolerance: float = 2.0,
        initial: int = INITIAL,
        backoff: float = BACKOFF,
    ) -> None:
        if not 1 <= floor <= ceiling:
            raise ValueError(f"need 1 <= floor <= ceiling, got floor={floor}, ceiling={ceiling}")
        if tolerance <= 1:
            raise ValueError(f"tolerance must be above 1, got {tolerance}")
        self.ceiling = ceiling
        self.floor = floor
        self.tolerance = tolerance
        self.backoff = backoff
        self._limit = float(max(floor, min(ceiling, initial)))
        self._slow_start = True
        self._last_decrease = -math.inf
        self._recent_s: float | None = None
        self._lowest_s = math.inf  # lowest latency of this window
        self._previous_lowest_s = math.inf  # and of the previous one
        self._answers = 0

    @property
    def value(self) -> int:
        return int(self._limit)

    @property
    def baseline_s(self) -> float:
        """The lowest latency seen lately (inf before the first answer)."""
        return min(self._lowest_s, self._previous_lowest_s)

    def on_success(self, started: float, now: float, in_flight: int) -> bool:
        """A request started at ``started`` was answered at ``now``, with ``in_flight``
        requests out (this one included). Returns whether the limit changed."""
        latency_s = max(0.0, now - started)
        self._observe(latency_s)
        assert self._recent_s is not None
        if self._recent_s > self.tolerance * self.baseline_s:  # slower: a gentler cut
            return self._decrease(started, now, LATENCY_BACKOFF)
        if in_flight * 2 < self._limit:  # the limit is not what holds the task back
            return False
        before = self.value
        step = 1.0 if self._slow_start else 1.0 / self._limit
        self._limit = min(float(self.ceiling), self._limit + step)
        return self.value != before

    def on_overload(self, started: float, now: float) -> bool:
        """A request started at ``started`` timed out, or was refused as too much, at
        ``now``. Returns whether the limit changed."""
        return self._decrease(started, now)

    def _observe(self, latency_s: float) -> None:
        self._answers += 1
        if self._answers % _WINDOW == 0:
            self._previous_lowest_s, self._lowest_s = self._lowest_s, math.inf
        self._lowest_s = min(self._lowest_s, latency_s)
        if self._recent_s is None:
            self._recent_s = latency_s
        else:
            self._recent_s += _SMOOTHING * (latency_s - self._recent_s)

    def _decrease(self, started: float, now: float, backoff: float | None = None) -> bool:
        if started < self._last_decrease:  # in flight at the last decrease: already counted
            return False
        self._slow_start = False
        self._last_decrease = now
        before = self.value
        self._limit = max(float(self.floor), self._limit * (backoff or self.backoff))
        self._recent_s = None  # judge the new limit by its own answers
        return self.value != before


ConcurrencyLimit = FixedLimit | AdaptiveLimit


def limit_of(capacity: int, *, adaptive: bool, tolerance: float) -> ConcurrencyLimit:
    """The limit ``capacity`` and ``capacity.adaptive`` (with its latency ``tolerance``)
    ask for."""
    if adaptive:
        return AdaptiveLimit(capacity, tolerance=tolerance)
    return FixedLimit(capacity)
