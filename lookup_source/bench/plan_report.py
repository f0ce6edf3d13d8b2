"""The plan scenario's report: its Markdown tables (each plan against Spark's JDBC reader and a
join, the scans alone, the stream), its JSON, and ``plans.png`` (time against input size, with
where lookups and a scan cross)."""

from __future__ import annotations

import itertools
import os
from dataclasses import asdict
from typing import Any

from lookup_source.bench.plan_result import PlanResult
from lookup_source.bench.plan_versions import POINT_IN_TIME


def plan_report(results: list[PlanResult], args: Any) -> list[str]:
    lines = [
        "## Plans: lookups, a broadcast or a scan, against Spark's JDBC reader and a join",
        "",
        f"A Postgres table of {args.plan_table_rows:,} rows; {args.tasks} tasks; the best of "
        "two runs of each. Each answer is checked against the JDBC join's (rows and a hash of "
        "every column).",
        "",
        "| input rows | distinct keys | method | seconds | ÷ JDBC + join | note |",
        "|---|---|---|---|---|---|",
    ]
    jdbc = {
        (_part(r.method), r.input_rows): r.seconds
        for r in results
        if r.method.endswith("Spark JDBC + join")
    }
    for r in results:
        if r.method in ("Spark JDBC read", "data source scan") or r.method.startswith("stream"):
            continue
        base = jdbc.get((_part(r.method), r.input_rows))
        ratio = f"{base / r.seconds:.2f}x" if base and r.seconds else "—"
        seconds = f"{r.seconds:.2f}" if r.seconds else "—"
        lines.append(
            f"| {r.input_rows:,} | {r.distinct_keys:,} | {r.method} | {seconds} | {ratio} | "
            f"{r.note} |"
        )
    scans = [r for r in results if r.method in ("Spark JDBC read", "data source scan")]
    if scans:
        lines += ["", "| the table read whole | seconds | rows/s |", "|---|---|---|"]
        lines += [
            f"| {r.method} ({r.note}) | {r.seconds:.2f} | {r.rows_per_s:,.0f} |" for r in scans
        ]
    streams = [r for r in results if r.method.startswith("stream")]
    if streams:
        lines += ["", "| a stream joined to the table | median addBatch | note |", "|---|---|---|"]
        lines += [f"| {r.method} | {r.seconds * 1000:.0f} ms | {r.note} |" for r in streams]
    return lines


def _part(method: str) -> str:
    """The part of the scenario a method belongs to (``point-in-time: ...``; the plain
    join's: empty), compared with its own part's JDBC join."""
    return method.split(": ", 1)[0] if method.startswith(POINT_IN_TIME) else ""


def as_json(results: list[PlanResult]) -> list[dict[str, Any]]:
    return [{**asdict(r), "rows_per_s": r.rows_per_s} for r in results]


def plot_plans(results: list[PlanResult], out: str) -> None:
    """Time against input size for each plan (log-log), written to ``plans.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    reads = ("Spark JDBC read", "data source scan")
    runs = [
        r
        for r in results
        if r.seconds
        and r.method not in reads
        and not r.method.startswith(("stream", POINT_IN_TIME))
    ]
    if not runs:
        return
    figure, axis = plt.subplots(figsize=(7, 4.5))
    for method in dict.fromkeys(r.method for r in runs):
        points = sorted((r.input_rows, r.seconds) for r in runs if r.method == method)
        axis.plot(*zip(*points), marker="o", label=method)
    crossing = crossover(runs, "lookup", "scan")
    if crossing is not None:
        axis.axvline(crossing, color="grey", linestyle="--")
        axis.annotate(
            f"lookup = scan at ~{crossing:,.0f} rows",
            (crossing, axis.get_ylim()[1]),
            rotation=90,
            va="top",
            ha="right",
            fontsize=8,
        )
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_xlabel("input rows")
    axis.set_ylabel("seconds")
    axis.set_title("Plans over a Postgres table: time against input size")
    axis.legend()
    axis.grid(True, which="both", alpha=0.3)
    figure.tight_layout()
    figure.savefig(os.path.join(out, "plans.png"), dpi=110)
    plt.close(figure)


def crossover(results: list[PlanResult], first: str, second: str) -> float | None:
    """The input size where ``first`` and ``second`` take the same time, interpolated (in logs)
    between the two measured sizes where the faster of them changes; None if it never does."""
    import math

    times: dict[int, dict[str, float]] = {}
    for r in results:
        if r.method in (first, second) and r.seconds:
            times.setdefault(r.input_rows, {})[r.method] = r.seconds
    points = sorted((n, t[first], t[second]) for n, t in times.items() if len(t) == 2)
    for (n0, a0, b0), (n1, a1, b1) in itertools.pairwise(points):
        d0, d1 = math.log(a0 / b0), math.log(a1 / b1)
        if d0 == 0:
            return float(n0)
        if d0 * d1 < 0:
            share = d0 / (d0 - d1)
            return math.exp(math.log(n0) + share * (math.log(n1) - math.log(n0)))
    return None
