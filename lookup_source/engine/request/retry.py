"""Retries: the backoff between attempts (:class:`Backoff`) and the policy that decides what is
tried again and when (:class:`RetryPolicy`), in the manner of Flink's ``AsyncRetryStrategy``
and redis-py's ``Retry``; a request that the policy gives up on ends in :class:`FinalFailure`.
The attempts themselves are run by :mod:`.executor`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from lookup_source.settings import RetrySettings


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
