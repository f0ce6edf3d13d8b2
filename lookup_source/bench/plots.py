"""The figures of the throughput and sweep scenarios: ``throughput.png`` (HTTP per key, rows a
second by latency) and ``capacity.png`` (rows a second by concurrency); none without
matplotlib."""

from __future__ import annotations

import os

from lookup_source.bench.context import Result


def plot(results: list[Result], out: str) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    written = []
    http = [r for r in results if r.scenario.startswith("http-get-") and r.rows_per_s]
    if http:
        figure, axis = plt.subplots(figsize=(8, 5))
        for method in dict.fromkeys(r.method for r in http):
            points = sorted(
                (float(r.scenario.rsplit("-", 1)[1].removesuffix("ms")), r.rows_per_s)
                for r in http
                if r.method == method
            )
            axis.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=method)
        axis.set_xlabel("service latency (ms)")
        axis.set_ylabel("rows per second")
        axis.set_yscale("log")
        axis.set_title("HTTP lookup join throughput by latency")
        axis.legend(fontsize=7)
        figure.tight_layout()
        figure.savefig(os.path.join(out, "throughput.png"), dpi=110)
        written.append("throughput.png")
    sweep = [r for r in results if r.scenario.startswith("sweep") and r.rows_per_s]
    if sweep:
        figure, axis = plt.subplots(figsize=(8, 5))
        for method in dict.fromkeys(r.method for r in sweep):
            points = sorted((r.capacity, r.rows_per_s) for r in sweep if r.method == method)
            label = "Arrow UDF, threads = capacity" if method.startswith("Arrow") else method
            axis.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("requests in flight per task (capacity; threads for the Arrow UDF)")
        axis.set_ylabel("rows per second")
        axis.set_title(
            f"Throughput by concurrency, HTTP per key at {sweep[0].scenario.split('-')[-1]}"
        )
        axis.legend(fontsize=8)
        figure.tight_layout()
        figure.savefig(os.path.join(out, "capacity.png"), dpi=110)
        written.append("capacity.png")
    return written
