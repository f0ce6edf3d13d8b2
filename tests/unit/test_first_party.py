"""The first-party connectors are named once in Python (lookup_source.registry.FIRST_PARTY);
the packaging files that cannot read it — the core's extras, the Makefile's folders, mypy's
files — name exactly those, and a connector added there is found by this test."""

from __future__ import annotations

import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest brings tomli to Python 3.10
    import tomli as tomllib

from lookup_source.registry import FIRST_PARTY, first_party_module

ROOT = Path(__file__).resolve().parents[2]


def test_the_core_extras_name_every_first_party_connector() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for name, connector in FIRST_PARTY.items():
        assert extras[name] == [connector.distribution], name
    assert extras["all"] == [f"asynclookup[{','.join(FIRST_PARTY)}]"]


def test_each_first_party_connector_is_a_distribution_of_its_own_folder() -> None:
    folders = sorted(
        p.name for p in (ROOT / "connectors").iterdir() if (p / "pyproject.toml").exists()
    )
    assert folders == sorted(FIRST_PARTY)
    for name, connector in FIRST_PARTY.items():
        project = tomllib.loads((ROOT / "connectors" / name / "pyproject.toml").read_text())
        assert project["project"]["name"] == connector.distribution
        assert (ROOT / "connectors" / name / first_party_module(name)).is_dir()


def test_the_makefile_and_mypy_name_every_first_party_connector() -> None:
    makefile = (ROOT / "Makefile").read_text()
    listed = re.search(r"^CONNECTORS := (.*)$", makefile, re.MULTILINE)
    assert listed is not None
    assert listed.group(1).split() == [f"connectors/{name}" for name in FIRST_PARTY]
    mypy = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["files"]
    for name in FIRST_PARTY:
        assert f"connectors/{name}/{first_party_module(name)}" in mypy, name
