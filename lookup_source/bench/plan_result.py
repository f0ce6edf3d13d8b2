"""A line of the plan scenario (:class:`PlanResult`), kept and reported as it ends
(:func:`kept`); how a method is timed (:func:`best_of`) and its answer compared with another's
(:func:`checksum`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lookup_source.bench import journal
from lookup_source.bench.timing import timed


@dataclass
class PlanResult:
    """One method on one input (``method``: ``jdbc`` or a strategy; ``scan only``: a read)."""

    input_rows: int
    distinct_keys: int
    method: str
    seconds: float
    rows: int
    checksum: int | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0


def best_of(df: Any, runs: int = 2) -> float:
    """The best of ``runs`` timings of ``df``: the first may pay for starting Python workers,
    importing a driver, a cold buffer cache."""
    return min(timed(df) for _ in range(runs))


def checksum(df: Any) -> tuple[int, int]:
    """Rows and a sum over a hash of every column: two answers with the same are the same
    rows (to a hash collision)."""
    from pyspark.sql import functions as F

    row = df.select(
        F.count(F.lit(1)).alias("n"),
        F.sum(F.xxhash64(*[F.col(c) for c in sorted(df.columns)]) % 1_000_000_007).alias("h"),
    ).first()
    return int(row["n"]), int(row["h"] or 0)


def kept(results: list[PlanResult], result: PlanResult) -> PlanResult:
    """``result`` added to the run's results and reported now."""
    results.append(result)
    seconds = f"{result.seconds:.2f} s" if result.seconds else result.note
    journal.JOURNAL.done(f"plan: {result.input_rows:,} rows, {result.method}: {seconds}")
    return result
