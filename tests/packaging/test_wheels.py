"""The distributions as users get them: wheels built from this checkout, installed (not
editable) into a fresh virtual environment, and the demo run from outside the clone (the
demo's one run without a service: test_demo.py checks what it prints)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from lookup_source.registry import FIRST_PARTY
from tests.helpers import clean_environment, needs_index
from tests.packaging.test_demo import DEMO_FLAGS, check_demo_output

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTIONS = [ROOT, *(ROOT / "connectors" / name for name in FIRST_PARTY)]


def run(command: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: int = 600):  # type: ignore[no-untyped-def]
    done = subprocess.run(
        command,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env if env is not None else clean_environment(),
    )
    assert done.returncode == 0, f"{command}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done


def _copies(where: Path) -> list[Path]:
    """A copy of what each distribution is built from."""
    ignore = shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "tests")
    copies = []
    for source in DISTRIBUTIONS:
        target = where / source.name
        if source == ROOT:
            target.mkdir(parents=True)
            for name in ("pyproject.toml", "README.md"):
                shutil.copy(source / name, target / name)
            shutil.copytree(source / "lookup_source", target / "lookup_source", ignore=ignore)
        else:
            shutil.copytree(source, target, ignore=ignore)
        copies.append(target)
    return copies


@needs_index  # the dependencies (pyspark, pyarrow...) come from the index, as for a user
@pytest.mark.timeout(1200)
def test_the_wheels_install_and_the_demo_runs_outside_the_clone(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    sources = _copies(tmp_path / "sources")  # pip builds in the source tree: not in the clone
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(wheels)]
        + [str(d) for d in sources],
        cwd=tmp_path,
    )
    built = sorted(p.name for p in wheels.glob("*.whl"))
    assert [re.sub(r"-\d.*", "", name) for name in built] == [
        "asynclookup",
        "asynclookup_http",
        "asynclookup_postgres",
        "asynclookup_redis",
    ], built
    core = next(wheels.glob("asynclookup-*.whl"))
    with zipfile.ZipFile(core) as archive:
        names = archive.namelist()
    assert "lookup_source/__init__.py" in names, names[:20]
    assert "lookup_source/functions.py" in names and "lookup_source/py.typed" in names
    # the SQL extension: its Java source, and its jar (make test builds it before the suites)
    extension = "lookup_source/spark/sql_extension/"
    assert f"{extension}java/asynclookup/sql/LookupJoinRule.java" in names
    assert f"{extension}asynclookup-sql.jar" in names
    env_dir = tmp_path / "env"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    # the connectors' wheels by file; everything else (pyspark, pyarrow...) from the index
    run(
        [str(python), "-m", "pip", "install", "--quiet", "--find-links", str(wheels)]
        + [str(p) for p in sorted(wheels.glob("*.whl"))],
        cwd=tmp_path,
        timeout=1200,
    )
    listed = run([str(python), "-m", "pip", "list"], cwd=tmp_path).stdout
    for distribution in ("asynclookup ", "asynclookup-redis", "asynclookup-http", "pyspark"):
        assert distribution in listed, listed
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {**clean_environment(), "PYSPARK_PYTHON": str(python)}
    located = run(
        [
            str(python),
            "-c",
            "import lookup_source, asynclookup_redis; print(lookup_source.__file__)",
        ],
        cwd=outside,
        env=env,
    )
    assert str(env_dir) in located.stdout and str(ROOT) not in located.stdout
    # the installed jar is the one spark-submit is told to take (its source is the shipped one)
    arguments = run([str(env_dir / "bin" / "asynclookup"), "sql-extension"], cwd=outside, env=env)
    jar = arguments.stdout.split()[1]
    assert jar.startswith(str(env_dir)) and jar.endswith("asynclookup-sql.jar"), arguments.stdout
    assert arguments.stdout.split()[2:] == [
        "--conf",
        "spark.sql.extensions=asynclookup.sql.AsyncLookupSqlExtensions",
    ]
    demo = run([str(env_dir / "bin" / "asynclookup"), "demo", *DEMO_FLAGS], cwd=outside, env=env)
    check_demo_output(demo.stdout)  # the demo's default run, as a user gets it
