"""Shared by the engine's unit tests: each test starts and ends with no worker state (no
client, loop or cache a previous test left in the process-wide worker)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lookup_source.engine.kept.worker import forget_worker


@pytest.fixture(autouse=True)
def fresh_worker() -> Iterator[None]:
    forget_worker()
    yield
    forget_worker()
