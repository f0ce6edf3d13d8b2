"""The benchmark keeps working: a tiny run of every method (no speed is asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def test_bench_smoke(tmp_path: Path, redis_srv: Any, postgres_srv: Any) -> None:
    command = [
        sys.executable,
        "-m",
        "lookup_source",
        "bench",
        "--scenarios",
        "http-2,redis,postgres",
        "--rows",
        "3000",
        "--sample-rows",
        "40",
        "--users",
        "300",
        "--distributions",
        "uniform",
        "--capacity",
        "20",
        "--out",
        str(tmp_path),
        "--redis-url",
        redis_srv.url,
        "--postgres-url",
        postgres_srv.url,
    ]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads((tmp_path / "results.json").read_text())
    methods = {(r["scenario"], r["method"]) for r in data["results"]}
    for scenario in ("http-get-2ms", "redis", "postgres"):
        assert (scenario, "asynclookup ordered") in methods
        assert (scenario, "sync per-row UDF") in methods
        assert (scenario, "thread pool of 20 in mapInArrow") in methods
        assert any(m.startswith("raw async client") for s, m in methods if s == scenario)
    assert ("redis", "scan + broadcast join") in methods
    assert ("http-get-2ms", "Little's law bound") in methods
    ours = [r for r in data["results"] if r["method"] == "asynclookup ordered"]
    assert all(r["rows"] == 3000 and r["rows_per_s"] > 0 and r["requests"] != 0 for r in ours)
    arrow = [r for r in data["results"] if r["method"].startswith("Arrow UDF")]
    assert all(r["rows_per_s"] > 0 for r in arrow), arrow
    table = (tmp_path / "results.md").read_text()
    assert "| http-get-2ms | uniform | asynclookup ordered |" in table
    assert (tmp_path / "throughput.png").stat().st_size > 1000
