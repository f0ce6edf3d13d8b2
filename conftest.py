"""Load the shared fixtures for every suite: ``tests/`` and each ``connectors/<name>/tests``.

At the end of a run, say what was skipped and why; with ``ASYNCLOOKUP_REQUIRE_STORES=1`` (CI), a
test skipped because no store server could be had fails the run.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import pytest

from tests.servers import UNAVAILABLE

pytest_plugins = ["tests.fixtures"]

# Every JVM the tests start (Spark's driver, local-cluster executors, the spark-submit jobs)
# runs small jobs for seconds to minutes: C2's compilations cost them more CPU than they save
# (the SQL join suite: a third less CPU, a fifth less time with C1 alone). Set
# JDK_JAVA_OPTIONS (even empty) to choose otherwise.
os.environ.setdefault("JDK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1")

_SKIPS: Counter[str] = Counter()


def _reason(report: pytest.TestReport) -> str:
    longrepr: Any = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped:
        _SKIPS[_reason(report)] += 1


def _required_store_skipped() -> bool:
    """Whether a test was skipped for want of a store where stores are required (CI)."""
    return bool(os.environ.get("ASYNCLOOKUP_REQUIRE_STORES")) and any(
        reason.startswith(UNAVAILABLE) for reason in _SKIPS
    )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _required_store_skipped() and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _SKIPS:
        return
    terminalreporter.section("what was skipped, and why")
    for reason, count in sorted(_SKIPS.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"{count:4} skipped: {reason}")
    if _required_store_skipped():
        terminalreporter.write_line(
            "FAILED: a store suite was skipped (ASYNCLOOKUP_REQUIRE_STORES=1): see above"
        )
