"""Beyond one process: a multi-executor cluster and Spark Connect give the results of local[2].

Each runs in its own Python process (the test session keeps its single SparkSession).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

JOB = Path(__file__).with_name("deployment_job.py")


def run_job(where: str, redis_url: str, prefix: str) -> dict[str, Any]:
    root = str(Path(__file__).resolve().parents[2])
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p),
    }
    done = subprocess.run(
        [sys.executable, str(JOB), where, redis_url, prefix],
        capture_output=True,
        text=True,
        timeout=420,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def loaded(redis_db: Any, prefix: str) -> None:
    redis_db.mset({f"{prefix}{i}": json.dumps({"name": f"user {i}"}) for i in range(1_000)})


def expected() -> dict[str, Any]:
    join = sorted(
        (e, e % 1_100, f"user {e % 1_100}" if e % 1_100 < 1_000 else None) for e in range(5_000)
    )
    return {"join": [list(r) for r in join], "read": [[1, "user 1"], [2, "user 2"], [3, "user 3"]]}


def test_local_cluster_matches_local(
    redis_srv: Any, prefix: str, loaded: None, spark_work_dir: None
) -> None:
    result = run_job("local-cluster[2,1,1024]", redis_srv.url, prefix)
    want = expected()
    assert result["join"] == want["join"]
    assert result["read"] == want["read"]
    assert result["table"] == want["join"]
    assert result["metrics"] == 5_000  # the accumulator crossed the executors


def test_spark_connect(redis_srv: Any, prefix: str, loaded: None) -> None:
    pytest.importorskip("grpc", reason="Spark Connect needs pyspark[connect]")
    result = run_job("connect:local[2]", redis_srv.url, prefix)
    want = expected()
    assert result["join"] == want["join"]
    assert result["read"] == want["read"]
    assert result["metrics"] == (
        "lookup_metrics needs a classic SparkSession: Spark Connect has no Python "
        "accumulators, so the lookups of a Connect session are not counted"
    )
