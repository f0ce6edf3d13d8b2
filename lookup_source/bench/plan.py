"""The plan scenario (``--scenarios plan``): which plan wins at which input size.

A Postgres table of ``--plan-table-rows`` rows (``uid bigint primary key, name text, tier
int``, 2,000,000 by default, kept between runs); inputs of ``--plan-inputs`` rows (20,000,
200,000 and 2,000,000 by default), each over distinct keys that grow with it (a quarter of its
rows, at most the table's; a tenth of the keys miss the table). For each input, in one run:

- Spark's own JDBC reader and a join (``spark.read.jdbc`` partitioned on the key over
  ``--tasks`` partitions, ``df.join(dim, "uid", "left")``: what a Spark user writes instead);
- ``lookup_join`` with ``strategy`` ``lookup``, ``broadcast`` (where the table fits
  ``strategy.broadcast.max-rows``), ``scan`` and ``auto`` (its choice and reason reported);
- where the session has the SQL extension (PySpark 4.1+): the same join as a SQL ``JOIN``
  against the table registered with ``register_lookup_table`` (rewritten into lookups), the
  same ``JOIN`` with the rewrite off (the data source's scan and Spark's join), the table
  function, and a ``JOIN`` against the table registered with ``strategy=auto``.

Every method's answer is checked against the JDBC join's (its rows, and a sum over a hash of
every column). Then the scans alone: the rows per second of Spark's JDBC reader and of the data
source over the same table and partitions, every column read. Then a stream (the stream
scenario's source and trigger) joined to the table: Spark's stream-static join against the
JDBC reader, and ``lookup_join``.

The JDBC driver is Debian's ``libpostgresql-jdbc-java`` (``apt-get install
libpostgresql-jdbc-java``: ``/usr/share/java/postgresql.jar``); without it the JDBC rows say so.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit

from lookup_source.bench import journal
from lookup_source.bench.methods import JDBC_JAR, timed

PLAN_TABLE = "asynclookup_bench_plan"
SCHEMA = "uid long, name string, tier int"


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


def ensure_table(url: str, rows: int) -> str:
    """The scenario's table of ``rows`` rows (made once, kept between runs), analysed."""
    import asyncpg

    table = f"{PLAN_TABLE}_{rows}"

    async def setup() -> None:
        connection = await asyncpg.connect(url)
        try:
            present = await connection.fetchval("SELECT to_regclass($1) IS NOT NULL", table)
            if present and await connection.fetchval(f"SELECT count(*) FROM {table}") == rows:
                return
            await connection.execute(
                f"DROP TABLE IF EXISTS {table}; CREATE TABLE {table} "
                "(uid bigint PRIMARY KEY, name text, tier int)"
            )
            await connection.execute(
                f"INSERT INTO {table} SELECT g, 'user-' || g, g % 7 "
                f"FROM generate_series(0, {rows - 1}) g"
            )
            await connection.execute(f"ANALYZE {table}")
        finally:
            await connection.close()

    asyncio.run(setup())
    return table


