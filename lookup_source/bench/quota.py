"""A service with a quota, as third-party APIs have: ``GET /users/{id}`` answers after
``latency_s``, and refuses with 429 what goes beyond ``max_in_flight`` requests at once or
``rate`` requests in any one second (0: no such limit). It counts what a budget must keep:
requests in flight (now and at most), when each request came and what it cost
(``cost_of(key)``, else 1), the refusals, and how late its own loop ran (``late_s``: a request
is counted when its handler runs, so a loop that ran 50 ms late may count in one second what
came over 1.05 s)::

    with QuotaService(max_in_flight=8, rate=300) as service:
        url = service.base_url + "/users/{key}"
        ...
        service.peak_in_flight, service.most_in_window(1.0), service.refused
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import time
from collections import deque
from collections.abc import AsyncIterator, Callable

from aiohttp import web

from lookup_source.service import BackgroundHttpServer

TICK_S = 0.005
"""How often the service looks at how late its loop runs."""
LATE_TICK_S = 0.01
"""A tick at least this late is kept, with when it woke (what explains a refusal)."""
ON_TIME_S = 0.02
"""Lateness below this (over a refusal's second) explains no refusal."""


class QuotaService(BackgroundHttpServer):
    """See the module."""

    def __init__(
        self,
        *,
        max_in_flight: int = 0,
        rate: float = 0.0,
        latency_s: float = 0.01,
        cost_of: Callable[[int], float] | None = None,
    ) -> None:
        self.cost_of = cost_of
        self.max_in_flight = max_in_flight
        self.rate = rate
        self.latency_s = latency_s
        self.in_flight = 0
        self.peak_in_flight = 0
        self.arrivals: list[tuple[float, float]] = []  # (time.monotonic(), cost), answered ones
        self.refused = 0
        self.refusals: list[float] = []
        """When each refusal was made (``time.monotonic()``)."""
        self.late_ticks: list[tuple[float, float]] = []
        """Each tick ``LATE_TICK_S`` late or more: when it woke, and how late."""
        self._recent: deque[float] = deque()
        self.phase = ""
        self.late_s = 0.0
        """The most the service's loop ran late since the last reset (a 5 ms ticker's lateness)."""
        app = web.Application()
        app.cleanup_ctx.append(self._ticking)
        app.router.add_get("/users/{id}", self._one)
        app.router.add_post("/reset", self._reset)
        app.router.add_get("/stats", self._stats)
        super().__init__(app)

    def reset(
        self, *, phase: str = "", max_in_flight: int = 0, rate: float = 0.0, latency_s: float = 0.01
    ) -> None:
        """Forget what was counted; take new limits (a new phase of a test or benchmark)."""
        self.phase = phase
        self.max_in_flight, self.rate, self.latency_s = max_in_flight, rate, latency_s
        self.peak_in_flight = 0
        self.arrivals = []
        self.refused = 0
        self.refusals = []
        self.late_ticks = []
        self.late_s = 0.0
        self._recent.clear()

    def stats(self) -> dict[str, float]:
        """What was counted since the last reset."""
        return {
            "requests": len(self.arrivals),
            "peak_in_flight": self.peak_in_flight,
            "most_in_1s": self.most_in_window(1.0),
            "most_cost_in_1s": self.most_in_window(1.0, cost=True),
            "refused": self.refused,
            "busy_s": self.busy_s(),
            "late_s": self.late_s,
            "unexplained_refusals": self.unexplained_refusals(),
        }

    def unexplained_refusals(self, window_s: float = 1.0) -> int:
        """The refusals its own lateness does not explain. The service counts a request when
        its handler runs: a loop late by ``L`` s counts at once what came meanwhile, up to
        ``L`` s of the rate (+2%, a budget's bound) beyond it in one window. A refusal is
        explained when the refusals in the window before it are at most that many, ``L``
        being the lateness of the ticks over that window (and the tick after it, which
        measures a stall the handler ran in); a loop on time explains none."""
        unexplained = 0
        for index, at in enumerate(self.refusals):
            late = sum(
                lateness
                for woke, lateness in self.late_ticks
                if at - window_s - 0.1 <= woke <= at + 0.1
            )
            allowed = 0 if late < ON_TIME_S else int(self.rate * 1.02 * late) + 1
            within = index + 1 - bisect.bisect_left(self.refusals, at - window_s, hi=index + 1)
            unexplained += within > allowed
        return unexplained

    async def _ticking(self, app: web.Application) -> AsyncIterator[None]:
        """While the service runs: how late its loop wakes a 5 ms ticker (``late_s``)."""

        async def tick() -> None:
            loop = asyncio.get_running_loop()
            while True:
                due = loop.time() + TICK_S
                await asyncio.sleep(TICK_S)
                late = loop.time() - due
                self.late_s = max(self.late_s, late)
                if late >= LATE_TICK_S:
                    self.late_ticks.append((time.monotonic(), late))

        ticker = asyncio.ensure_future(tick())
        yield
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker

    async def _reset(self, request: web.Request) -> web.Response:  # POST /reset?phase=...
        query = request.query
        self.reset(
            phase=query.get("phase", ""),
            max_in_flight=int(query.get("max_in_flight", 0)),
            rate=float(query.get("rate", 0)),
            latency_s=float(query.get("latency_s", 0.01)),
        )
        return web.json_response({})

    async def _stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.stats())

    async def _one(self, request: web.Request) -> web.Response:
        now = time.monotonic()
        recent = self._recent
        while recent and recent[0] <= now - 1.0:
            recent.popleft()
        over_rate = bool(self.rate) and len(recent) >= self.rate
        over_flight = bool(self.max_in_flight) and self.in_flight >= self.max_in_flight
        if over_rate or over_flight:
            self.refused += 1
            self.refusals.append(now)
            return web.json_response({"error": "quota"}, status=429)
        recent.append(now)
        key = request.match_info["id"]
        cost = self.cost_of(int(key)) if self.cost_of is not None else 1.0
        self.arrivals.append((now, cost))
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.latency_s)
        finally:
            self.in_flight -= 1
        return web.json_response({"name": f"user {key}"})

    def most_in_window(self, window_s: float, *, cost: bool = False) -> float:
        """The most requests (or, with ``cost``, cost units) that came in any ``window_s``."""
        arrivals = sorted(self.arrivals)
        times = [at for at, _ in arrivals]
        sums = [0.0]
        for _, units in arrivals:
            sums.append(sums[-1] + (units if cost else 1.0))
        best = 0.0
        for start, at in enumerate(times):
            end = bisect.bisect_left(times, at + window_s)
            best = max(best, sums[end] - sums[start])
        return best

    def busy_s(self) -> float:
        """From the first request answered to the last one's arrival."""
        if not self.arrivals:
            return 0.0
        times = [at for at, _ in self.arrivals]
        return max(times) - min(times)
