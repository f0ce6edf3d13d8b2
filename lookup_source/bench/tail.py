"""The tail scenario (``--scenarios tail``): an HTTP service where 1% of requests take 500 ms
and the rest 5 ms, looked up per key without hedging, hedged past a fixed delay and past the
recent p95; the same where the first request for every 50th key takes 500 ms (a cold cache
behind the service: a job's first requests, the first key of each partition among them), each
run a lookup of its own (a fresh hedge budget); then the shared cache tier: the requests a
first and a second run make. Each run reports its job time and its requests' p50 and p99."""

from __future__ import annotations

import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from lookup_source.bench.stores import SCHEMA
from lookup_source.bench.timing import timed
from lookup_source.service import UserService

TAIL_SHARE = 0.01
TAIL_MS = 500.0
LATENCY_MS = 5.0
SLOW_FIRST = 50
"""The slow-first-answers runs: the first request for every 50th key takes ``TAIL_MS``."""


@dataclass
class TailResult:
    method: str
    rows: int
    seconds: float
    requests: int
    hedges: int = 0
    hedges_won: int = 0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    max_ms: float = 0.0
    shared_hits: int = 0
    shared_errors: int = 0

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0


def run_tail(df: Any, args: Any) -> list[TailResult]:
    """The runs of the scenario over ``df`` (event_id, user_id), cached by the caller."""

    results: list[TailResult] = []
    with UserService(
        users=args.users, latency_ms=LATENCY_MS, tail_share=TAIL_SHARE, tail_ms=TAIL_MS
    ) as service:
        base = {"connector": "http", "url": service.url, "capacity": str(args.capacity)}
        namespace = uuid.uuid4().hex[:12]  # this run's shared answers only
        shared = {"cache.shared.url": args.redis_url, "cache.shared.namespace": namespace}
        runs = [
            ("no hedging", base),
            ("hedge.after.ms=50", {**base, "hedge.after.ms": "50"}),
            ("hedge.after.ms=p95", {**base, "hedge.after.ms": "p95"}),
            ("shared tier, first run", {**base, **shared}),
            ("shared tier, second run", {**base, **shared}),
        ]
        results += _runs(df, service, runs)
    with UserService(
        users=args.users, latency_ms=LATENCY_MS, tail_ms=TAIL_MS, slow_first_every=SLOW_FIRST
    ) as service:
        runs = []
        for label, hedge in (("no hedging", None), ("hedge.after.ms=50", "50"), ("p95", "p95")):
            # another URL per run: a lookup of its own (its budget fresh), its first requests
            options = {"connector": "http", "url": f"{service.url}?run={len(runs)}"}
            options["capacity"] = str(args.capacity)
            if hedge is not None:
                options["hedge.after.ms"] = hedge
            runs.append((f"slow first answers, {label}", options))
        results += _runs(df, service, runs, fresh=True)
    return results


def _runs(
    df: Any, service: UserService, runs: list[tuple[str, dict[str, str]]], *, fresh: bool = False
) -> list[TailResult]:
    from lookup_source import lookup_join, lookup_metrics

    results = []
    for label, options in runs:
        print(f"  tail: {label} ...", flush=True)
        if fresh:
            service.forget_asked()  # every run meets the slow first answers
        before = service.request_count()
        out = lookup_join(df, "user_id", schema=SCHEMA, options=options)
        seconds = timed(out)
        metrics = lookup_metrics(out)
        results.append(
            TailResult(
                label,
                metrics.rows,
                seconds,
                service.request_count() - before,
                metrics.hedges,
                metrics.hedges_won,
                metrics.p50_ms,
                metrics.p99_ms,
                metrics.latency_max_ms,
                metrics.shared_hits,
                metrics.shared_errors,
            )
        )
        time.sleep(0.2)  # the shared tier's last writes
    return results


def tail_report(results: list[TailResult], args: Any) -> list[str]:
    lines = [
        f"### tail: HTTP per key, {LATENCY_MS:g} ms, {TAIL_SHARE:.0%} of requests {TAIL_MS:g} ms;"
        f" or the first request for every {SLOW_FIRST}th key {TAIL_MS:g} ms",
        "",
        f"{results[0].rows:,} rows, capacity {args.capacity}, {args.tasks} tasks.",
        "",
        "| run | rows/s | job s | requests to the service | hedges (won) | p50 ms | p99 ms "
        "| max ms | shared hits (errors) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.method} | {r.rows_per_s:,.0f} | {r.seconds:.2f} | {r.requests:,} | "
            f"{r.hedges:,} ({r.hedges_won:,}) | {r.p50_ms:.1f} | {r.p99_ms:.1f} | "
            f"{r.max_ms:.1f} | {r.shared_hits:,} ({r.shared_errors}) |"
        )
    return [*lines, ""]


def as_json(results: list[TailResult]) -> list[dict[str, Any]]:
    return [{**asdict(r), "rows_per_s": r.rows_per_s} for r in results]
