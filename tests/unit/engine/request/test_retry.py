"""Retries (engine.request.retry): the backoff between attempts — exponential doubling capped at
``retry.max-delay.ms`` with "equal jitter" (between half the delay and the delay, drawn from the
given random.Random), or fixed — a store's ``Retry-After`` hint winning when longer (still
capped); which failed attempts the policy tries again (retryable errors, within
``retry.max-attempts``) and which missing keys (``retry.on-miss``); and FinalFailure, carrying
the last error and the number of attempts."""

from __future__ import annotations

import random

import pytest

from lookup_source.connector_api import is_retryable
from lookup_source.engine.request.retry import Backoff, FinalFailure, RetryPolicy
from lookup_source.errors import (
    LookupTimeoutError,
    OverloadedError,
    PermanentError,
    RecordError,
    TransientError,
)
from lookup_source.settings import RetrySettings


def exponential(initial_s: float = 0.1, max_s: float = 5.0) -> RetrySettings:
    return RetrySettings(backoff="exponential", initial_delay_s=initial_s, max_delay_s=max_s)


def test_exponential_base_delay_doubles_per_retry_and_is_capped() -> None:
    backoff = Backoff(exponential(0.1, 1.0))
    delays = [backoff.base_delay_s(retry) for retry in range(1, 7)]
    assert delays == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])


def test_retry_zero_or_below_counts_as_the_first_retry() -> None:
    backoff = Backoff(exponential(0.25, 10.0))
    assert backoff.base_delay_s(0) == 0.25
    assert backoff.base_delay_s(-3) == 0.25


def test_fixed_backoff_is_always_the_initial_delay_without_jitter() -> None:
    backoff = Backoff(RetrySettings(backoff="fixed", initial_delay_s=0.2, max_delay_s=5.0))
    rng = random.Random(1)
    assert [backoff.delay_s(retry, rng=rng) for retry in (1, 2, 5, 30)] == [0.2, 0.2, 0.2, 0.2]
    assert rng.random() == random.Random(1).random()  # no draw was taken


def test_fixed_backoff_is_capped_by_the_max_delay() -> None:
    backoff = Backoff(RetrySettings(backoff="fixed", initial_delay_s=3.0, max_delay_s=0.5))
    assert backoff.base_delay_s(1) == 0.5
    assert backoff.delay_s(4) == 0.5


def test_exponential_jitter_is_equal_jitter_from_the_seeded_random() -> None:
    backoff = Backoff(exponential(0.1, 5.0))
    draws = random.Random(42)
    expected = []
    for retry in range(1, 6):
        base = 0.1 * 2 ** (retry - 1)
        expected.append(base / 2 + draws.random() * base / 2)
    rng = random.Random(42)
    assert [backoff.delay_s(retry, rng=rng) for retry in range(1, 6)] == pytest.approx(expected)


def test_exponential_jitter_stays_between_half_the_delay_and_the_delay() -> None:
    backoff = Backoff(exponential(0.1, 2.0))
    rng = random.Random(7)
    for retry in range(1, 12):
        base = backoff.base_delay_s(retry)
        for _ in range(50):
            delay = backoff.delay_s(retry, rng=rng)
            assert base / 2 <= delay <= base


class Fixed(random.Random):
    """A random.Random whose every draw is ``value``."""

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


def test_jitter_bounds_are_reached_at_the_extreme_draws() -> None:
    backoff = Backoff(exponential(0.4, 5.0))
    assert backoff.delay_s(2, rng=Fixed(0.0)) == pytest.approx(0.4)  # half of 0.8
    assert backoff.delay_s(2, rng=Fixed(0.5)) == pytest.approx(0.6)
    assert backoff.delay_s(2, rng=Fixed(1.0)) == pytest.approx(0.8)


def test_a_zero_exponential_delay_stays_zero_and_draws_nothing() -> None:
    backoff = Backoff(exponential(0.0, 5.0))
    rng = random.Random(3)
    assert backoff.delay_s(4, rng=rng) == 0.0
    assert rng.random() == random.Random(3).random()


