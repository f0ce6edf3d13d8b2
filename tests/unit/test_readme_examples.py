"""The documentation's examples stay true: they compile, and every option they name exists."""

from __future__ import annotations

import re

import pytest

from lookup_source.registry import FIRST_PARTY, resolve_connector
from lookup_source.settings import CORE_OPTIONS
from tests.documentation import text

README = text()  # the README and the pages under docs/
BLOCKS = re.findall(r"```python\n(.*?)```", README, re.DOTALL)
KNOWN = {spec.name for spec in CORE_OPTIONS}
PREFIXES = ["http.header."]
for name in FIRST_PARTY:
    for spec in resolve_connector(name).option_specs:
        if spec.prefix:
            PREFIXES.append(spec.name)
        else:
            KNOWN.add(spec.name)


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_python_examples_compile(block: str) -> None:
    compile(block, "README.md", "exec")


def test_every_option_named_in_the_readme_exists() -> None:
    quoted = set(
        re.findall(
            r"[\"'`]((?:redis|http|postgres|cache|retry|output|on|key|batch|"
            r"timeout|rate|filter)\.[a-z.\-<>A-Z]+)[\"'`=]",
            README,
        )
    )
    unknown = sorted(
        name
        for name in quoted
        if name not in KNOWN and not any(name.startswith(p) for p in PREFIXES) and "<" not in name
    )
    assert unknown == [], f"README names options that do not exist: {unknown}"
    assert len(BLOCKS) >= 8
