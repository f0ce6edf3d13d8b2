"""Backoff between attempts: fixed, or exponential with jitter."""

from __future__ import annotations

import random
from dataclasses import dataclass

from lookup_source.options import RetrySettings


@dataclass(frozen=True)
class Backoff:
    """Computes the delay before each retry.

    ``exponential``: ``initial * 2**(retry-1)``, capped at ``max``, then "equal jitter" (a
    uniform draw between half the delay and the delay), so that many tasks retrying at once do
    not hammer the store in lock step. ``fixed``: always ``initial``.

    >>> Backoff(RetrySettings(backoff="fixed", initial_delay_ms=200)).delay_s(3)
    0.2
    """

    settings: RetrySettings

    def base_delay_s(self, retry: int) -> float:
        """The delay before retry number ``retry`` (1 = the first retry), without jitter."""
        initial = self.settings.initial_delay_ms / 1000.0
        cap = self.settings.max_delay_ms / 1000.0
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
            base = min(retry_after_s, self.settings.max_delay_ms / 1000.0)
        return base
