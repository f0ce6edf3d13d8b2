"""The http-transports scenario's report: ratios to 0.5's connector and to each peer, CPU per
GET by process, and the targets judged on what ``auto`` takes; a peer or transport that did
not run leaves its cells empty and its target unjudged, never a made-up figure."""

from __future__ import annotations

import types

from lookup_source.bench.methods import Result
from lookup_source.bench.transports import TransportRun
from lookup_source.bench.transports_report import as_json, transports_report

ARGS = types.SimpleNamespace(transports_latency_ms=5.0, transports_keys=1000, capacity=100, tasks=2)


def run(kind: str, client: str, loop: str, rows_per_s: float, **cpu: float) -> TransportRun:
    seconds = 1000 / rows_per_s if rows_per_s else 0.0
    result = Result("http-transports-5ms", "distinct", f"{kind} ({client}, {loop})", 1000, seconds)
    result.cpu_us_per_row = {**cpu, "total": sum(cpu.values())} if cpu else {}
    return TransportRun(result, kind, client, loop)


def test_ratios_cpu_and_targets() -> None:
    runs = [
        run("asynclookup", "aiohttp", "asyncio", 4000, python_workers=150, bench=90),
        run("asynclookup", "pyreqwest", "uvloop", 9000, python_workers=70, bench=90),
        run("raw", "aiohttp", "asyncio", 5000, raw_client=130, bench=95),
        run("peer", "daft", "", 4000, peer=250),
        run("peer", "ray", "", 0),  # failed or skipped: no ratio, no target judged
    ]
    text = "\n".join(transports_report(runs, ARGS))
    assert (
        "| asynclookup (pyreqwest, uvloop) | 9,000 | 2.25x | 2.25x |  | 70 | 0 | 90 | 0 | 160 |"
        in text
    )
    assert "≥ 2x Daft's rows/s | 2.25x | met |" in text
    assert "≥ 2x Ray Data's rows/s | n/a | |" in text
    assert "≥ 1.4x 0.5's connector | 2.25x | met |" in text
    assert "CPU per GET ≤ 0.6x the raw aiohttp client's | 0.54x | met |" in text
    rows = as_json(runs)
    assert [r["kind"] for r in rows] == ["asynclookup", "asynclookup", "raw", "peer", "peer"]
    assert rows[1]["rows_per_s"] == 9000 and rows[1]["client"] == "pyreqwest"


def test_without_the_native_transport_auto_is_aiohttp_and_targets_say_so() -> None:
    runs = [
        run("asynclookup", "aiohttp", "asyncio", 4000, python_workers=150),
        run("asynclookup", "pyreqwest", "uvloop", 0),  # skipped: not installed here
    ]
    text = "\n".join(transports_report(runs, ARGS))
    assert "asynclookup (aiohttp, asyncio) ≥ 1.4x 0.5's connector | 1.00x | **missed** |" in text
    assert "raw aiohttp client's | n/a | |" in text


def test_the_native_services_title_says_what_answered_its_gets() -> None:
    from lookup_source.bench.stores import native_suffix
    from lookup_source.bench.transports_report import service_label

    assert "Python (aiohttp" in service_label("http-transports-5ms")
    assert service_label("http-transports-5ms" + native_suffix("directives")) == (
        "service: nginx (native; GETs answered by its own directives (echo module))"
    )
    njs = "http-transports-5ms" + native_suffix("njs")
    assert service_label(njs).endswith("GETs answered by njs)")
