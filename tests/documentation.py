"""The pages of the documentation, in reading order: the README, then the reference pages under
``docs/``. Their examples run in this order (a block may continue one of an earlier page)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PAGES = [
    ROOT / "README.md",
    ROOT / "docs" / "connectors.md",
    ROOT / "docs" / "deployment.md",
    ROOT / "docs" / "monitoring.md",
    ROOT / "docs" / "guarantees.md",
    ROOT / "docs" / "benchmarks.md",
    ROOT / "docs" / "options.md",
]


def text() -> str:
    """Every page, one after the other."""
    return "\n".join(page.read_text() for page in PAGES)
