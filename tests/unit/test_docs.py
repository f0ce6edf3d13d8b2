"""The documentation stays true: its options tables (docs/options.md) are generated from the
option definitions, and its benchmark table (docs/benchmarks.md) quotes the committed results."""

from __future__ import annotations

import re
from pathlib import Path

from lookup_source.docs import options_markdown

ROOT = Path(__file__).resolve().parents[2]
OPTIONS = ROOT / "docs" / "options.md"
BENCHMARKS = ROOT / "docs" / "benchmarks.md"


def test_options_page_matches_the_code() -> None:
    text = OPTIONS.read_text()
    start = text.index("<!-- options:start")
    start = text.index("\n", start) + 1
    end = text.index("<!-- options:end -->")
    assert text[start:end].strip() == options_markdown().strip(), (
        "docs/options.md is stale: regenerate it with make docs"
    )


def test_benchmark_table_quotes_the_committed_results() -> None:
    text = BENCHMARKS.read_text()
    section = text[text.index("## Benchmarks") :]
    if "\n## " in section[1:]:
        section = section[: section.index("\n## ", 1)]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    figures = {n for row in rows for n in re.findall(r"\d{1,3}(?:,\d{3})+", row)}
    results = "".join(p.read_text() for p in (ROOT / "benchmarks" / "results").glob("*/results.md"))
    assert len(figures) > 20
    missing = sorted(f for f in figures if f not in results)
    assert missing == [], f"docs/benchmarks.md quotes figures not in benchmarks/results: {missing}"


def test_readme_demo_output_is_the_committed_run() -> None:
    """The README quotes the demo's table from a run kept in benchmarks/results/demo."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## The demo") :]
    block = section[section.index("```\n") + 4 :]
    block = block[: block.index("```")]
    run = (ROOT / "benchmarks" / "results" / "demo" / "output.txt").read_text()
    quoted = [line for line in block.splitlines() if line.strip()]
    assert len(quoted) >= 4
    missing = [line for line in quoted if line not in run.splitlines()]
    assert missing == [], f"README's demo output is not in benchmarks/results/demo: {missing}"
    speedup = re.search(r"asynclookup lookup_join.*\s([\d.]+)x$", block, re.MULTILINE)
    assert speedup is not None
    why = readme[: readme.index("## Supported versions")]
    assert f"{round(float(speedup.group(1)))}x faster than a synchronous per-row UDF" in why
