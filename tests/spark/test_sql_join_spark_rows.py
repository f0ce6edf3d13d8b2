"""A rewritten SQL JOIN reads the rows and raises the errors Spark's own join would, where
Spark's optimizer or its cache decides them, against a real Postgres: a common table expression
joined twice, a lookup table Spark caches, a ``NOT IN`` whose table changes, literals under
``spark.sql.parser.escapedStringLiterals``, a table with ``on.error=null``, and expressions
that may raise where Spark would evaluate them on other rows (a ``WHERE`` above the join, an
equality of the input and the table's values, a column no one reads, a ``LIMIT``, a
``DISTINCT``, an ``OR``). Each query runs with the rewrite on and off (Spark's scan and join,
the reference): the same rows, or both raising."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from lookup_source import register_lookup_table
from lookup_source.spark.internals import clear_decisions, jvm_decisions, plan_text
from lookup_source.spark.versions import SQL_JOINS
from tests.helpers import needs, run_postgres
from tests.spark.sql_rewrite import (
    decided,
    rewrite,
    rows,
    same_both_ways,
    same_outcome_both_ways,
)

pytestmark = needs(SQL_JOINS)

# id, key (nulls, misses, repeats), amt (0 only where the key matches nothing), key of a pair
INPUT = [
    (1, 1, 1, 2),
    (2, 2, 2, 1),
    (3, 3, 3, 3),
    (4, 999, 0, 0),
    (5, None, 0, 9),
    (6, 1, 1, 2),
    (7, 2, 2, 1),
]


@pytest.fixture(scope="module")
def t(spark: Any, postgres_srv: Any) -> Iterator[dict[str, str]]:
    """The tables' names: ``dim`` (k 0..10, v 'i<k>', n = k % 4: zero on 0, 4, 8), ``texts``
    (values with backslashes and quotes), ``ints`` (a bigint beyond ``int``), ``nin`` (no null
    key yet), ``kept`` (to be cached), and the input ``ev``."""
    suffix = uuid.uuid4().hex[:8]
    pg = {s: f"sjr_{s}_{suffix}" for s in ("dim", "texts", "ints", "nin", "kept")}
    run_postgres(
        postgres_srv.url,
        f"CREATE TABLE {pg['dim']} (k int PRIMARY KEY, v text, n int)",
        f"INSERT INTO {pg['dim']} SELECT g, 'i' || g, g % 4 FROM generate_series(0, 10) g",
        f"CREATE TABLE {pg['texts']} (k int PRIMARY KEY, v text)",
        f"INSERT INTO {pg['texts']} VALUES (1, E'a\\\\b'), (2, E'a\\\\\\\\b'), (3, 'it''s')",
        f"CREATE TABLE {pg['ints']} (k int PRIMARY KEY, big bigint)",
        f"INSERT INTO {pg['ints']} VALUES (1, 1099511627776), (2, 5)",
        f"CREATE TABLE {pg['nin']} (k int, v text)",
        f"INSERT INTO {pg['nin']} VALUES (1, 'one'), (3, 'three')",
        f"CREATE TABLE {pg['kept']} (k int PRIMARY KEY, v text)",
        f"INSERT INTO {pg['kept']} VALUES (1, 'before'), (2, 'two')",
    )
    base = {"connector": "postgres", "url": postgres_srv.url}
    names = {s: f"sjr_{s}_{suffix}" for s in pg}
    for short in ("dim", "texts", "kept"):
        register_lookup_table(spark, names[short], options={**base, "postgres.table": pg[short]})
    register_lookup_table(
        spark,
        names["ints"],
        schema="k int, big int",  # 1099511627776 does not fit: the scan gives null
        options={**base, "postgres.table": pg["ints"], "key.column": "k", "on.error": "null"},
    )
    register_lookup_table(
        spark,
        names["nin"],
        schema="k int, v string",
        options={**base, "postgres.table": pg["nin"], "key.column": "k"},
    )
    names["ev"] = f"sjr_ev_{suffix}"
    spark.createDataFrame(INPUT, "id long, ki int, amt int, kp int").createOrReplaceTempView(
        names["ev"]
    )
    names["pg_nin"], names["pg_kept"] = pg["nin"], pg["kept"]
    yield names
    run_postgres(postgres_srv.url, *(f"DROP TABLE {table}" for table in pg.values()))


def reason(spark: Any, sql: str) -> str:
    with rewrite(spark, True):
        return " | ".join(d[3] for d in decided(spark, sql))


def test_a_common_table_expression_joined_twice_keeps_each_joins_values(
    spark: Any, t: dict[str, str]
) -> None:
    # the CTE's first reference shares its definition's column ids with the table: the second
    # join's input (the first, rewritten) carries them; each join's values must stay its own
    sql = (
        f"WITH d AS (SELECT k, v FROM {t['dim']} WHERE k > 1) "
        f"SELECT e.id, a.v, b.v FROM {t['ev']} e JOIN d a ON e.ki = a.k "
        f"LEFT JOIN d b ON e.kp = b.k"
    )
    got = same_both_ways(spark, sql, rewritten=True)
    assert got == Counter({(2, "i2", None): 1, (3, "i3", "i3"): 1, (7, "i2", None): 1})


def test_a_lookup_table_spark_caches_is_read_from_the_cache(
    spark: Any, postgres_srv: Any, t: dict[str, str]
) -> None:
    sql = f"SELECT e.id, d.v FROM {t['ev']} e JOIN {t['kept']} d ON e.ki = d.k"
    spark.sql(f"CACHE TABLE {t['kept']}")
    try:
        run_postgres(postgres_srv.url, f"UPDATE {t['pg_kept']} SET v = 'after' WHERE k = 1")
        got = same_both_ways(spark, sql, rewritten=False)
        assert got == Counter({(1, "before"): 1, (6, "before"): 1, (2, "two"): 1, (7, "two"): 1})
        assert "caches the lookup table" in reason(spark, sql)
    finally:
        spark.sql(f"UNCACHE TABLE {t['kept']}")
    # uncached: the lookups again, reading the store
    assert same_both_ways(spark, sql, rewritten=True)[(1, "after")] == 1


def test_not_in_asks_the_table_at_each_query(
    spark: Any, postgres_srv: Any, t: dict[str, str]
) -> None:
    sql = f"SELECT e.id FROM {t['ev']} e WHERE e.ki NOT IN (SELECT k FROM {t['nin']})"
    assert same_both_ways(spark, sql, rewritten=True) == Counter({(2,): 1, (4,): 1, (7,): 1})
    run_postgres(postgres_srv.url, f"INSERT INTO {t['pg_nin']} VALUES (NULL, 'no key')")
    try:  # a null key now: NOT IN keeps no row, at once (nothing kept from the last query)
        assert same_both_ways(spark, sql, rewritten=True) == Counter()
    finally:
        run_postgres(postgres_srv.url, f"DELETE FROM {t['pg_nin']} WHERE k IS NULL")


def test_not_in_keeps_spark_s_rows_when_its_table_changes_after_analysis(
    spark: Any, postgres_srv: Any, t: dict[str, str]
) -> None:
    # one rewritten frame, analyzed while the table holds no null key and some rows, run again
    # as the table changes (as a stream runs each micro-batch from its analyzed plan): the table
    # function asks the store at each run, and keeps what Spark's join of the table now keeps
    sql = f"SELECT e.id FROM {t['ev']} e WHERE e.ki NOT IN (SELECT k FROM {t['nin']})"
    pg = t["pg_nin"]
    with rewrite(spark, True):
        frame = spark.sql(sql)
        assert "ArrowEvalPythonUDTF" in plan_text(frame, "simple")

    def spark_s() -> Counter[tuple[Any, ...]]:
        with rewrite(spark, False):
            return rows(spark.sql(sql))

    assert rows(frame) == spark_s() == Counter({(2,): 1, (4,): 1, (7,): 1})
    run_postgres(postgres_srv.url, f"INSERT INTO {pg} VALUES (NULL, 'no key')")
    try:  # a null key: no row is NOT IN it
        assert rows(frame) == spark_s() == Counter()
    finally:
        run_postgres(postgres_srv.url, f"DELETE FROM {pg} WHERE k IS NULL")
    run_postgres(postgres_srv.url, f"DELETE FROM {pg}")
    try:  # no row: every row is NOT IN it, a null value too (id 5)
        assert rows(frame) == spark_s() == Counter({(i,): 1 for i in range(1, 8)})
    finally:
        run_postgres(postgres_srv.url, f"INSERT INTO {pg} VALUES (1, 'one'), (3, 'three')")
    assert rows(frame) == Counter({(2,): 1, (4,): 1, (7,): 1})


@pytest.mark.parametrize("kind", ["TEMPORARY VIEW", "GLOBAL TEMPORARY VIEW"])
def test_a_view_of_a_join_is_rewritten_where_it_is_read(
    spark: Any, t: dict[str, str], kind: str
) -> None:
    # Spark analyzes a SQL view's text again at each read, seeing only the temporary views and
    # functions its definition read: the definition is left as Spark analyzed it, the read is
    # rewritten (its table function let in), and the switch is the session's, not the view's
    view = f"{t['ev']}_v{len(kind)}"
    name = f"global_temp.{view}" if kind.startswith("GLOBAL") else view
    spark.sql(
        f"CREATE {kind} {view} AS SELECT e.id, d.v FROM {t['ev']} e "
        f"LEFT JOIN {t['dim']} d ON e.ki = d.k"
    )
    try:
        got = same_both_ways(spark, f"SELECT * FROM {name}", rewritten=True)
        assert got == Counter(
            {
                (1, "i1"): 1,
                (6, "i1"): 1,
                (2, "i2"): 1,
                (7, "i2"): 1,
                (3, "i3"): 1,
                (4, None): 1,
                (5, None): 1,
            }
        )
        with rewrite(spark, False):
            assert "ArrowEvalPythonUDTF" not in plan_text(
                spark.sql(f"SELECT * FROM {name}"), "simple"
            )
    finally:
        spark.sql(f"DROP VIEW IF EXISTS {name}")


def test_a_not_in_value_that_may_raise_stays_spark(spark: Any, t: dict[str, str]) -> None:
    # Spark computes a NOT IN's value only where the table has rows
    sql = f"SELECT e.id FROM {t['ev']} e WHERE 100 DIV e.amt NOT IN (SELECT k FROM {t['nin']})"
    ansi = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", "true")
    try:
        same_outcome_both_ways(spark, sql, rewritten=False)
        assert "NOT IN value that may raise" in reason(spark, sql)
    finally:
        spark.conf.set("spark.sql.ansi.enabled", ansi)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (  # a join in a subquery, which Spark analyzes apart from the view's definition
            "SELECT e.id FROM {ev} e WHERE e.id IN "
            "(SELECT x.id FROM {ev} x JOIN {dim} d ON x.ki = d.k)",
            Counter({(i,): 1 for i in (1, 2, 3, 6, 7)}),
        ),
        (
            "SELECT e.id, (SELECT max(d.v) FROM {ev} x JOIN {dim} d ON x.ki = d.k) AS mx "
            "FROM {ev} e",
            Counter({(i, "i3"): 1 for i in range(1, 8)}),
        ),
    ],
)
def test_a_view_s_definition_is_left_as_spark_analyzed_it(
    spark: Any, t: dict[str, str], body: str, expected: Counter[tuple[Any, ...]]
) -> None:
    # a definition (CREATE VIEW, ALTER VIEW ... AS), subqueries included, must still read the
    # lookup table's view, which the view's text names; the view is rewritten where it is read
    view = f"{t['ev']}_def"
    query = body.format(**t)
    try:
        with rewrite(spark, True):
            spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW {view} AS {query}")
        assert same_both_ways(spark, f"SELECT * FROM {view}", rewritten=True) == expected
        with rewrite(spark, True):
            spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW {view} AS SELECT id FROM {t['ev']}")
            spark.sql(f"ALTER VIEW {view} AS {query}")
        assert same_both_ways(spark, f"SELECT * FROM {view}", rewritten=True) == expected
    finally:
        spark.sql(f"DROP VIEW IF EXISTS {view}")


def test_a_view_s_text_may_be_read_in_part(spark: Any, t: dict[str, str]) -> None:
    # the query reading a view is not seen where its text is rewritten: a column that may
    # raise (Spark prunes it when the query does not read it) or a key that may raise (under a
    # LIMIT, Spark may read fewer rows) keeps Spark's join there
    view = f"{t['ev']}_part"
    spark.sql(
        f"CREATE OR REPLACE TEMPORARY VIEW {view} AS SELECT e.id, e.q, d.v FROM "
        f"(SELECT id, ki, 100 DIV amt AS q FROM {t['ev']}) e JOIN {t['dim']} d ON e.ki = d.k"
    )
    ansi = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", "true")
    try:
        got = same_both_ways(spark, f"SELECT id, v FROM {view}", rewritten=False)
        pairs = [(1, "i1"), (6, "i1"), (2, "i2"), (7, "i2"), (3, "i3")]
        assert got == Counter(pairs)
        assert "may raise" in reason(spark, f"SELECT id, v FROM {view}")
    finally:
        spark.conf.set("spark.sql.ansi.enabled", ansi)
        spark.sql(f"DROP VIEW IF EXISTS {view}")


@contextmanager
def cached_join(
    spark: Any, postgres_srv: Any, t: dict[str, str], name: str
) -> Iterator[tuple[str, str, Any]]:
    """A join of ``kept``, cached twice — ``CACHE TABLE <ev>_<name> AS`` it, and a frame of it
    ``.cache()``d — with the rewrite as it is: its query, the cached view and the frame. After:
    both uncached, the view dropped, the store's row of key 2 put back to ``two``."""
    sql = f"SELECT e.id, d.v FROM {t['ev']} e JOIN {t['kept']} d ON e.ki = d.k"
    cached = f"{t['ev']}_{name}"
    spark.sql(f"CACHE TABLE {cached} AS {sql}")
    frame = spark.sql(sql)
    frame.cache()
    try:
        yield sql, cached, frame
    finally:
        frame.unpersist()
        spark.sql(f"UNCACHE TABLE IF EXISTS {cached}")
        spark.sql(f"DROP VIEW IF EXISTS {cached}")
        run_postgres(postgres_srv.url, f"UPDATE {t['pg_kept']} SET v = 'two' WHERE k = 2")


