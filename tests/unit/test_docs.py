"""The README's options tables are generated from the option definitions: keep them in sync."""

from __future__ import annotations

from pathlib import Path

from lookup_source.docs import options_markdown

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_options_match_the_code() -> None:
    text = README.read_text()
    start = text.index("<!-- options:start")
    start = text.index("\n", start) + 1
    end = text.index("<!-- options:end -->")
    assert text[start:end].strip() == options_markdown().strip(), (
        "README options are stale: regenerate with python -m lookup_source.docs"
    )
