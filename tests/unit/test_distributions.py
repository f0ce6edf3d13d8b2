"""The distributions say the same thing everywhere: each connector's README installs it as it
can be installed, each carries the licence its metadata names, and the README's versions and
install lines agree with the pyprojects."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lookup_source.registry import FIRST_PARTY

ROOT = Path(__file__).resolve().parents[2]
CONNECTORS = list(FIRST_PARTY)
DISTRIBUTIONS = [ROOT, *(ROOT / "connectors" / c for c in CONNECTORS), ROOT / "examples" / "sqlite"]


def field(pyproject: str, name: str) -> str:
    found = re.search(rf'^{re.escape(name)} = "([^"]*)"', pyproject, re.MULTILINE)
    assert found, name
    return found.group(1)


@pytest.mark.parametrize("folder", DISTRIBUTIONS, ids=lambda p: p.name)
def test_every_distribution_carries_its_licence(folder: Path) -> None:
    pyproject = (folder / "pyproject.toml").read_text()
    assert field(pyproject, "license") == "Apache-2.0"
    assert 'license-files = ["LICENSE"]' in pyproject
    assert "Apache License" in (folder / "LICENSE").read_text()[:200]
    assert field(pyproject, "requires-python") == ">=3.10"


@pytest.mark.parametrize("name", CONNECTORS)
def test_a_connector_readme_installs_it_as_it_can_be_installed(name: str) -> None:
    folder = ROOT / "connectors" / name
    pyproject = (folder / "pyproject.toml").read_text()
    readme = (folder / "README.md").read_text()
    distribution = field(pyproject, "name")
    assert readme.splitlines()[0] == f"# {distribution}"
    assert f"pip install . ./connectors/{name}\n" in readme  # from a clone: no index has it
    entry = re.search(r'^(\w+) = "asynclookup_\w+:\w+"', pyproject, re.MULTILINE)
    assert entry and entry.group(1) == name and f"`connector={name}`" in readme
    core = (ROOT / "pyproject.toml").read_text()
    assert f'{name} = ["{distribution}"]' in core  # the core's extra names this distribution


def test_the_readme_install_and_versions_agree_with_the_pyprojects() -> None:
    readme = (ROOT / "README.md").read_text()
    core = (ROOT / "pyproject.toml").read_text()
    install = " ".join(f"./connectors/{c}" for c in CONNECTORS)
    assert f"pip install . {install}\n" in readme
    declared = re.search(r'"pyspark\[sql\]>=([0-9.]+)"', core)
    assert declared is not None
    assert f"`pyspark[sql]>={declared.group(1)}`" in readme
    python = field(core, "requires-python").removeprefix(">=")
    assert f"Python ≥ {python}" in readme
    minimum = tuple(int(p) for p in declared.group(1).split("."))
    header = next(line for line in readme.splitlines() if line.startswith("| surface |"))
    first = re.search(r"PySpark (\d+)\.(\d+)", header)
    assert first and (int(first.group(1)), int(first.group(2))) == minimum
