"""How a request's attempts are repeated: retries (:class:`RetrySettings`) and hedges
(:class:`HedgeSettings`)."""

from __future__ import annotations

from dataclasses import dataclass

from lookup_source.connector_api.options import choice, int_between, parse_bool
from lookup_source.settings.declare import MAX_DURATION_MS, duration_ms, option


@dataclass(frozen=True)
class RetrySettings:
    """How failed attempts (and, with ``retry.on-miss``, missing keys) are tried again."""

    max_attempts: int = option(
        "retry.max-attempts",
        int_between(1, 1_000_000),
        3,
        "Attempts per request, the first included (1 = no retry). Only errors that can "
        "succeed on retry (timeouts, dropped connections, 429/503) are retried.",
    )
    backoff: str = option(
        "retry.backoff",
        choice("exponential", "fixed"),
        "exponential",
        "`exponential` (doubling, with jitter) or `fixed` delay between attempts.",
    )
    initial_delay_s: float = duration_ms(
        "retry.initial-delay.ms", 100, "Delay before the first retry."
    )
    max_delay_s: float = duration_ms("retry.max-delay.ms", 5_000, "Longest delay between tries.")
    on_miss: bool = option(
        "retry.on-miss",
        parse_bool,
        False,
        "Retry a missing key with the same backoff before treating it as missing (dimension "
        "rows that arrive after the facts).",
    )


HEDGE_FALLBACK_MS = 200
"""``hedge.after.ms=pNN``: the delay before enough answers are known to take the quantile of,
unless given beside it (``p95,50``)."""


@dataclass(frozen=True)
class HedgeAfter:
    """When a request is hedged: after a fixed delay (``seconds``), or once it has taken longer
    than the ``quantile`` of the recent answers' latencies — after ``seconds`` until enough
    answers are known."""

    seconds: float = 0.0
    quantile: float = 0.0

    def __str__(self) -> str:
        if self.quantile:
            return f"p{self.quantile * 100:g},{self.seconds * 1000:g}"
        return f"{self.seconds * 1000:g}"


def _hedge_ms(text: str, value: str) -> float:
    try:
        ms = float(text)
    except ValueError:
        raise ValueError(
            f"expected milliseconds (such as 50), a latency quantile (such as p95, or p95,50 "
            f"with the delay before enough answers are known), or 0 for no hedging, got "
            f"{value!r}"
        ) from None
    if not 0 < ms <= MAX_DURATION_MS:
        raise ValueError(
            f"must be a positive number of milliseconds of at most {MAX_DURATION_MS:,}, "
            f"got {value!r}"
        )
    return ms


def parse_hedge_after(value: str) -> HedgeAfter | None:
    """``hedge.after.ms``: milliseconds (``50``), a quantile of recent latencies (``p95``,
    ``p99.9``; with the delay used until 20 answers are known: ``p95,50``, else
    :data:`HEDGE_FALLBACK_MS`), or 0 / ``off`` (no hedging)."""
    text = value.strip().lower()
    if text in ("", "0", "off", "none", "false"):
        return None
    if text.startswith("p"):
        quantile, _, fallback = text[1:].partition(",")
        try:
            percent = float(quantile)
        except ValueError:
            percent = -1.0
        if not 50 <= percent < 100:
            raise ValueError(
                f"expected a latency quantile from p50 to p99.99 (such as p95), got {value!r}"
            )
        ms = _hedge_ms(fallback.strip(), value) if fallback.strip() else HEDGE_FALLBACK_MS
        return HedgeAfter(seconds=ms / 1000.0, quantile=round(percent / 100.0, 6))
    return HedgeAfter(seconds=_hedge_ms(text, value) / 1000.0)


def _share(value: str) -> float:
    try:
        share = float(value.strip().rstrip("%")) / (100.0 if value.strip().endswith("%") else 1.0)
    except ValueError:
        raise ValueError(f"expected a share such as 0.05 or 5%, got {value!r}") from None
    if not 0 < share <= 1:
        raise ValueError(f"must be above 0 and at most 1 (or 100%), got {value!r}")
    return share


@dataclass(frozen=True)
class HedgeSettings:
    """Hedged requests: past a delay, the same read is sent again and the first answer wins."""

    after: HedgeAfter | None = option(
        "hedge.after.ms",
        parse_hedge_after,
        None,
        "Hedge a request still unanswered after this many ms, or after a latency quantile of "
        "the worker's recent answers (`p95`, `p99`; until 20 answers are known, after "
        f"{HEDGE_FALLBACK_MS} ms, or the delay given beside it: `p95,50`): the same keys are "
        "asked again, the first answer wins, the other request is cancelled. At most one "
        "hedge per request; a hedge waits for a free `capacity` slot (before any new request) "
        "and for `rate.limit`, and ends within the attempt's `timeout.ms`. Off by default.",
        default_doc="(off)",
    )
    budget: float = option(
        "hedge.budget",
        _share,
        0.05,
        "Most hedges as a share of requests (each request earns this share of a hedge, a "
        "hedge spends a whole one; the budget saves up what 1,000 requests earn, at least 10, "
        "and starts full, so a job's first slow requests are hedged too): the extra load "
        "hedging may put on the store.",
    )
