"""The Markdown report of the throughput, sweep and memory scenarios (the first part of
``results.md``): a table per scenario and key distribution with CPU per row by process, the
capacity sweep, the memory runs, and the targets, met or missed."""

from __future__ import annotations

from typing import Any

from lookup_source.bench.context import POSTGRES_THREADS, Result
from lookup_source.bench.cpu import GROUPS


def _groups(results: list[Result]) -> dict[tuple[str, str], list[Result]]:
    groups: dict[tuple[str, str], list[Result]] = {}
    for r in results:
        groups.setdefault((r.scenario, r.distribution), []).append(r)
    return groups


def _find(group: list[Result], prefix: str) -> Result | None:
    return next((r for r in group if r.method.startswith(prefix) and r.rows_per_s), None)


def _ratio(a: Result | None, b: Result | None) -> float | None:
    return a.rows_per_s / b.rows_per_s if a and b and b.rows_per_s else None


def targets(results: list[Result]) -> list[tuple[str, str, float | None, bool | None]]:
    """(scenario, target, measured ratio, met) for the targets of the columnar issue."""
    out: list[tuple[str, str, float | None, bool | None]] = []

    def check(
        scenario: str, text: str, ratio: float | None, goal: float, above: bool = True
    ) -> None:
        met = None if ratio is None else (ratio >= goal if above else ratio <= goal)
        out.append((scenario, text, ratio, met))

    for (scenario, _), group in _groups(results).items():
        ours = _find(group, "asynclookup ordered")
        raw = _find(group, "raw async client")
        loop = _find(group, "sync batched loop")
        sql = _find(group, "asynclookup SQL table function")
        if scenario == "redis":
            check(scenario, "≥ 1.5x the raw redis-py MGET + msgspec client", _ratio(ours, raw), 1.5)
            check(scenario, "≥ 2x the synchronous MGET loop", _ratio(ours, loop), 2.0)
        if scenario.startswith("redis,"):
            check(scenario, "≥ 3x the synchronous MGET loop", _ratio(ours, loop), 3.0)
        if scenario == "postgres":
            check(scenario, "≥ 1.2x the raw asyncpg = ANY client", _ratio(ours, raw), 1.2)
            check(scenario, "≥ 3x the synchronous = ANY loop", _ratio(ours, loop), 3.0)
        if scenario == "http-get-5ms":
            check(scenario, "≥ 0.95x the raw aiohttp client", _ratio(ours, raw), 0.95)
        if scenario == "http-batch-5ms":
            check(scenario, "≥ 0.8x the raw aiohttp client", _ratio(ours, raw), 0.8)
        if sql and ours:
            check(scenario, "SQL table function ≥ 0.8x lookup_join", _ratio(sql, ours), 0.8)
    memory = [r for r in results if r.scenario == "memory (redis)"]
    if len(memory) >= 2 and memory[0].peak_memory_mb:
        ratio = memory[-1].peak_memory_mb / memory[0].peak_memory_mb
        check(
            "memory",
            f"peak worker memory for {memory[-1].rows:,} rows ≤ 1.1x that for {memory[0].rows:,}",
            ratio,
            1.1,
            above=False,
        )
    return out