def test_a_longer_retry_after_wins_and_is_capped_at_the_max_delay() -> None:
    backoff = Backoff(exponential(0.1, 2.0))
    # the jittered delay of retry 1 is 0.05..0.1: a hint of 1.5 s wins
    assert backoff.delay_s(1, retry_after_s=1.5, rng=Fixed(0.5)) == 1.5
    # a hint beyond retry.max-delay.ms is cut to it
    assert backoff.delay_s(1, retry_after_s=30.0, rng=Fixed(0.5)) == 2.0
    # a shorter hint loses to the backoff
    assert backoff.delay_s(3, retry_after_s=0.01, rng=Fixed(1.0)) == pytest.approx(0.4)
    fixed = Backoff(RetrySettings(backoff="fixed", initial_delay_s=0.3, max_delay_s=1.0))
    assert fixed.delay_s(1, retry_after_s=0.7) == 0.7
    assert fixed.delay_s(1, retry_after_s=0.1) == 0.3


def test_the_policy_retries_a_retryable_error_until_the_last_attempt() -> None:
    policy = RetryPolicy(RetrySettings(max_attempts=3))
    assert [policy.retry_error(attempt, True) for attempt in (1, 2, 3, 4)] == [
        True,
        True,
        False,
        False,
    ]
    assert [policy.retry_error(attempt, False) for attempt in (1, 2)] == [False, False]


def test_max_attempts_one_means_no_retry() -> None:
    policy = RetryPolicy(RetrySettings(max_attempts=1, on_miss=True))
    assert not policy.retry_error(1, True)
    assert not policy.retry_missing(1, 5)


@pytest.mark.parametrize(
    ("error", "retried"),
    [
        (TransientError("reset"), True),
        (LookupTimeoutError("slow"), True),
        (OverloadedError("429"), True),
        (ConnectionResetError("peer"), True),
        (TimeoutError(), True),
        (PermanentError("bad query"), False),
        (RecordError("malformed"), False),
        (KeyError("user"), False),
        (ValueError("nope"), False),
    ],
)
def test_which_errors_the_policy_retries(error: BaseException, retried: bool) -> None:
    policy = RetryPolicy(RetrySettings(max_attempts=5))
    assert policy.retry_error(1, is_retryable(error)) is retried


def test_missing_keys_are_asked_again_only_under_on_miss() -> None:
    on_miss = RetryPolicy(RetrySettings(max_attempts=3, on_miss=True))
    assert on_miss.retry_on_miss is True
    assert on_miss.retry_missing(1, 2) is True
    assert on_miss.retry_missing(2, 1) is True
    assert on_miss.retry_missing(3, 1) is False  # no attempt left
    assert on_miss.retry_missing(1, 0) is False  # nothing missing
    off = RetryPolicy(RetrySettings(max_attempts=3, on_miss=False))
    assert off.retry_on_miss is False
    assert off.retry_missing(1, 10) is False


def test_the_policy_delay_is_the_backoffs_for_the_next_attempt() -> None:
    settings = exponential(0.1, 5.0)
    policy = RetryPolicy(settings)
    assert policy.delay_s(3, rng=Fixed(1.0)) == pytest.approx(0.4)
    assert policy.delay_s(3, rng=random.Random(9)) == Backoff(settings).delay_s(
        3, rng=random.Random(9)
    )
    assert policy.delay_s(1, retry_after_s=0.75, rng=Fixed(0.0)) == 0.75


def test_a_final_failure_carries_its_last_error_and_attempts() -> None:
    cause = TransientError("connection reset by peer")
    failure = FinalFailure(cause, 3)
    assert failure.error is cause
    assert failure.attempts == 3
    assert str(failure) == "connection reset by peer"
    assert failure.args == ("connection reset by peer",)
    with pytest.raises(FinalFailure, match="connection reset") as raised:
        raise failure
    assert raised.value.attempts == 3
