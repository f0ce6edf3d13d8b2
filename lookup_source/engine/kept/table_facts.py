"""What a store says of its whole table (``LookupClient.table_facts``: whether it holds a
null key, any row), asked once per run of a query in a worker: :class:`KeptTableFacts`.

A SQL ``NOT IN`` that the extension rewrote depends on the whole table, which Spark reads
once per run (the subquery's side of its join). The tasks of one run (a Spark stage) in
one worker share one answer, asked by the first of them through its own client;
the next run asks again, so a DataFrame collected again or a stream's next micro-batch sees
the table as it is then. Answers are kept by the lookup's identity (:mod:`.identity`: two
configurations that may see different tables never share one) and the run, the most recent
:data:`MAX_KEPT_RUNS` only.
"""

from __future__ import annotations

from collections.abc import Callable

from lookup_source.connector_api.client import TableFacts
from lookup_source.engine.clock import Clock
from lookup_source.engine.kept.keeper import Memo

MAX_KEPT_RUNS = 64
"""Answers a worker keeps (one per lookup and run), the least recently used forgotten first."""


class KeptTableFacts:
    """The answers of a worker's runs; see the module's docstring.

    >>> kept = KeptTableFacts(clock=lambda: 0.0)
    >>> asked = []
    >>> def ask():
    ...     asked.append(1)
    ...     return TableFacts(null_key=False, any_row=True)
    >>> kept.get("lookup", "stage 3.0", ask) == kept.get("lookup", "stage 3.0", ask), len(asked)
    (True, 1)
    """

    def __init__(self, *, clock: Clock, kept: int = MAX_KEPT_RUNS) -> None:
        self._answers: Memo[TableFacts] = Memo(max_entries=kept, clock=clock)

    def get(self, lookup: str, run: str, ask: Callable[[], TableFacts]) -> TableFacts:
        """The answer of ``lookup`` (its identity's digest) in ``run``: ``ask()`` the first
        time, kept when the store could tell (an answer it could not give is asked again)."""
        return self._answers.get(f"{lookup}\x00{run}", ask, keep=lambda facts: facts.known)

    def __len__(self) -> int:
        return len(self._answers)


__all__ = ["MAX_KEPT_RUNS", "KeptTableFacts"]