def test_a_cached_join_is_read_from_the_cache(
    spark: Any, postgres_srv: Any, t: dict[str, str]
) -> None:
    # a query analyzed twice is one plan (the rewrite's id and its table function's answer are
    # the same each time): Spark's cache finds it, as it finds its own join
    with (
        rewrite(spark, True),
        cached_join(spark, postgres_srv, t, "cached") as (sql, cached, frame),
    ):
        before = rows(frame)
        assert before[(2, "two")] == 1 and rows(spark.table(cached)) == before
        run_postgres(postgres_srv.url, f"UPDATE {t['pg_kept']} SET v = 'changed' WHERE k = 2")
        for read in (spark.sql(sql), spark.table(cached)):
            assert "InMemoryRelation" in plan_text(read, "simple")
            assert rows(read) == before


@pytest.mark.parametrize("on", [False, True])
@pytest.mark.parametrize("refresh", ["sql", "catalog"])
def test_refreshing_the_lookup_table_re_reads_the_cached_joins_of_it(
    spark: Any, postgres_srv: Any, t: dict[str, str], on: bool, refresh: str
) -> None:
    # REFRESH TABLE (or spark.catalog.refreshTable) re-caches each cached query that reads the
    # table, which is then read again: the rewritten joins too (the rewrite keeps the table's
    # relation beside its lookups, in a branch that reads nothing). With the rewrite off,
    # Spark's own join: the reference
    with (
        rewrite(spark, on),
        cached_join(spark, postgres_srv, t, "refreshed") as (sql, cached, frame),
    ):
        before = rows(frame)
        assert before[(2, "two")] == 1
        run_postgres(postgres_srv.url, f"UPDATE {t['pg_kept']} SET v = 'changed' WHERE k = 2")
        assert rows(spark.table(cached)) == before and rows(frame) == before  # cached
        if refresh == "sql":
            spark.sql(f"REFRESH TABLE {t['kept']}")
        else:
            spark.catalog.refreshTable(t["kept"])
        # (a frame cached before keeps the plan it was given: Spark reads it from there)
        for read in (spark.table(cached), spark.sql(sql)):
            after = rows(read)
            assert after[(2, "changed")] == 1 and after[(2, "two")] == 0, after
            assert sum(after.values()) == sum(before.values())


