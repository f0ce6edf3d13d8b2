"""The cluster recipes 2 and 3 of docs/deployment.md, run as written with ``spark-submit`` on
``local-cluster`` (an executor JVM of its own, with its own Python workers):

- recipe 2, a virtualenv packed by ``venv-pack -p env`` and shipped with ``--archives``: the
  executors run the Python of the unpacked archive and import asynclookup from it;
- recipe 3, the code zipped for ``--py-files``: the executors import asynclookup from the zip.

Neither job sees this checkout on ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import needs_index

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = [str(ROOT), str(ROOT / "connectors" / "redis")]
STORED = 1500

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
    lambda _: [__import__("sys").executable, __import__("lookup_source").__file__]).collect()
print(json.dumps({"rows": rows, "where": where}))
"""


@pytest.fixture
def stored(redis_db: Any, prefix: str) -> None:
    redis_db.mset({f"{prefix}{i}": json.dumps({"name": f"user {i}"}) for i in range(STORED)})


def run(command: list[str], cwd: Path, timeout: int = 300) -> None:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{command}: {done.stderr[-4000:]}"


def submit(tmp_path: Path, redis_url: str, prefix: str, *spark_args: str) -> dict[str, Any]:
    """``spark-submit <spark_args> job.py`` on local-cluster, from tmp_path, with no PYTHONPATH
    and no PYSPARK_PYTHON: the executors find Python and asynclookup only where the recipe
    puts them."""
    (tmp_path / "job.py").write_text(JOB)
    submit_script = Path(sys.executable).with_name("spark-submit")
    env = {**os.environ, "PATH": os.pathsep.join([str(submit_script.parent), os.environ["PATH"]])}
    for name in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        env.pop(name, None)
    done = subprocess.run(
        [
            str(submit_script),
            *("--master", "local-cluster[1,1,1024]"),
            *spark_args,
            *("job.py", redis_url, prefix),
        ],
        capture_output=True,
        text=True,
        timeout=420,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["rows"] == [[k, f"user {k}" if k < STORED else None] for k in range(2000)]
    return result


@needs_index  # the recipe installs the client libraries and venv-pack from the index
def test_the_packed_virtualenv_on_local_cluster(
    tmp_path: Path, redis_srv: Any, prefix: str, stored: None, spark_work_dir: None
) -> None:
    # the recipe's commands: python -m venv env && env/bin/pip install $PACKAGES venv-pack;
    # env/bin/venv-pack -p env -o env.tar.gz --exclude 'lib/*/site-packages/pyspark/jars/*'
    run([sys.executable, "-m", "venv", "env"], tmp_path)
    pip = str(tmp_path / "env" / "bin" / "pip")
    run([pip, "install", "--quiet", *PACKAGES, "venv-pack"], tmp_path, timeout=900)
    venv_pack = str(tmp_path / "env" / "bin" / "venv-pack")
    jars = "lib/*/site-packages/pyspark/jars/*"
    run([venv_pack, "-p", "env", "-o", "env.tar.gz", "--exclude", jars], tmp_path, timeout=600)
    with tarfile.open(tmp_path / "env.tar.gz") as archive:  # PySpark's Python, not its jars
        names = archive.getnames()
    assert any(n.endswith("site-packages/pyspark/__init__.py") for n in names)
    assert not any("site-packages/pyspark/jars/" in n for n in names)
    result = submit(
        tmp_path,
        redis_srv.url,
        prefix,
        *("--archives", "env.tar.gz#env"),
        *("--conf", "spark.pyspark.python=./env/bin/python"),
    )
    # (the driver, in client mode, runs ./env/bin/python of tmp_path: the env just built)
    for executable, module in result["where"]:
        unpacked = Path(executable).parents[1]  # <executor work dir>/env, from the archive
        assert unpacked.name == "env" and unpacked != tmp_path / "env", executable
        assert Path(module).is_relative_to(unpacked), module


def test_the_zipped_package_on_local_cluster(
    tmp_path: Path, redis_srv: Any, prefix: str, stored: None, spark_work_dir: None
) -> None:
    # the recipe's commands: pip install --no-deps --target build/pkg ...; python -m zipfile
    target = tmp_path / "build" / "pkg"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps"]
    run([*pip, "--target", str(target), *PACKAGES], tmp_path)
    run([sys.executable, "-m", "zipfile", "-c", str(tmp_path / "asynclookup.zip"), "."], target)
    result = submit(
        tmp_path,
        redis_srv.url,
        prefix,
        *("--py-files", "asynclookup.zip"),
        *("--conf", "spark.pyspark.python=" + sys.executable),
    )
    assert all("asynclookup.zip" in module for _, module in result["where"]), result["where"]
