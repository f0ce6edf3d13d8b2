"""The README's third cluster recipe, run as written: the code zipped for ``--py-files`` and a
job submitted with ``spark-submit`` to ``local-cluster`` (separate executor JVMs and Python
workers), which import asynclookup from the zip."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

JOB = """
import json, sys
from pyspark.sql import SparkSession
from lookup_source import lookup_join

spark = SparkSession.builder.config("spark.executor.memory", "768m").getOrCreate()
url, prefix = sys.argv[1:3]
events = spark.range(2000, numPartitions=2).withColumnRenamed("id", "user_id")
out = lookup_join(events, "user_id", schema="user_id long, name string", options={
    "connector": "redis", "url": url, "redis.key.pattern": prefix + "{key}"})
rows = sorted((r.user_id, r.name) for r in out.collect())
where = spark.sparkContext.parallelize(range(2), 2).map(
    lambda _: __import__("lookup_source").__file__).collect()
print(json.dumps({"rows": rows, "where": where}))
"""


def test_the_zipped_package_on_local_cluster(
    tmp_path: Path, redis_srv: Any, redis_db: Any, prefix: str
) -> None:
    redis_db.mset({f"{prefix}{i}": json.dumps({"name": f"user {i}"}) for i in range(1500)})
    packages = [str(ROOT), str(ROOT / "connectors" / "redis")]
    # the README's commands: pip install --no-deps --target build/pkg ...; python -m zipfile
    target = str(tmp_path / "build" / "pkg")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            target,
            *packages,
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    subprocess.run(
        [sys.executable, "-m", "zipfile", "-c", str(tmp_path / "asynclookup.zip"), "."],
        cwd=tmp_path / "build" / "pkg",
        check=True,
        timeout=120,
    )
    (tmp_path / "job.py").write_text(JOB)
    submit = Path(sys.executable).with_name("spark-submit")
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    env.pop("PYTHONPATH", None)  # the workers find asynclookup in the zip only
    done = subprocess.run(
        [
            str(submit),
            *("--master", "local-cluster[2,1,1024]"),
            *("--py-files", str(tmp_path / "asynclookup.zip")),
            *(str(tmp_path / "job.py"), redis_srv.url, prefix),
        ],
        capture_output=True,
        text=True,
        timeout=420,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["rows"] == [[k, f"user {k}" if k < 1500 else None] for k in range(2000)]
    assert all("asynclookup.zip" in path for path in result["where"]), result["where"]
