"""Setting a session up for SQL JOINs as lookups: the jar (packaged, cached, built on first use,
or one line saying what to run), ``enable_sql_joins`` beside other extensions, the command that
prints what spark-submit and a Connect server need, and the switch of each injected part."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from typing import Any

import pyspark
import pytest
from pyspark.sql import SparkSession

from lookup_source import enable_sql_joins
from lookup_source.cli import main
from lookup_source.errors import ConfigurationError
from lookup_source.spark.sql_extension import jar as extension_jar
from lookup_source.spark.versions import SQL_JOINS
from tests.helpers import needs

pytestmark = needs(SQL_JOINS)

CLASS = "asynclookup.sql.AsyncLookupSqlExtensions"


def test_enable_sql_joins_keeps_the_extensions_and_jars_already_set() -> None:
    builder = SparkSession.builder.config(
        "spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension"
    ).config("spark.jars", "/opt/jars/delta.jar")
    enable_sql_joins(enable_sql_joins(builder))  # twice: nothing added twice
    options = builder._options
    assert options["spark.sql.extensions"] == f"io.delta.sql.DeltaSparkSessionExtension,{CLASS}"
    jars = options["spark.jars"].split(",")
    assert jars[0] == "/opt/jars/delta.jar" and len(jars) == 2
    assert Path(jars[1]).is_file() and zipfile.is_zipfile(jars[1])


def test_enable_sql_joins_keeps_the_extensions_of_spark_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyspark import SparkContext

    (tmp_path / "spark-defaults.conf").write_text(
        "# the cluster's\nspark.sql.extensions  org.apache.sedona.sql.SedonaSqlExtensions\n"
        "spark.jars=/opt/sedona.jar\n"
    )
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    monkeypatch.setattr(SparkContext, "_active_spark_context", None)  # as before a session
    options = enable_sql_joins(SparkSession.builder)._options
    assert options["spark.sql.extensions"] == f"org.apache.sedona.sql.SedonaSqlExtensions,{CLASS}"
    assert options["spark.jars"].startswith("/opt/sedona.jar,")


def test_a_remote_connect_session_is_told_to_start_its_server_with_it() -> None:
    with pytest.raises(ConfigurationError, match="start the server with the arguments"):
        enable_sql_joins(SparkSession.builder.remote("sc://localhost:15002"))
    with pytest.raises(ConfigurationError, match="takes a SparkSession.builder"):
        enable_sql_joins("not a builder")


def test_the_command_prints_what_spark_submit_needs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sql-extension"]) == 0
    line = capsys.readouterr().out.strip()
    jar = str(extension_jar.jar_path(build=False))
    assert line == f"--jars {jar} --conf spark.sql.extensions={CLASS}"
    assert main(["sql-extension", "--conf"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"spark.jars {jar}",
        f"spark.sql.extensions {CLASS}",
    ]
    assert main(["sql-extension", "--jar"]) == 0
    assert capsys.readouterr().out.strip() == jar


@pytest.fixture
def no_packaged_jar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """As after a bare `pip install .` of a clone: no jar in the package, an empty cache."""
    monkeypatch.setattr(extension_jar, "PACKAGED", tmp_path / "package" / "asynclookup-sql.jar")
    monkeypatch.setattr(extension_jar, "_in_a_clone", lambda: False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "asynclookup"


def test_a_jar_is_built_on_first_use_into_the_cache(no_packaged_jar: Path) -> None:
    with pytest.raises(extension_jar.MissingJarError):
        extension_jar.jar_path(build=False)
    jar = extension_jar.jar_path()
    assert jar.parent == no_packaged_jar
    minor = ".".join(pyspark.__version__.split(".")[:2])
    assert jar.name == f"asynclookup-sql-{extension_jar.source_digest()}-spark{minor}.jar"
    manifest = extension_jar.manifest(jar)
    assert manifest["Asynclookup-Source-Digest"] == extension_jar.source_digest()
    assert manifest["Asynclookup-Built-Against-Spark"] == pyspark.__version__
    with zipfile.ZipFile(jar) as archive:
        assert "asynclookup/sql/AsyncLookupSqlExtensions.class" in archive.namelist()
    built = jar.stat().st_mtime_ns
    assert extension_jar.jar_path() == jar and jar.stat().st_mtime_ns == built  # kept


def test_without_a_jdk_one_line_says_what_to_run(
    no_packaged_jar: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(no_packaged_jar))  # no javac on it
    with pytest.raises(extension_jar.MissingJarError) as raised:
        extension_jar.jar_path()
    message = str(raised.value)
    assert "\n" not in message
    assert message == (
        "the asynclookup SQL extension: its jar is not built, and no JDK is here to build it: "
        "install a JDK 17 or newer (javac), then run: python -m lookup_source sql-extension "
        "--build"
    )


def test_a_jar_of_another_source_is_rebuilt(
    no_packaged_jar: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stale = extension_jar.PACKAGED
    stale.parent.mkdir(parents=True)
    with zipfile.ZipFile(stale, "w") as archive:
        archive.writestr(
            "META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\nAsynclookup-Source-Digest: 0\r\n"
        )
    assert extension_jar.jar_path() != stale


SESSIONS = """
import json, sys
from pyspark.sql import SparkSession
from lookup_source import enable_sql_joins, register_lookup_table

async def name(key):
    return {"name": f"user {key}"} if key < 3 else None

for settings in json.loads(sys.argv[1]):  # one session after another, in one JVM
    builder = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
    for setting in settings:
        key, value = setting.split("=", 1)
        builder = builder.config(key, value)
    spark = enable_sql_joins(builder).getOrCreate()
    register_lookup_table(spark, "users", schema="user_id long, name string", fetch=name)
    spark.range(5).withColumnRenamed("id", "user_id").createOrReplaceTempView("events")
    join = spark.sql("SELECT e.user_id, u.name FROM events e LEFT JOIN users u USING (user_id)")
    try:
        rows = sorted(tuple(r) for r in join.collect())
    except Exception as error:
        rows = str(error)
    plan = join._jdf.queryExecution().executedPlan().toString()
    print(json.dumps({"rows": rows, "lookup": "ArrowEvalPythonUDTF" in plan}), flush=True)
    spark.stop()
"""


def run_sessions(*settings: list[str]) -> list[dict[str, Any]]:
    """A SparkSession started with each list of settings, one after the other in one process
    (and one JVM: a session started anew takes its settings): what each JOIN gave."""
    import json

    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": root}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SESSIONS), json.dumps(settings)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()[-len(settings) :]
    return [dict(json.loads(line)) for line in lines]


PARTS = ("joinRewrite", "filterPushdown")


def test_each_part_has_its_switch_and_the_session_always_starts() -> None:
    """With the rewrite's part switched off when the session starts, the session still starts
    and a JOIN is Spark's (which cannot read a table of a function: one clear line)."""
    # each session sets both switches: the first session's settings outlive it in its JVM
    # (PySpark hands them to the JVM it launches, whose later contexts start from them)
    rewrite, pushdown = (f"spark.asynclookup.sql.extension.{part}.enabled" for part in PARTS)
    off, on, again = run_sessions(
        [f"{rewrite}=false", f"{pushdown}=true"],
        [f"{rewrite}=true", f"{pushdown}=false"],
        [f"{rewrite}=false", f"{pushdown}=true"],
    )
    assert off["lookup"] is False and again == off
    assert "cannot be read as a table" in str(off["rows"])
    assert on == {
        "rows": [[0, "user 0"], [1, "user 1"], [2, "user 2"], [3, None], [4, None]],
        "lookup": True,
    }
