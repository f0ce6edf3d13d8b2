"""The plan scenario's scans alone: the table read whole, every column, by Spark's JDBC reader
and by the data source over the same partitions; rows a second of each."""

from __future__ import annotations

from typing import Any

from lookup_source.bench import journal
from lookup_source.bench.plan_result import PlanResult, best_of, kept
from lookup_source.bench.plan_table import SCHEMA, jdbc_table


def scan_rates(
    spark: Any,
    args: Any,
    table: str,
    rows: int,
    options: dict[str, str],
    has_jdbc: bool,
    results: list[PlanResult],
) -> None:
    """The table read whole (every column, written nowhere) by Spark's JDBC reader and by the
    data source, over the same partitions."""
    reads = [
        (
            "data source scan",
            lambda: spark.read.format("asynclookup").schema(SCHEMA).options(**options).load(),
        )
    ]
    if has_jdbc:
        reads.insert(
            0,
            (
                "Spark JDBC read",
                lambda: jdbc_table(spark, args.postgres_url, table, rows, args.tasks),
            ),
        )
    for label, read in reads:
        try:
            best = best_of(read())
        except Exception as error:  # kept as failed, the run goes on
            reason = journal.JOURNAL.failed(label, error)
            kept(results, PlanResult(rows, rows, label, 0.0, 0, note=f"FAILED: {reason}"))
            continue
        kept(results, PlanResult(rows, rows, label, best, rows, note=f"{args.tasks} partitions"))
