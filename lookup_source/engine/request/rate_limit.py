"""A requests-per-second (or units-per-second) cap for one task."""

from __future__ import annotations

import asyncio


class RateLimiter:
    """Spaces requests at least ``1 / rate`` seconds apart (a token bucket holding one token).

    Each caller reserves the next free slot, then sleeps until it comes, so waiting callers are
    served in order and the cap holds over any window.
    """

    def __init__(self, rate: float) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.interval = 1.0 / rate
        self._next = 0.0

    async def acquire(self, units: float = 1.0) -> None:
        """Wait for the next free slot, and take ``units`` of them (a request's cost)."""
        now = asyncio.get_running_loop().time()  # the engine's clock: its loop's
        slot = max(now, self._next)
        self._next = slot + units * self.interval
        if slot > now:
            await asyncio.sleep(slot - now)
