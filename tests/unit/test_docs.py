"""The README stays true: its options tables are generated from the option definitions, and its
benchmark table quotes the committed results."""

from __future__ import annotations

import re
from pathlib import Path

from lookup_source.docs import options_markdown

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def test_readme_options_match_the_code() -> None:
    text = README.read_text()
    start = text.index("<!-- options:start")
    start = text.index("\n", start) + 1
    end = text.index("<!-- options:end -->")
    assert text[start:end].strip() == options_markdown().strip(), (
        "README options are stale: regenerate with python -m lookup_source.docs"
    )


def test_readme_benchmark_table_quotes_the_committed_results() -> None:
    text = README.read_text()
    section = text[text.index("## Benchmarks") :]
    section = section[: section.index("\n## ", 1)]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    figures = {n for row in rows for n in re.findall(r"\d{1,3}(?:,\d{3})+", row)}
    results = "".join(p.read_text() for p in (ROOT / "benchmarks" / "results").glob("*/results.md"))
    assert len(figures) > 20
    missing = sorted(f for f in figures if f not in results)
    assert missing == [], f"README Benchmarks quotes figures not in benchmarks/results: {missing}"