def report(results: list[Result], args: Any, machine: str) -> str:
    lines = [
        f"Machine: {machine}",
        "",
        f"{args.tasks} tasks, capacity {args.capacity} per task (threaded methods: as many "
        f"threads; Postgres: at most {POSTGRES_THREADS}), {args.users:,} keys. Ratios: "
        "asynclookup (ordered) / method.",
        "",
    ]
    header = (
        "| scenario | keys | method | rows/s | asynclookup ÷ method | requests "
        "| peak worker MB | note |"
    )
    sweep = [r for r in results if r.scenario.startswith("sweep")]
    memory = [r for r in results if r.scenario == "memory (redis)"]
    fanned = [r for r in results if r.scenario.startswith("memory fan-out")]
    rest = [r for r in results if r not in sweep and r not in memory and r not in fanned]
    for (scenario, distribution), group in _groups(rest).items():
        ours = _find(group, "asynclookup ordered")
        lines += [
            f"### {scenario}, {distribution} keys",
            "",
            header,
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in group:
            ratio = _ratio(ours, r)
            requests = f"{r.requests:,}" if r.requests >= 0 else ""
            memory_mb = f"{r.peak_memory_mb:,.0f}" if r.peak_memory_mb else ""
            note = r.note.replace("|", "/").replace("\n", " ")
            lines.append(
                f"| {scenario} | {distribution} | {r.method} | {r.rows_per_s:,.0f} | "
                f"{f'{ratio:.2f}x' if ratio else ''} | {requests} | {memory_mb} | {note} |"
            )
        ceiling, spark_floor = _find(group, "raw async client"), _find(group, "Spark floor")
        lines.append("")
        lines += _cpu_table(group, ours, ceiling, spark_floor)
        if ours and ceiling:
            lines.append(f"asynclookup runs at {_ratio(ours, ceiling):.2f}x the raw client alone.")
        if ours and spark_floor:
            lines.append(
                f"asynclookup runs at {_ratio(ours, spark_floor):.0%} of the Spark floor "
                "(the same mapInArrow with no I/O)."
            )
        lines.append("")
    if sweep:
        lines += [
            f"### capacity sweep: HTTP per key, {args.sweep_latency_ms:g} ms",
            "",
            "| capacity per task | Little's law bound | asynclookup | Arrow UDF, same concurrency "
            "| asynclookup ÷ Arrow UDF |",
            "|---|---|---|---|---|",
        ]
        for capacity in sorted({r.capacity for r in sweep}):
            at = [r for r in sweep if r.capacity == capacity]
            ours, threads = _find(at, "asynclookup"), _find(at, "Arrow UDF")
            bound = _find(at, "Little")
            ratio = _ratio(ours, threads)
            cells = [r.rows_per_s if r else 0.0 for r in (bound, ours, threads)]
            lines.append(
                f"| {capacity:,} | {cells[0]:,.0f} | {cells[1]:,.0f} | {cells[2]:,.0f} "
                f"| {f'{ratio:.2f}x' if ratio else ''} |"
            )
        lines.append("")
    if memory:
        lines += [
            "### memory: lookup_join over Redis, a fresh Python worker per task",
            "",
            "| input rows | seconds | rows/s | peak Python worker memory (MB) |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {r.rows:,} | {r.seconds:.1f} | {r.rows_per_s:,.0f} | {r.peak_memory_mb:,.0f} |"
            for r in memory
        ]
        lines.append("")
    if fanned:
        lines += [
            "### memory: one key with many matches (Postgres), one task",
            "",
            "| input | output rows | seconds | peak Python worker memory (MB) |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {r.note} | {r.rows:,} | {r.seconds:.1f} | {r.peak_memory_mb:,.0f} |" for r in fanned
        ]
        lines.append("")
    checks = targets(results)
    if checks:
        lines += ["### targets", "", "| scenario | target | measured | |", "|---|---|---|---|"]
        for scenario, text, ratio, met in checks:
            verdict = "" if met is None else ("met" if met else "**missed**")
            lines.append(
                f"| {scenario} | {text} | {f'{ratio:.2f}x' if ratio is not None else 'n/a'} | "
                f"{verdict} |"
            )
        lines.append("")
    return "\n".join(lines)


_GROUP_NAMES = {
    "spark_jvm": "Spark JVM",
    "python_workers": "Python workers",
    "store": "store server",
    "bench": "bench process",
    "raw_client": "raw client",
}


def _cpu_table(
    group: list[Result], ours: Result | None, ceiling: Result | None, spark_floor: Result | None
) -> list[str]:
    """CPU per row by process group, and asynclookup against the sum of its parts."""
    measured = [r for r in group if r.cpu_us_per_row]
    if not measured:
        return []
    header = " | ".join(_GROUP_NAMES[g] for g in GROUPS)
    lines = [
        "CPU per row, core-µs (the least of the runs), by process:",
        "",
        f"| method | total | {header} |",
        "|---|---|" + "---|" * len(GROUPS),
    ]
    for r in measured:
        cells = " | ".join(f"{r.cpu_us_per_row.get(g, 0.0):.2f}" for g in GROUPS)
        lines.append(f"| {r.method} | **{r.cpu_us_per_row['total']:.2f}** | {cells} |")
    lines.append("")
    if ours and ceiling and spark_floor and ours.cpu_us_per_row and ceiling.cpu_us_per_row:
        parts = ceiling.cpu_us_per_row["total"] + spark_floor.cpu_us_per_row.get("total", 0.0)
        lines.append(
            f"asynclookup costs {ours.cpu_us_per_row['total'] / parts:.2f}x its parts "
            f"(raw client with its server, {ceiling.cpu_us_per_row['total']:.2f}, + Spark floor, "
            f"{spark_floor.cpu_us_per_row.get('total', 0.0):.2f} core-µs per row)."
        )
        lines.append("")
    return lines
