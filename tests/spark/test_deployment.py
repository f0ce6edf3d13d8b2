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

import pyspark
import pytest

from lookup_source.spark.versions import DATA_SOURCE, SQL_JOINS, TABLE_FUNCTION

JOB = Path(__file__).with_name("deployment_job.py")

# PySpark 4 bundles the Spark Connect server; 3.5 fetches it from Maven
# (--packages org.apache.spark:spark-connect_2.12), which a machine without Maven cannot
CONNECT_SERVER_BUNDLED = any((Path(pyspark.__file__).parent / "jars").glob("spark-connect*.jar"))
CONNECT_SERVER_SKIP = (
    f"PySpark {pyspark.__version__} does not bundle the Spark Connect server (a Maven package)"
)


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


def check_function(rows: list[list[Any]], budget: list[Any]) -> None:
    """The job's own async function, pickled from its __main__ to every executor, under a
    cluster budget its tasks kept through the Redis."""
    assert rows == [[e, f"fn {e % 1_100}" if e % 1_100 < 1_000 else None] for e in range(5_000)]
    description, grants = budget
    assert description.endswith("deployment)") and description.startswith("coordinated")
    assert grants > 0


def check_metrics(metrics: dict[str, Any]) -> None:
    """What every task of the join counted, merged on the driver (3 partitions of 5,000 rows;
    keys 1,000 to 1,099 are missing), and a second action adds its own."""
    assert metrics["rows"] == 5_000
    assert metrics["tasks"] == 3
    assert 0 < metrics["requests"] <= 1_100
    assert 0 < metrics["missing_keys"] <= 300  # each missing key once per task at most
    assert metrics["failed_keys"] == 0
    assert metrics["retries"] == 0
    assert metrics["rows_after_two_actions"] == 10_000


def check_progress(progress: list[dict[str, Any]]) -> None:
    """Each micro-batch's progress holds the lookup's entry, numbers only, the same fields on
    a classic session and over Spark Connect: 100 rows each, 9 of them with a missing key."""
    from lookup_source.spark.progress import PROGRESS_FIELDS

    *batches, sink = progress
    assert sink["rows"] == 300 and sink["columns"] == ["event_id", "user_id", "name"]
    assert len(batches) == 3
    for batch in batches:
        users = batch["users"]
        assert list(users) == list(PROGRESS_FIELDS)
        assert all(isinstance(v, (int, float)) for v in users.values())
        assert users["rows"] == batch["input"] == 100
        assert users["requests"] >= 1 and users["peak_in_flight"] >= 1
        assert users["failed_keys"] == 0
        assert users["keys"] == 100  # every key of a micro-batch is distinct
        assert 0 < users["latency_p50_ms"] <= users["latency_p99_ms"]
    missing = [
        sum(1 for e in range(b * 100, b * 100 + 100) if e * 7 % 1_100 >= 1_000) for b in range(3)
    ]
    assert sorted(batch["users"]["missing_keys"] for batch in batches) == sorted(missing)
    assert sink["named"] == 300 - sum(missing)


@pytest.mark.once  # the engine's, the same on any PySpark: run once
def test_local_cluster_matches_local(
    redis_srv: Any, prefix: str, loaded: None, spark_work_dir: None
) -> None:
    result = run_job("local-cluster[2,1,1024]", redis_srv.url, prefix)
    want = expected()
    assert result["join"] == want["join"]
    check_function(result["function"], result["function_budget"])
    check_metrics(result["metrics"])  # the accumulator crossed the executors
    check_progress(result["progress"])
    if DATA_SOURCE.available():
        assert result["read"] == want["read"]
    if TABLE_FUNCTION.available():
        assert result["table"] == want["join"]
        assert result["table_metrics"] == 5_000
    if SQL_JOINS.available():  # a JOIN is the lookup, across executors
        assert result["sql_join"] == want["join"] and result["sql_join_is_lookup"]


@pytest.mark.skipif(not CONNECT_SERVER_BUNDLED, reason=CONNECT_SERVER_SKIP)
def test_spark_connect(redis_srv: Any, prefix: str, loaded: None) -> None:
    pytest.importorskip("grpc", reason="Spark Connect needs pyspark[connect]")
    result = run_job("connect:local[2]", redis_srv.url, prefix)
    want = expected()
    assert result["join"] == want["join"]
    assert result["columns"] == ["event_id", "user_id", "name"]  # no metrics column left
    check_function(result["function"], result["function_budget"])
    check_metrics(result["metrics"])  # observed metrics, over Connect
    check_progress(result["progress"])
    if DATA_SOURCE.available():
        assert result["read"] == want["read"]
    if SQL_JOINS.available():  # a Connect server started with the extension: a client's JOIN
        assert result["sql_join"] == want["join"] and result["sql_join_is_lookup"]
    if TABLE_FUNCTION.available():
        assert result["table"] == want["join"]
        assert result["table_metrics"] == (
            "lookup table 'users' was registered over Spark Connect, where its table function "
            "cannot report metrics (no accumulators, and its rows are your query's): "
            "lookup_join reports them over Connect"
        )
