"""Load the shared fixtures for every suite: ``tests/`` and each ``connectors/<name>/tests``.

At the end of a run, say what was skipped and why; with ``ASYNCLOOKUP_REQUIRE_STORES=1`` (CI), a
test skipped because no store server could be had fails the run.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import pytest

pytest_plugins = ["tests.fixtures"]

UNAVAILABLE = "store unavailable: "  # tests.servers.UNAVAILABLE
_SKIPS: Counter[str] = Counter()


def _reason(report: pytest.TestReport) -> str:
    longrepr: Any = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped:
        _SKIPS[_reason(report)] += 1


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    missing = sum(n for reason, n in _SKIPS.items() if reason.startswith(UNAVAILABLE))
    if missing and os.environ.get("ASYNCLOOKUP_REQUIRE_STORES") and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _SKIPS:
        return
    terminalreporter.section("what was skipped, and why")
    for reason, count in sorted(_SKIPS.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"{count:4} skipped: {reason}")
    if any(r.startswith(UNAVAILABLE) for r in _SKIPS) and os.environ.get(
        "ASYNCLOOKUP_REQUIRE_STORES"
    ):
        terminalreporter.write_line(
            "FAILED: a store suite was skipped (ASYNCLOOKUP_REQUIRE_STORES=1): see above"
        )
