"""The plan scenario's stream: the stream scenario's source joined to the table, by Spark's
stream-static join against the JDBC reader (the table read again every micro-batch) and by
``lookup_join``; each its median ``addBatch`` and its rows a second while busy."""

from __future__ import annotations

from typing import Any

from lookup_source.bench import journal
from lookup_source.bench.plan_result import PlanResult, kept
from lookup_source.bench.plan_table import SCHEMA, jdbc_table

JDBC_ROWS_PER_S = 1_500_000
"""About how fast Spark's JDBC reader reads the table on 2 cores (2.1M rows/s measured): how
long a stream-static join's micro-batch takes to read it again."""


def stream_plans(
    spark: Any,
    args: Any,
    table: str,
    rows: int,
    options: dict[str, str],
    has_jdbc: bool,
    results: list[PlanResult],
) -> None:
    """A stream (the stream scenario's source: ``--stream-rate`` rows a second, a micro-batch
    every ``--stream-trigger-ms``) joined to the table: Spark's stream-static join against the
    JDBC reader (which reads the table again every micro-batch), and ``lookup_join``. Each: the
    median ``addBatch`` and the rows a second while busy (rows over the sum of ``addBatch``).

    Sized to the table: a micro-batch of the stream-static join reads the whole table (about
    ``rows / JDBC_ROWS_PER_S`` seconds), so it counts fewer micro-batches over a large table,
    and waits for them as long as they take."""
    from lookup_source import lookup_join
    from lookup_source.bench.stream import _events, _run

    events = _events(spark, args).withColumnRenamed("user_id", "uid")
    reread_s = rows / JDBC_ROWS_PER_S
    methods = [
        (
            "stream: lookup_join",
            lambda: lookup_join(events, "uid", schema=SCHEMA, options=options, how="left"),
            0.0,
        )
    ]
    if has_jdbc:
        methods.insert(
            0,
            (
                "stream: Spark JDBC stream-static join",
                lambda: events.join(
                    jdbc_table(spark, args.postgres_url, table, rows, args.tasks), "uid", "left"
                ),
                reread_s,
            ),
        )
    rate = f"{args.stream_rate:,} rows/s, a micro-batch every {args.stream_trigger_ms} ms"
    for label, frame, batch_s in methods:
        # at most about two minutes of micro-batches, at least five
        batches = max(5, min(args.stream_batches, int(120 / max(batch_s, 0.001))))
        try:
            run = _run(spark, frame(), args, "postgres", label, batches=batches, batch_s=batch_s)
        except Exception as error:  # kept as failed, the run goes on
            reason = journal.JOURNAL.failed(label, error)
            kept(results, PlanResult(args.stream_rate, 0, label, 0.0, 0, note=f"FAILED: {reason}"))
            continue
        busy = run.rows / (sum(run.durations_ms) / 1000) if sum(run.durations_ms) else 0.0
        kept(
            results,
            PlanResult(
                args.stream_rate,
                0,
                label,
                run.median_ms / 1000,
                run.rows,
                note=f"{rate}; {run.batches} micro-batches; busy {busy:,.0f} rows/s",
                extra={"busy_rows_per_s": busy, "p90_ms": run.p90_ms},
            ),
        )
