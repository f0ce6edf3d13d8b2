"""What a bench run has measured so far. Each method's result is printed as it ends and the
results files are written again after it, so a run that fails later loses nothing; a method or
a scenario that fails is kept as failed, with its reason, and the run goes on."""

from __future__ import annotations

from collections.abc import Callable


class Journal:
    """The run's progress: ``save`` writes the results files from what is measured so far."""

    def __init__(self, save: Callable[[], object] = lambda: None) -> None:
        self._save = save
        self.failures: list[tuple[str, str]] = []

    def done(self, line: str) -> None:
        """A method ended: its line, printed now; the results files, written now."""
        print(f"    = {line}", flush=True)
        self._save()

    def failed(self, what: str, error: BaseException) -> str:
        """``what`` failed: kept (and printed) with its reason, which is returned."""
        reason = describe(error)
        self.failures.append((what, reason))
        print(f"    ! {what} FAILED: {reason}", flush=True)
        self._save()
        return reason

    def report(self) -> list[str]:
        """The failures, as a Markdown section (none: no lines)."""
        if not self.failures:
            return []
        lines = ["", "## What failed (the rest of the run went on)", ""]
        lines += [f"- {what}: {reason}" for what, reason in self.failures]
        return lines


def describe(error: BaseException) -> str:
    """An error in one line: its type and the first line of its message."""
    text = str(error).strip()
    first = text.splitlines()[0][:300] if text else ""
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


JOURNAL = Journal()
"""The running bench's journal (``run_bench`` sets it); a fresh one prints and saves nothing
more."""
