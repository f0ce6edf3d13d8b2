"""Lookup metrics (lookup_source.engine.metrics): latencies in a fixed histogram of 10% buckets
(quantiles to within 10%, never above the largest seen), every counter added up by ``merge``
with peaks kept as the highest, the adaptive limit's history thinned evenly, a JSON round trip,
and a summary line that says only what happened."""

from __future__ import annotations

import dataclasses
import json

import pytest

from lookup_source.engine.metrics import BASE_MS, COUNTERS, GROWTH, LIMIT_POINTS, LookupMetrics


def test_no_latency_recorded_is_zero_at_every_quantile() -> None:
    metrics = LookupMetrics()
    assert metrics.latency_ms(0.5) == metrics.p99_ms == 0.0 and metrics.latency_samples() == []


def test_latency_quantiles_are_within_ten_percent_and_never_above_the_largest() -> None:
    metrics = LookupMetrics()
    for ms in range(1, 101):  # 1..100 ms
        metrics.record_latency(ms / 1000)
    assert metrics.latency_max_ms == pytest.approx(100.0)
    assert 50 <= metrics.p50_ms <= 50 * GROWTH
    assert 95 <= metrics.p95_ms <= 95 * GROWTH
    assert metrics.p99_ms <= 100.0 and metrics.latency_ms(1.0) == pytest.approx(100.0)
    samples = metrics.latency_samples()
    assert sum(count for _, count in samples) == 100
    assert [ms for ms, _ in samples] == sorted(ms for ms, _ in samples)
    assert samples[-1][0] == pytest.approx(100.0)  # the top bucket at the largest latency


def test_the_smallest_and_largest_latencies_land_in_the_end_buckets() -> None:
    metrics = LookupMetrics()
    metrics.record_latency(0.0)
    metrics.record_latency(BASE_MS / 1000)  # exactly the first bound
    metrics.record_latency(10 * 24 * 3600.0)  # ten days: beyond the last bucket's bound
    assert metrics.latency_buckets == {0: 2, 199: 1}
    assert metrics.latency_ms(0.5) == pytest.approx(BASE_MS)


def test_merge_adds_every_counter_and_keeps_the_highest_peaks() -> None:
    one = LookupMetrics(name="users", peak_in_flight=4, peak_rss_mb=100.0)
    other = LookupMetrics(name="orders", peak_in_flight=9, peak_rss_mb=50.0)
    for number, counter in enumerate(COUNTERS, start=1):
        setattr(one, counter, number)
        setattr(other, counter, 10 * number)
    one.record_latency(0.001)
    other.record_latency(0.001)
    other.record_latency(0.5)
    assert one.merge(other) is one
    assert all(getattr(one, c) == 11 * n for n, c in enumerate(COUNTERS, start=1))
    assert (one.peak_in_flight, one.peak_rss_mb) == (9, 100.0)
    assert one.latency_max_ms == pytest.approx(500.0)
    assert sum(one.latency_buckets.values()) == 3
    assert one.name == "users, orders"
    one.merge(LookupMetrics(name="orders")).merge(LookupMetrics())
    assert one.name == "users, orders"  # each name once


def test_merge_takes_the_strategy_and_budget_of_the_first_that_has_them() -> None:
    merged = LookupMetrics()
    merged.merge(LookupMetrics(strategy="broadcast", strategy_reason="small", budget="b1"))
    merged.merge(LookupMetrics(strategy="lookup", strategy_reason="large", budget="b2"))
    assert (merged.strategy, merged.strategy_reason, merged.budget) == ("broadcast", "small", "b1")


def test_the_limit_history_is_per_task_and_thinned_evenly_beyond_its_bound() -> None:
    metrics = LookupMetrics()
    assert metrics.limit_range is None
    for step in range(2 * LIMIT_POINTS + 1):
        metrics.record_limit(float(step), step + 1)
    points = metrics.limit_history[0]
    assert len(points) <= 2 * LIMIT_POINTS
    assert points[0] == (0.0, 1) and points[-1] == (2.0 * LIMIT_POINTS, 2 * LIMIT_POINTS + 1)
    assert metrics.limit_range == (1, 2 * LIMIT_POINTS + 1)

    merged = LookupMetrics()
    merged.merge(metrics)
    merged.merge(metrics)
    assert len(merged.limit_history) == 2  # one history per task
    assert merged.limit_history[0] is not metrics.limit_history[0]  # copied, not shared


def test_the_cache_hit_rate() -> None:
    assert LookupMetrics().cache_hit_rate == 0.0
    assert LookupMetrics(cache_hits=3, cache_misses=1).cache_hit_rate == 0.75


def test_metrics_round_trip_through_json() -> None:
    metrics = LookupMetrics(name="users", tasks=2, rows=5, budget_wait_ms=1.5, strategy="lookup")
    metrics.record_latency(0.003)
    metrics.record_limit(1_700_000_000.0, 8)
    text = metrics.to_json()
    assert isinstance(text, bytes) and json.loads(text)["rows"] == 5
    again = LookupMetrics.from_json(text)
    assert again == metrics and again.limit_history == [[(1_700_000_000.0, 8)]]
    assert LookupMetrics.from_json(text.decode()) == metrics
    assert set(COUNTERS) <= {field.name for field in dataclasses.fields(LookupMetrics)}


def test_the_summary_says_only_what_happened() -> None:
    plain = str(LookupMetrics(rows=1234, tasks=1))
    assert plain.startswith("asynclookup: 1,234 rows") and plain.endswith("over 1 task(s)")
    for absent in ("hedged", "shared cache", "budget", "strategy", "adaptive"):
        assert absent not in plain
    busy = LookupMetrics(
        name="users",
        hedges=3,
        hedges_won=1,
        shared_hits=2,
        shared_rejected=1,
        budget="coordinated (api)",
        budget_waits=4,
        budget_wait_ms=2500.0,
        budget_fallbacks=1,
        strategy="scan",
        strategy_reason="small table",
    )
    busy.record_limit(0.0, 4)
    busy.record_limit(1.0, 12)
    text = str(busy)
    assert text.startswith("asynclookup users: ")
    assert "3 hedged requests (1 answered first)" in text
    assert "shared cache 2 hits, 0 misses, 0 errors, 1 rejected" in text
    assert "adaptive concurrency limit 4..12" in text
    assert "budget coordinated (api): 4 waits (2.5 s), 0 grants, 1 fallbacks" in text
    assert text.endswith("; strategy scan (small table)")
