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
