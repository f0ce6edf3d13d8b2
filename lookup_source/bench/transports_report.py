"""The report of the ``http-transports`` scenario (:mod:`.transports`): rows/s and CPU per
GET by method, ratios to 0.5's connector and to each peer, and the issue's targets."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from lookup_source.bench.context import Result
from lookup_source.bench.stores import gets_of, service_of
from lookup_source.bench.transports import TRANSPORTS, TransportRun

SERVICE_LABELS = {
    "python": "service: Python (aiohttp, in the bench process)",
    "nginx": "service: nginx (native; GETs answered by {gets})",
}
"""The service that answered, as the report's title says it; its CPU per GET is the
``service`` column (the bench process's and the store server's)."""


def service_label(scenario: str) -> str:
    """The report's words for the service of ``scenario`` (nginx: which of its handlers
    answered the GETs, as the scenario's name records it)."""
    service = service_of(scenario)
    if service != "nginx":
        return SERVICE_LABELS[service]
    by_directives = gets_of(scenario) == "directives"
    return SERVICE_LABELS[service].format(
        gets="its own directives (echo module)" if by_directives else "njs"
    )


# -- report ------------------------------------------------------------------------------------


def transports_report(runs: list[TransportRun], args: Any) -> list[str]:
    if not runs:
        return []
    today = _find(runs, "asynclookup", "aiohttp", "asyncio")
    raw_aiohttp = _find(runs, "raw", "aiohttp", "asyncio")
    peers = {r.client: r.result for r in runs if r.kind == "peer" and r.result.rows_per_s}
    lines = [
        f"### http-transports: per-key GET at {args.transports_latency_ms:g} ms, "
        f"{args.transports_keys:,} distinct keys, capacity {args.capacity} x {args.tasks} tasks, "
        f"{service_label(runs[0].result.scenario)}",
        "",
        "| method | rows/s | ÷ 0.5's connector | ÷ Daft | ÷ Ray Data "
        "| core-µs per GET: Python workers | Spark JVM | service | raw client / peer | total "
        "| note |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        r = run.result
        cpu = r.cpu_us_per_row
        other = cpu.get("raw_client", 0.0) + cpu.get("peer", 0.0)
        cells = [
            _ratio(r, today.result if today else None),
            _ratio(r, peers.get("daft")),
            _ratio(r, peers.get("ray")),
        ]
        lines.append(
            f"| {r.method} | {r.rows_per_s:,.0f} | "
            + " | ".join(cells)
            + (
                f" | {cpu.get('python_workers', 0.0):.0f} | {cpu.get('spark_jvm', 0.0):.0f} | "
                f"{cpu.get('bench', 0.0) + cpu.get('store', 0.0):.0f} | {other:.0f} | "
                f"{cpu.get('total', 0.0):.0f}"
                if cpu
                else " | | | | | "
            )
            + f" | {r.note.replace('|', '/')} |"
        )
    lines.append("")
    lines += _targets(runs, today, raw_aiohttp, peers)
    return lines


def _targets(
    runs: list[TransportRun],
    today: TransportRun | None,
    raw_aiohttp: TransportRun | None,
    peers: dict[str, Result],
) -> list[str]:
    auto = _best(runs)
    if auto is None:
        return []
    out = ["| target | measured | |", "|---|---|---|"]

    def row(text: str, value: float | None, goal: float, above: bool = True) -> None:
        if value is None:
            out.append(f"| {text} | n/a | |")
            return
        met = value >= goal if above else value <= goal
        out.append(f"| {text} | {value:.2f}x | {'met' if met else '**missed**'} |")

    best = auto.result
    name = f"asynclookup ({auto.client}, {auto.loop})"
    row(f"{name} ≥ 2x Daft's rows/s", _value(best, peers.get("daft")), 2.0)
    row(f"{name} ≥ 2x Ray Data's rows/s", _value(best, peers.get("ray")), 2.0)
    row(f"{name} ≥ 1.4x 0.5's connector", _value(best, today.result if today else None), 1.4)
    workers = best.cpu_us_per_row.get("python_workers")
    raw = raw_aiohttp.result.cpu_us_per_row.get("raw_client") if raw_aiohttp else None
    row(
        f"{name}: Python workers' CPU per GET ≤ 0.6x the raw aiohttp client's",
        workers / raw if workers and raw else None,
        0.6,
        above=False,
    )
    out.append("")
    return out


def _best(runs: list[TransportRun]) -> TransportRun | None:
    """What ``http.client=auto``, ``loop=auto`` take: pyreqwest on uvloop where it ran."""
    for client, loop in reversed(TRANSPORTS):
        found = _find(runs, "asynclookup", client, loop)
        if found is not None:
            return found
    return None


def _find(runs: list[TransportRun], kind: str, client: str, loop: str) -> TransportRun | None:
    return next(
        (
            r
            for r in runs
            if r.kind == kind and r.client == client and r.loop == loop and r.result.rows_per_s
        ),
        None,
    )


def _value(a: Result | None, b: Result | None) -> float | None:
    return a.rows_per_s / b.rows_per_s if a and b and b.rows_per_s else None


def _ratio(a: Result, b: Result | None) -> str:
    value = _value(a, b)
    return f"{value:.2f}x" if value else ""


def as_json(runs: list[TransportRun]) -> list[dict[str, Any]]:
    return [
        {
            **asdict(r.result),
            "rows_per_s": r.result.rows_per_s,
            "kind": r.kind,
            "client": r.client,
            "loop": r.loop,
            "service": service_of(r.result.scenario),
        }
        for r in runs
    ]