def test_a_rewrite_keeps_its_table_linked_only_in_the_plan_spark_caches(
    spark: Any, t: dict[str, str]
) -> None:
    # the branch that keeps the table is in the analyzed plan (where Spark's cache looks) and
    # gone from the optimized one: no scan of the table, and the rows are the lookups'
    sql = f"SELECT e.id, d.v FROM {t['ev']} e LEFT JOIN {t['kept']} d ON e.ki = d.k"
    with rewrite(spark, True):
        frame = spark.sql(sql)
        execution = frame._jdf.queryExecution()
        analyzed, optimized = execution.analyzed().toString(), execution.optimizedPlan().toString()
        physical = plan_text(frame, "simple")
    assert "Union" in analyzed and "LocalLimit 0" in analyzed, analyzed
    assert "Union" not in optimized and "RelationV2" not in optimized, optimized
    assert "ArrowEvalPythonUDTF" in physical and "BatchScan" not in physical, physical
    same_both_ways(spark, sql, rewritten=True)


@pytest.mark.parametrize("escaped", [False, True])
def test_literals_reach_the_table_function_as_written(
    spark: Any, t: dict[str, str], escaped: bool
) -> None:
    # with escapedStringLiterals a backslash is itself; without, '\\' is one
    backslash = "\\" if escaped else "\\\\"
    sql = (
        f"SELECT e.id, d.v FROM {t['ev']} e LEFT JOIN {t['texts']} d "
        f"ON e.ki = d.k AND d.v = 'a{backslash}b'"  # judged by the table function, on pairs
    )
    spark.conf.set("spark.sql.parser.escapedStringLiterals", str(escaped).lower())
    try:
        got = same_both_ways(spark, sql, rewritten=True)
    finally:
        spark.conf.unset("spark.sql.parser.escapedStringLiterals")
    assert got[(1, "a\\b")] == 1 and got[(2, None)] == 1 and got[(3, None)] == 1