def plan_input(spark: Any, rows: int, table_rows: int, tasks: int) -> tuple[Any, int]:
    """``rows`` input rows over a quarter as many distinct keys (at most the table's rows and
    a tenth more, the tenth missing), cached; and the distinct keys."""
    from pyspark.sql import functions as F

    distinct = max(1, min(rows // 4, table_rows))
    spread = distinct + distinct // 10  # the tenth beyond the table's keys: misses
    key = F.pmod(F.xxhash64("id"), F.lit(spread)) * F.lit(max(1, table_rows // distinct))
    df = spark.range(rows, numPartitions=tasks).select(
        F.col("id").alias("event_id"), key.cast("long").alias("uid")
    )
    df = df.cache()
    df.count()
    return df, distinct


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


def jdbc_table(spark: Any, url: str, table: str, rows: int, tasks: int) -> Any:
    parts = urlsplit(url)
    jdbc = f"jdbc:postgresql://{parts.hostname}:{parts.port or 5432}{parts.path or '/postgres'}"
    return (
        spark.read.format("jdbc")
        .option("url", jdbc)
        .option("dbtable", table)
        .option("user", parts.username or "postgres")
        .option("driver", "org.postgresql.Driver")
        .option("partitionColumn", "uid")
        .option("lowerBound", "0")
        .option("upperBound", str(rows))
        .option("numPartitions", str(tasks))
        .load()
    )


def run_plan(spark: Any, args: Any, results: list[PlanResult] | None = None) -> list[PlanResult]:
    """The scenario, each method's result added to ``results`` (and reported) as it ends."""
    from lookup_source import lookup_join, lookup_metrics

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
        else:
            measure.skipped("Spark JDBC + join", f"no JDBC driver at {JDBC_JAR}")
        for strategy in ("lookup", "broadcast", "scan", "auto"):
            if strategy == "broadcast" and table_rows > 1_000_000:
                measure.skipped(strategy, "the table is beyond strategy.broadcast.max-rows")
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
    scan_rates(spark, args, table, table_rows, options, has_jdbc, results)
    stream_plans(spark, args, table, table_rows, options, has_jdbc, results)
    return results


def kept(results: list[PlanResult], result: PlanResult) -> PlanResult:
    """``result`` added to the run's results and reported now."""
    results.append(result)
    seconds = f"{result.seconds:.2f} s" if result.seconds else result.note
    journal.JOURNAL.done(f"plan: {result.input_rows:,} rows, {result.method}: {seconds}")
    return result


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


@dataclass(frozen=True)
class SqlTables:
    """The table registered for SQL twice (``lookup`` and ``auto``), and the input's view."""

    lookup: str = "bench_plan_users"
    auto: str = "bench_plan_users_auto"
    events: str = "bench_plan_events"


def sql_tables(spark: Any, options: dict[str, str]) -> SqlTables | None:
    """The scenario's table registered for SQL, when this session has the SQL extension
    (PySpark 4.1+, the session started by the bench with it)."""
    from lookup_source import register_lookup_table
    from lookup_source.spark.sql_extension import extension_active

    if not extension_active(spark):
        return None
    tables = SqlTables()
    register_lookup_table(spark, tables.lookup, schema=SCHEMA, options=options)
    register_lookup_table(
        spark, tables.auto, schema=SCHEMA, options={**options, "strategy": "auto"}
    )
    return tables


def sql_joins(spark: Any, measure: Measure, df: Any, tables: SqlTables) -> None:
    """The same join in SQL: a JOIN rewritten into lookups by the SQL extension, the same JOIN
    with the rewrite off (the data source's scan and Spark's join), the table function, and a
    JOIN against the table registered with ``strategy=auto``."""
    from lookup_source.spark.sql_extension import ENABLED

    df.createOrReplaceTempView(tables.events)
    join = (
        "SELECT e.event_id, e.uid, u.name, u.tier FROM {events} e "
        "LEFT JOIN {table} u ON e.uid = u.uid"
    )

    def query(table: str, enabled: bool = True) -> Any:
        spark.conf.set(ENABLED, "true" if enabled else "false")
        return spark.sql(join.format(events=tables.events, table=table))

    def rewritten(out: Any) -> tuple[str, dict[str, Any]]:
        plan = out._jdf.queryExecution().executedPlan().toString()
        lookups = "ArrowEvalPythonUDTF" in plan
        return ("runs as lookups" if lookups else "Spark's scan and join"), {"lookups": lookups}

    function = f"SELECT * FROM {tables.lookup}_lookup(TABLE({tables.events}), 'uid')"
    spark.sql(function).write.format("noop").mode("overwrite").save()  # warm: not a method's
    try:
        measure("SQL JOIN", lambda: query(tables.lookup), describe=rewritten)
        measure("SQL JOIN, rewrite off", lambda: query(tables.lookup, False), describe=rewritten)
        measure("SQL table function", lambda: spark.sql(function))
        measure("SQL JOIN, strategy=auto", lambda: query(tables.auto), describe=rewritten)
    finally:
        spark.conf.unset(ENABLED)


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


JDBC_ROWS_PER_S = 1_500_000
"""About how fast Spark's JDBC reader reads the table on 2 cores (2.1M rows/s measured): how
long a stream-static join's micro-batch takes to read it again."""


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


def plan_report(results: list[PlanResult], args: Any) -> list[str]:
    lines = [
        "## Plans: lookups, a broadcast or a scan, against Spark's JDBC reader and a join",
        "",
        f"A Postgres table of {args.plan_table_rows:,} rows; {args.tasks} tasks; the best of "
        "two runs of each. Each answer is checked against the JDBC join's (rows and a hash of "
        "every column).",
        "",
        "| input rows | distinct keys | method | seconds | ÷ JDBC + join | note |",
        "|---|---|---|---|---|---|",
    ]
    jdbc = {r.input_rows: r.seconds for r in results if r.method == "Spark JDBC + join"}
    for r in results:
        if r.method in ("Spark JDBC read", "data source scan") or r.method.startswith("stream"):
            continue
        base = jdbc.get(r.input_rows)
        ratio = f"{base / r.seconds:.2f}x" if base and r.seconds else "—"
        seconds = f"{r.seconds:.2f}" if r.seconds else "—"
        lines.append(
            f"| {r.input_rows:,} | {r.distinct_keys:,} | {r.method} | {seconds} | {ratio} | "
            f"{r.note} |"
        )
    scans = [r for r in results if r.method in ("Spark JDBC read", "data source scan")]
    if scans:
        lines += ["", "| the table read whole | seconds | rows/s |", "|---|---|---|"]
        lines += [
            f"| {r.method} ({r.note}) | {r.seconds:.2f} | {r.rows_per_s:,.0f} |" for r in scans
        ]
    streams = [r for r in results if r.method.startswith("stream")]
    if streams:
        lines += ["", "| a stream joined to the table | median addBatch | note |", "|---|---|---|"]
        lines += [f"| {r.method} | {r.seconds * 1000:.0f} ms | {r.note} |" for r in streams]
    return lines


def as_json(results: list[PlanResult]) -> list[dict[str, Any]]:
    return [{**asdict(r), "rows_per_s": r.rows_per_s} for r in results]


def plot_plans(results: list[PlanResult], out: str) -> None:
    """Time against input size for each plan (log-log), written to ``plans.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    reads = ("Spark JDBC read", "data source scan")
    runs = [
        r
        for r in results
        if r.seconds and r.method not in reads and not r.method.startswith("stream")
    ]
    if not runs:
        return
    figure, axis = plt.subplots(figsize=(7, 4.5))
    for method in dict.fromkeys(r.method for r in runs):
        points = sorted((r.input_rows, r.seconds) for r in runs if r.method == method)
        axis.plot(*zip(*points), marker="o", label=method)
    crossing = crossover(runs, "lookup", "scan")
    if crossing is not None:
        axis.axvline(crossing, color="grey", linestyle="--")
        axis.annotate(
            f"lookup = scan at ~{crossing:,.0f} rows",
            (crossing, axis.get_ylim()[1]),
            rotation=90,
            va="top",
            ha="right",
            fontsize=8,
        )
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_xlabel("input rows")
    axis.set_ylabel("seconds")
    axis.set_title("Plans over a Postgres table: time against input size")
    axis.legend()
    axis.grid(True, which="both", alpha=0.3)
    figure.tight_layout()
    figure.savefig(os.path.join(out, "plans.png"), dpi=110)
    plt.close(figure)


def crossover(results: list[PlanResult], first: str, second: str) -> float | None:
    """The input size where ``first`` and ``second`` take the same time, interpolated (in logs)
    between the two measured sizes where the faster of them changes; None if it never does."""
    import math

    times: dict[int, dict[str, float]] = {}
    for r in results:
        if r.method in (first, second) and r.seconds:
            times.setdefault(r.input_rows, {})[r.method] = r.seconds
    points = sorted((n, t[first], t[second]) for n, t in times.items() if len(t) == 2)
    for (n0, a0, b0), (n1, a1, b1) in itertools.pairwise(points):
        d0, d1 = math.log(a0 / b0), math.log(a1 / b1)
        if d0 == 0:
            return float(n0)
        if d0 * d1 < 0:
            share = d0 / (d0 - d1)
            return math.exp(math.log(n0) + share * (math.log(n1) - math.log(n0)))
    return None
