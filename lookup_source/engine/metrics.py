"""Lookup metrics: counted per task by the engine, and merged (:meth:`LookupMetrics.merge`).

The Spark layer merges the metrics of every task on the driver
(:mod:`lookup_source.spark.metrics`); nothing here depends on Spark.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field

BASE_MS = 0.01
GROWTH = 1.1
"""Latency buckets: bucket ``i`` holds latencies up to ``BASE_MS * GROWTH**i`` ms."""
_BUCKETS = 200  # up to 0.01 ms * 1.1**200 ≈ 19 hours


_PER_BUCKET = 1 / math.log(GROWTH)

LIMIT_POINTS = 500


COUNTERS = (
    "tasks",
    "rows",
    "keys",
    "null_keys",
    "requests",
    "retries",
    "timeouts",
    "failed_requests",
    "failed_keys",
    "missing_keys",
    "cache_hits",
    "cache_misses",
    "shared_keys",
    "hedges",
    "hedges_won",
    "shared_hits",
    "shared_misses",
    "shared_errors",
    "shared_rejected",
    "budget_waits",
    "budget_wait_ms",
    "budget_grants",
    "budget_fallbacks",
    "unfit_keys",
    "unequal_matches",
)
"""The fields of :class:`LookupMetrics` that add up over tasks (:meth:`LookupMetrics.merge`)."""


def _bucket(ms: float) -> int:
    if ms <= BASE_MS:
        return 0
    return min(_BUCKETS - 1, int(math.log(ms / BASE_MS) * _PER_BUCKET) + 1)


@dataclass
class LookupMetrics:
    """Counters of one task, or of many merged. Latencies are kept in a fixed histogram
    (10% wide buckets), so memory stays constant whatever the number of requests."""

    name: str = ""
    """The lookup's name (``lookup_join(name=...)``); several, comma-separated, when the
    metrics of several lookups are merged."""
    tasks: int = 0
    rows: int = 0
    keys: int = 0
    null_keys: int = 0
    requests: int = 0
    retries: int = 0
    timeouts: int = 0
    failed_requests: int = 0
    failed_keys: int = 0
    missing_keys: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    shared_keys: int = 0
    hedges: int = 0
    """Requests sent again past ``hedge.after.ms`` (counted in ``requests`` too)."""
    hedges_won: int = 0
    """Hedges whose answer came first."""
    shared_hits: int = 0
    """Keys answered by the shared cache tier (``cache.shared.url``)."""
    shared_misses: int = 0
    """Keys the shared tier did not hold, asked of the store."""
    shared_errors: int = 0
    """Reads and writes of the shared tier that failed or timed out (the keys went to the
    store)."""
    shared_rejected: int = 0
    """Values of the shared tier not believed — a tag that does not match (written without
    the lookup's identity, changed, or moved from another key), out of bounds, or malformed —
    each a miss, asked of the store."""
    budget: str = ""
    """With a budget (``budget.*``): ``coordinated (<name>)`` or ``static split over <n> tasks
    (<name>)``."""
    budget_waits: int = 0
    """Requests that waited for the budget (a lease, a request slot or cost units)."""
    budget_wait_ms: float = 0.0
    """How long they waited, in all."""
    budget_grants: int = 0
    """Calls to the budget's coordinator that answered (grants, renewals, leases given back)."""
    budget_fallbacks: int = 0
    """Times a task fell back to its static share because the coordinator failed or was
    slow."""
    unfit_keys: int = 0
    """Keys the store's key type cannot hold (out of its range, a NUL in text, too long):
    misses under ``on.unfit-key=miss`` (a SQL JOIN's), failed keys under ``error``."""
    unequal_matches: int = 0
    """Matches the store gave for a key that Spark's comparison does not equal (``'EU'`` for
    ``'eu'`` under a case-insensitive collation), dropped under ``key.equality=spark``."""
    peak_in_flight: int = 0
    peak_rss_mb: float = 0.0
    latency_max_ms: float = 0.0
    latency_buckets: dict[int, int] = field(default_factory=dict, repr=False)
    strategy: str = ""
    """How the lookup_join ran: ``lookup``, ``broadcast`` or ``scan`` (``strategy``), and why."""
    strategy_reason: str = ""
    limit_history: list[list[tuple[float, int]]] = field(default_factory=list, repr=False)
    """``capacity.adaptive``: for each task, (unix time, concurrency limit) at its start and at
    each change (at most :data:`LIMIT_POINTS` per task, thinned evenly beyond that)."""

    def record_limit(self, when: float, limit: int) -> None:
        """This task's concurrency limit became ``limit`` at ``when`` (unix time)."""
        if not self.limit_history:
            self.limit_history.append([])
        points = self.limit_history[0]
        points.append((when, limit))
        if len(points) > 2 * LIMIT_POINTS:  # keep the first and last, thin the rest evenly
            points[1:-1] = points[1:-1:2]

    @property
    def limit_range(self) -> tuple[int, int] | None:
        """The lowest and highest concurrency limit of any task (None: a fixed capacity)."""
        limits = [limit for task in self.limit_history for _, limit in task]
        return (min(limits), max(limits)) if limits else None

    def record_latency(self, seconds: float) -> None:
        ms = seconds * 1000.0
        index = _bucket(ms)
        self.latency_buckets[index] = self.latency_buckets.get(index, 0) + 1
        self.latency_max_ms = max(self.latency_max_ms, ms)

    def merge(self, other: LookupMetrics) -> LookupMetrics:
        """Add ``other`` into this one (peak in flight: the highest of any task)."""
        for name in COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.peak_in_flight = max(self.peak_in_flight, other.peak_in_flight)
        self.peak_rss_mb = max(self.peak_rss_mb, other.peak_rss_mb)
        self.latency_max_ms = max(self.latency_max_ms, other.latency_max_ms)
        for index, count in other.latency_buckets.items():
            self.latency_buckets[index] = self.latency_buckets.get(index, 0) + count
        self.limit_history.extend(list(points) for points in other.limit_history)
        if not self.strategy:
            self.strategy, self.strategy_reason = other.strategy, other.strategy_reason
        if not self.budget:
            self.budget = other.budget
        if other.name and other.name not in self.name.split(", "):
            self.name = f"{self.name}, {other.name}" if self.name else other.name
        return self

    def latency_samples(self) -> list[tuple[float, int]]:
        """The latency histogram as (milliseconds, requests) pairs, one per bucket in use,
        lowest first: each bucket at its upper bound (at most the largest latency seen), so a
        quantile of the pairs is :meth:`latency_ms`'s. How a task's latencies travel to the
        driver in rows (``percentile(latency_ms, q, requests)`` over every task's pairs).

        >>> m = LookupMetrics()
        >>> for seconds in (0.001, 0.001, 0.004):
        ...     m.record_latency(seconds)
        >>> [(round(ms, 2), n) for ms, n in m.latency_samples()]
        [(1.07, 2), (4.0, 1)]
        """
        return [
            (min(BASE_MS * GROWTH**index, self.latency_max_ms), self.latency_buckets[index])
            for index in sorted(self.latency_buckets)
        ]

    def latency_ms(self, quantile: float) -> float:
        """Request latency at ``quantile`` (0..1), to within 10%; 0 when nothing was sent."""
        total = sum(self.latency_buckets.values())
        if not total:
            return 0.0
        rank = quantile * total
        seen = 0
        for index in sorted(self.latency_buckets):
            seen += self.latency_buckets[index]
            if seen >= rank:
                upper = BASE_MS * GROWTH**index
                return min(upper, self.latency_max_ms)
        return self.latency_max_ms

    @property
    def p50_ms(self) -> float:
        return self.latency_ms(0.50)

    @property
    def p95_ms(self) -> float:
        return self.latency_ms(0.95)

    @property
    def p99_ms(self) -> float:
        return self.latency_ms(0.99)

    @property
    def cache_hit_rate(self) -> float:
        looked = self.cache_hits + self.cache_misses
        return self.cache_hits / looked if looked else 0.0

    def to_json(self) -> bytes:
        """These metrics as JSON (how a task hands them to the driver where there is no
        accumulator: Spark Connect). :meth:`from_json` reads them back.

        >>> m = LookupMetrics(tasks=1, rows=3)
        >>> m.record_latency(0.002)
        >>> LookupMetrics.from_json(m.to_json()) == m
        True
        """
        data = asdict(self)
        data["latency_buckets"] = {str(k): v for k, v in self.latency_buckets.items()}
        return json.dumps(data, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, text: bytes | str) -> LookupMetrics:
        data = json.loads(text)
        data["latency_buckets"] = {int(k): v for k, v in data["latency_buckets"].items()}
        data["limit_history"] = [
            [(when, limit) for when, limit in task] for task in data["limit_history"]
        ]
        return cls(**data)

    def __str__(self) -> str:
        label = f"asynclookup {self.name}" if self.name else "asynclookup"
        return (
            f"{label}: {self.rows:,} rows, {self.keys:,} distinct keys per batch, "
            f"{self.requests:,} requests, {self.cache_hits:,} cache hits, "
            f"{self.shared_keys:,} keys shared with a request in flight, "
            f"{self.retries:,} retries, {self.timeouts:,} timeouts, "
            f"{self.failed_keys:,} failed keys, {self.missing_keys:,} missing, "
            f"peak {self.peak_in_flight} in flight, latency p50 {self.p50_ms:.1f} ms, "
            f"p95 {self.p95_ms:.1f} ms, p99 {self.p99_ms:.1f} ms, max {self.latency_max_ms:.1f} ms"
            f" over {self.tasks} task(s)"
            + self._hedge_text()
            + self._shared_text()
            + self._limit_text()
            + self._budget_text()
            + self._strategy_text()
        )

    def _hedge_text(self) -> str:
        if not self.hedges:
            return ""
        return f", {self.hedges:,} hedged requests ({self.hedges_won:,} answered first)"

    def _shared_text(self) -> str:
        if not (self.shared_hits or self.shared_misses or self.shared_errors):
            return ""
        rejected = f", {self.shared_rejected:,} rejected" if self.shared_rejected else ""
        return (
            f", shared cache {self.shared_hits:,} hits, {self.shared_misses:,} misses, "
            f"{self.shared_errors:,} errors{rejected}"
        )

    def _budget_text(self) -> str:
        if not self.budget:
            return ""
        fallbacks = f", {self.budget_fallbacks:,} fallbacks" if self.budget_fallbacks else ""
        return (
            f", budget {self.budget}: {self.budget_waits:,} waits "
            f"({self.budget_wait_ms / 1000:.1f} s), {self.budget_grants:,} grants{fallbacks}"
        )

    def _strategy_text(self) -> str:
        if not self.strategy:
            return ""
        return f"; strategy {self.strategy} ({self.strategy_reason})"

    def _limit_text(self) -> str:
        if self.limit_range is None:
            return ""
        low, high = self.limit_range
        return f", adaptive concurrency limit {low}..{high}"
