"""What every method is given (:class:`Context`: the session, the store, the input) and what it
hands back (:class:`Result`: rows, seconds, requests, CPU per row)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lookup_source.bench.stores import VALUE_COLUMNS, Store

POSTGRES_THREADS = 40
"""Threads (each with its own connection) for the blocking Postgres alternatives: 2 tasks x 40
stays under Postgres' default max_connections of 100."""


@dataclass
class Result:
    scenario: str
    distribution: str
    method: str
    rows: int
    seconds: float
    requests: int = -1
    peak_memory_mb: float = 0.0
    note: str = ""
    capacity: int = 0
    cpu_us_per_row: dict[str, float] = field(default_factory=dict)
    """Core-microseconds per row by process group (bench.cpu.GROUPS) and total."""

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Context:
    spark: Any
    store: Store
    df: Any  # the input: event_id, user_id
    sample: Any  # a small input, for the synchronous per-row UDF
    args: Any
    capacity: int
    distribution: str = ""

    def result(self, method: str, rows: int, seconds: float, **extra: Any) -> Result:
        return Result(self.store.name, self.distribution, method, rows, seconds, **extra)

    @property
    def threads(self) -> int:
        kind = self.store.kind
        return min(self.capacity, POSTGRES_THREADS) if kind == "postgres" else self.capacity


Method = Callable[[Context], Result]


def values_schema() -> str:
    """The value columns a method appends, as fields of a Spark schema."""
    return ", ".join(f"{c} string" for c in VALUE_COLUMNS)
