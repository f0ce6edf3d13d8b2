"""The demo, end to end, as a user runs it (small sizes). Its default run — no service — is
made by test_wheels.py, from the installed wheels outside the clone, and checked here
(:func:`check_demo_output`); this file runs it against your own Redis."""

from __future__ import annotations

import os
import re
import subprocess
import sys


def run_demo(*flags: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "lookup_source", "demo", *flags]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    return subprocess.run(command, capture_output=True, text=True, timeout=240, env=env)


DEMO_FLAGS = ("--rows", "4000", "--users", "500", "--sample-rows", "60", "--latency-ms", "2")
"""The demo's sizes in the tests (the wheels test runs it so, from the installed wheels)."""


def check_demo_output(out: str) -> None:
    """What the demo prints, run with :data:`DEMO_FLAGS`: every task done, the first rows with
    their looked-up profile, and the comparison with a synchronous per-row UDF."""
    assert "A few enriched rows:" in out
    # the last progress line, when the job has ended, counts every task done
    assert re.search(r"tasks (\d+)/\1 done, 0 running · [\d,]+ requests answered", out), out
    # the first event rows with their looked-up profile (user-N, tier, country)
    assert re.search(r"\|0\s+\|(\d+)\s+\|0\.5\s+\|user-\1\s*\|", out), out
    assert "synchronous per-row UDF (60-row sample)" in out
    assert "extrapolated to 4,000 rows" in out
    match = re.search(
        r"asynclookup lookup_join \(capacity 100\)\s+4,000\s+[\d.]+\s+[\d,]+\s+"
        r"([\d.]+)x",
        out,
    )
    assert match, out
    assert float(match.group(1)) > 0
    assert re.search(r"[\d,]+ requests for 4,000 rows", out)


def test_cli_help_and_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "lookup_source", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout.startswith("asynclookup ")
    done = subprocess.run(
        [sys.executable, "-m", "lookup_source", "demo", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "--latency-ms" in done.stdout and "--redis-url" in done.stdout


def test_demo_against_your_own_redis(redis_srv, redis_db) -> None:  # type: ignore[no-untyped-def]
    done = run_demo(
        "--rows", "2000", "--users", "300", "--sample-rows", "40", "--redis-url", redis_srv.url
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"\|0\s+\|(\d+)\s+\|0\.5\s+\|user-\1\s*\|", done.stdout), done.stdout
    assert "asynclookup lookup_join (capacity 100)" in done.stdout
    assert not redis_db.keys("asynclookup:demo:user:*")  # the demo cleaned up after itself
