"""How large the scale and soak tests run: one setting, ``ASYNCLOOKUP_TEST_SIZE``.

- ``ci`` (the default, for ``make test`` and CI): sizes that still cross the same paths as the
  full ones — several batches per task, several partitions, faults injected mid-job, streams of
  several micro-batches after warm-up — in seconds rather than minutes;
- ``full`` (``make test-full``, run before a release): the sizes docs/guarantees.md quotes.

A test takes its sizes from :func:`sized`::

    ROWS = sized(ci=400_000, full=2_000_000)
"""

from __future__ import annotations

import os

VARIABLE = "ASYNCLOOKUP_TEST_SIZE"
SIZES = ("ci", "full")


def test_size() -> str:
    """The size this run asked for (``ci`` unless ``ASYNCLOOKUP_TEST_SIZE`` says otherwise)."""
    size = os.environ.get(VARIABLE, "").strip().lower() or "ci"
    if size not in SIZES:
        raise ValueError(f"{VARIABLE}={size!r}: use one of {', '.join(SIZES)}")
    return size


test_size.__test__ = False  # type: ignore[attr-defined]  # not a test, whatever its name


def sized(*, ci: int, full: int) -> int:
    """``full`` in a full run, ``ci`` otherwise."""
    return full if test_size() == "full" else ci