def test_a_table_whose_scan_gives_nulls_stays_spark(spark: Any, t: dict[str, str]) -> None:
    sql = f"SELECT e.id, d.big FROM {t['ev']} e LEFT JOIN {t['ints']} d ON e.ki = d.k"
    got = same_both_ways(spark, sql, rewritten=False)
    assert got[(1, None)] == 1 and got[(2, 5)] == 1
    assert "on.error=null" in reason(spark, sql)


@pytest.mark.parametrize(
    ("sql", "rewritten", "why"),
    [
        (  # Spark pushes the WHERE into the table's scan: 100 DIV 0 on the rows of n = 0
            "SELECT e.id, d.v FROM {ev} e JOIN {dim} d ON e.ki = d.k WHERE 100 DIV d.n > 1",
            False,
            "a condition above the join may raise",
        ),
        (  # the same through the query's projection, renamed
            "SELECT * FROM (SELECT e.id, d.n AS dn FROM {ev} e JOIN {dim} d ON e.ki = d.k) "
            "WHERE 100 DIV dn > 1",
            False,
            "a condition above the join may raise",
        ),
        (  # on the input's columns above a LEFT JOIN: every input row, both ways
            "SELECT e.id, d.v FROM {ev} e LEFT JOIN {dim} d ON e.ki = d.k "
            "WHERE 100 DIV (e.amt + 1) > 30",
            True,
            "",
        ),
        (  # above an inner join: Spark evaluates it on every input row, the rewrite on matches
            "SELECT e.id, d.v FROM {ev} e JOIN {dim} d ON e.ki = d.k "
            "WHERE 100 DIV (e.amt + 1) > 30",
            False,
            "on the input's columns may raise",
        ),
        (  # on both sides: on the join's rows, both ways
            "SELECT e.id, d.v FROM {ev} e JOIN {dim} d ON e.ki = d.k "
            "WHERE 100 DIV (e.amt + d.n + 1) > 10",
            True,
            "",
        ),
        (  # a join key of Spark's, computed on every row of the table
            "SELECT e.id, d.v FROM {ev} e JOIN {dim} d ON e.ki = d.k AND e.amt = 100 DIV d.n",
            False,
            "an equality of the input and the table's values may raise",
        ),
        (  # a column no one reads: Spark prunes it, so never computes it
            "SELECT e.id, d.v FROM (SELECT id, ki, 100 DIV amt AS q FROM {ev}) e "
            "JOIN {dim} d ON e.ki = d.k",
            False,
            "a column no one reads",
        ),
        (  # the same through a subquery (analyzed before the query above it is resolved)
            "SELECT e.id FROM (SELECT id, ki, 100 DIV amt AS q FROM {ev}) e "
            "WHERE NOT EXISTS (SELECT 1 FROM {dim} d WHERE d.k = e.ki)",
            False,
            "a column no one reads",
        ),
        (  # the same column read: Spark computes it on every input row too
            "SELECT e.id, e.q, d.v FROM (SELECT id, ki, 100 DIV amt AS q FROM {ev}) e "
            "JOIN {dim} d ON e.ki = d.k",
            True,
            "",
        ),
        (  # a null key never matches: Spark drops its row (id 5) before computing the input
            "SELECT e.id, e.q, d.v FROM (SELECT id, ki, 100 DIV amt AS q FROM {ev} "
            "WHERE id <> 4) e JOIN {dim} d ON e.ki = d.k",
            True,
            "",
        ),
        (  # the same in a semi join
            "SELECT e.id, e.q FROM (SELECT id, ki, 100 DIV amt AS q FROM {ev} "
            "WHERE id <> 4) e LEFT SEMI JOIN {dim} d ON e.ki = d.k",
            True,
            "",
        ),
        (  # a LEFT JOIN keeps the row, so computes it: raises both ways
            "SELECT e.id, e.q, d.v FROM (SELECT id, ki, 100 DIV amt AS q FROM {ev} "
            "WHERE id <> 4) e LEFT JOIN {dim} d ON e.ki = d.k",
            True,
            "",
        ),
        (  # another join's condition: Spark pushes its one-side part into the table's scan
            "SELECT e.id, d.v FROM {ev} e JOIN {dim} d ON e.ki = d.k "
            "JOIN {ev} o ON e.id = o.id AND 100 DIV d.n > 1",
            False,
            "a condition above the join may raise",
        ),
        (  # Spark turns INTERSECT into an aggregate over a semi join, then drops the LEFT JOIN
            "SELECT e.id FROM {ev} e LEFT JOIN {dim} d ON 100 DIV e.amt = d.k "
            "INTERSECT SELECT id FROM {ev}",
            False,
            "INTERSECT",
        ),
        (  # Spark pushes the LIMIT into the LEFT JOIN's input: the key never sees amt = 0
            "SELECT e.id, d.v FROM (SELECT * FROM VALUES (1, 1), (2, 0) AS i(id, amt)) e "
            "LEFT JOIN {dim} d ON 100 DIV e.amt = d.k LIMIT 1",
            False,
            "a LIMIT above the join",
        ),
        (  # Spark removes the outer join under the DISTINCT: the key is never computed
            "SELECT DISTINCT e.id FROM {ev} e LEFT JOIN {dim} d ON 100 DIV e.amt = d.k",
            False,
            "a DISTINCT, an aggregate, INTERSECT or EXCEPT above the join",
        ),
        (  # Spark pushes the disjunction's input part below the join
            "SELECT e.id, d.v FROM {ev} e JOIN {dim} d ON 100 DIV e.amt = d.k "
            "AND ((e.amt <> 0 AND d.n > 0) OR (e.amt > 1 AND d.n = 0))",
            False,
            "a disjunction in the join's condition",
        ),
        (  # raises both ways: the key on every input row
            "SELECT e.id, d.v FROM {ev} e LEFT JOIN {dim} d ON 100 DIV e.amt = d.k",
            True,
            "",
        ),
    ],
)
def test_what_may_raise_where_spark_decides_which_rows(
    spark: Any, t: dict[str, str], sql: str, rewritten: bool, why: str
) -> None:
    query = sql.format(**t)
    ansi = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", "true")
    try:
        same_outcome_both_ways(spark, query, rewritten=rewritten)
        if why:
            assert why in reason(spark, query)
    finally:
        spark.conf.set("spark.sql.ansi.enabled", ansi)


