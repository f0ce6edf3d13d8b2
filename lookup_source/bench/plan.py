"""The plan scenario (``--scenarios plan``): which plan wins at which input size.

A Postgres table of ``--plan-table-rows`` rows (``uid bigint primary key, name text, tier
int``, 2,000,000 by default, kept between runs); inputs of ``--plan-inputs`` rows (20,000,
200,000 and 2,000,000 by default), each over distinct keys that grow with it (a quarter of its
rows, at most the table's; a tenth of the keys miss the table). For each input, in one run:

- Spark's own JDBC reader and a join (``spark.read.jdbc`` partitioned on the key over
  ``--tasks`` partitions, ``df.join(dim, "uid", "left")``: what a Spark user writes instead);
- the same with ``broadcast(dim)`` (what a Spark user who knows the table fits writes);
- ``lookup_join`` with ``strategy`` ``lookup``, ``broadcast`` (where the table fits the
  broadcast limit), ``scan`` and ``auto`` (its choice and reason reported);
- where the session has the SQL extension (PySpark 4.1+): the same join as a SQL ``JOIN``
  against the table registered with ``register_lookup_table`` (rewritten into lookups), the
  same ``JOIN`` with the rewrite off (the data source's scan and Spark's join), the table
  function, and a ``JOIN`` against the table registered with ``strategy=auto``;
- then (with the SQL extension) a point-in-time join of ``--plan-point-in-time-rows`` visits
  against a versioned table of as many rows (:mod:`.plan_versions`): Spark's JDBC reader and
  its join, with ``broadcast``, and the SQL JOIN rewritten and not.

Every method's answer is checked against the JDBC join's (its rows, and a sum over a hash of
every column). Then the scans alone: the rows per second of Spark's JDBC reader and of the data
source over the same table and partitions, every column read. Then a stream (the stream
scenario's source and trigger) joined to the table: Spark's stream-static join against the
JDBC reader, and ``lookup_join``.

The JDBC driver is Debian's ``libpostgresql-jdbc-java`` (``apt-get install
libpostgresql-jdbc-java``: ``/usr/share/java/postgresql.jar``); without it the JDBC rows say so.

This module runs the scenario (:func:`run_plan`) and measures each method on an input
(:class:`Measure`); its table and inputs are in :mod:`.plan_table`, its lines in
:mod:`.plan_result`, its SQL rows in :mod:`.plan_sql`, its scans in :mod:`.plan_scans`, its
stream in :mod:`.plan_stream`, its report and plot in :mod:`.plan_report`.
"""

from __future__ import annotations

import os
from typing import Any

from lookup_source.bench import journal
from lookup_source.bench.plan_report import as_json, plan_report, plot_plans
from lookup_source.bench.plan_result import PlanResult, best_of, checksum, kept
from lookup_source.bench.plan_scans import scan_rates
from lookup_source.bench.plan_sql import sql_joins, sql_tables
from lookup_source.bench.plan_stream import stream_plans
from lookup_source.bench.plan_table import SCHEMA, ensure_table, jdbc_table, plan_input
from lookup_source.bench.plan_versions import point_in_time
from lookup_source.bench.scans import JDBC_JAR


def run_plan(spark: Any, args: Any, results: list[PlanResult] | None = None) -> list[PlanResult]:
    """The scenario, each method's result added to ``results`` (and reported) as it ends."""
    from pyspark.sql import functions as F

    from lookup_source import lookup_join, lookup_metrics
    from lookup_source.spark.plan import LookupPlan
    from lookup_source.spark.strategy import broadcast_limit

    table_rows = args.plan_table_rows
    table = ensure_table(args.postgres_url, table_rows)
    options = {
        "connector": "postgres",
        "url": args.postgres_url,
        "postgres.table": table,
        "key.column": "uid",
        "partitions": str(args.tasks),
    }
    has_jdbc = os.path.exists(JDBC_JAR)
    limit = broadcast_limit(spark, LookupPlan.build(options, SCHEMA))
    sql = sql_tables(spark, options)
    results = [] if results is None else results
    for rows in (int(r) for r in args.plan_inputs.split(",") if r.strip()):
        df, distinct = plan_input(spark, rows, table_rows, args.tasks)
        measure = Measure(results, rows, distinct)
        if has_jdbc:
            measure(
                "Spark JDBC + join",
                lambda df=df: df.join(
                    jdbc_table(spark, args.postgres_url, table, table_rows, args.tasks),
                    "uid",
                    "left",
                ),
                reference=True,
            )
            measure(
                "Spark JDBC + broadcast(dim)",
                lambda df=df: df.join(
                    F.broadcast(
                        jdbc_table(spark, args.postgres_url, table, table_rows, args.tasks)
                    ),
                    "uid",
                    "left",
                ),
            )
        else:
            measure.skipped("Spark JDBC + join", f"no JDBC driver at {JDBC_JAR}")
        for strategy in ("lookup", "broadcast", "scan", "auto"):
            if strategy == "broadcast" and table_rows > limit:
                measure.skipped(strategy, f"the table is beyond the broadcast limit ({limit:,})")
                continue

            def frame(df: Any = df, strategy: str = strategy) -> Any:
                chosen = {**options, "strategy": strategy}
                return lookup_join(df, "uid", schema=SCHEMA, options=chosen, how="left")

            def chosen(out: Any, strategy: str = strategy) -> tuple[str, dict[str, Any]]:
                metrics = lookup_metrics(out)
                note = f"chose {metrics.strategy}: {metrics.strategy_reason}"
                return (note if strategy == "auto" else ""), {"chosen": metrics.strategy}

            measure(strategy, frame, describe=chosen)
        if sql is not None:
            sql_joins(spark, measure, df, sql)
        df.unpersist()
    if sql is not None and args.plan_point_in_time_rows > 0:
        point_in_time(
            spark,
            args,
            options,
            lambda rows, distinct: Measure(results, rows, distinct),
            has_jdbc,
        )
    scan_rates(spark, args, table, table_rows, options, has_jdbc, results)
    stream_plans(spark, args, table, table_rows, options, has_jdbc, results)
    return results


class Measure:
    """Times each method on one input, checks its answer against the reference's (the JDBC
    join's), and keeps its line; a method that fails is kept as failed, with its reason."""

    def __init__(self, results: list[PlanResult], rows: int, distinct: int) -> None:
        self.results = results
        self.rows = rows
        self.distinct = distinct
        self.expected: tuple[int, int] | None = None

    def __call__(
        self,
        method: str,
        frame: Any,
        *,
        reference: bool = False,
        describe: Any = None,
    ) -> None:
        try:
            out = frame()
            seconds = best_of(out)
            got = checksum(out)
            note, extra = describe(out) if describe is not None else ("", {})
        except Exception as error:  # one method's failure never ends the run
            reason = journal.JOURNAL.failed(f"plan: {self.rows:,} rows, {method}", error)
            self.skipped(method, f"FAILED: {reason}")
            return
        if reference:
            self.expected = got
        elif self.expected is not None and got != self.expected:
            note = "; ".join(
                n
                for n in (f"ANSWER DIFFERS from JDBC + join: {got} against {self.expected}", note)
                if n
            )
        kept(
            self.results,
            PlanResult(self.rows, self.distinct, method, seconds, got[0], got[1], note, extra),
        )

    def skipped(self, method: str, note: str) -> None:
        kept(self.results, PlanResult(self.rows, self.distinct, method, 0.0, 0, note=note))


__all__ = [
    "Measure",
    "PlanResult",
    "as_json",
    "best_of",
    "checksum",
    "kept",
    "plan_report",
    "plot_plans",
    "run_plan",
]