def test_columns_read_by_place_or_by_a_distinct_are_handed_over(
    spark: Any, t: dict[str, str]
) -> None:
    # a UNION reads its second input's columns by place, a DISTINCT every column: no column
    # of a join below them is one no one reads
    def frames() -> tuple[Any, Any]:
        events, dim = spark.table(t["ev"]), spark.table(t["dim"])
        joined = events.join(dim, events.ki == dim.k)
        return joined.union(joined).select("id", "v"), joined.distinct().select("v")

    with rewrite(spark, True):
        union, distinct = frames()
        on = [Counter(tuple(r) for r in f.collect()) for f in (union, distinct)]
        assert all("ArrowEvalPythonUDTF" in plan_text(f, "simple") for f in (union, distinct))
    with rewrite(spark, False):
        off = [Counter(tuple(r) for r in f.collect()) for f in frames()]
    assert on == off
    assert (
        on[0][(1, "i1")] == 2
        and on[0][(3, "i3")] == 2
        and on[1] == Counter({("i1",): 2, ("i2",): 2, ("i3",): 1})
    )


def test_a_dataframe_built_on_a_rewritten_query_reads_every_column(
    spark: Any, t: dict[str, str]
) -> None:
    # Spark resolves a column the query did not select through the join below it
    sql = f"SELECT e.id, d.v FROM {t['ev']} e JOIN {t['dim']} d ON e.ki = d.k"
    got = []
    for on in (True, False):
        with rewrite(spark, on):
            frame = spark.sql(sql)
            got.append(Counter(tuple(r) for r in frame.where("amt > 1").collect()))
            if on:
                assert "ArrowEvalPythonUDTF" in plan_text(frame, "simple")
    assert got[0] == got[1] == Counter({(2, "i2"): 1, (3, "i3"): 1, (7, "i2"): 1})


@pytest.mark.parametrize("statement", ["INSERT INTO", "CREATE TABLE AS"])
def test_a_write_of_a_join_is_the_lookup(spark: Any, t: dict[str, str], statement: str) -> None:
    target = f"{t['ev']}_out"
    query = f"SELECT e.id, d.v FROM {t['ev']} e JOIN {t['dim']} d ON e.ki = d.k"
    if statement == "INSERT INTO":
        spark.sql(f"CREATE TABLE {target} (id BIGINT, v STRING) USING parquet")
        sql = f"INSERT INTO {target} {query}"
    else:
        sql = f"CREATE TABLE {target} USING parquet AS {query}"
    try:
        with rewrite(spark, True):
            clear_decisions(spark)
            spark.sql(sql)
            assert [d[0] for d in jvm_decisions(spark)] == ["lookup"]
        got = Counter(tuple(r) for r in spark.table(target).collect())
        assert got == Counter(
            {(1, "i1"): 1, (6, "i1"): 1, (2, "i2"): 1, (7, "i2"): 1, (3, "i3"): 1}
        )
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {target}")
