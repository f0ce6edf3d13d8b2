"""SQL: registered lookup tables, pushdown and scans, JOINs and the lookup table function.

Results are compared with the same join computed inside Postgres on the same data.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest

from lookup_source import register_lookup_table
from lookup_source.settings import parse_options
from lookup_source.spark.versions import DATA_SOURCE, TABLE_FUNCTION
from tests.helpers import needs
from tests.servers import RedisServer

pytestmark = needs(DATA_SOURCE)


@pytest.fixture
def dim(pg: Any, table_name: str) -> Iterator[str]:
    """A Postgres dimension table and an events table, in Postgres, on the same data."""
    pg(
        f"CREATE TABLE {table_name} (id bigint PRIMARY KEY, name text, tier int, "
        "balance numeric(10,2), vip boolean)"
    )
    pg.many(
        f"INSERT INTO {table_name} VALUES ($1, $2, $3, $4, $5)",
        [(i, f"user '{i}'", i % 4, Decimal(i) / 4, i % 3 == 0) for i in range(1, 301)],
    )
    pg(f"CREATE TABLE {table_name}_events (event_id bigint, user_id bigint)")
    pg.many(
        f"INSERT INTO {table_name}_events VALUES ($1, $2)",
        [(e, None if e % 50 == 0 else (e * 37) % 340) for e in range(2000)],
    )
    yield table_name
    pg(f"DROP TABLE {table_name}")
    pg(f"DROP TABLE {table_name}_events")


@pytest.fixture
def events(spark: Any, pg: Any, dim: str) -> Any:
    rows = [(r["event_id"], r["user_id"]) for r in pg.fetch(f"SELECT * FROM {dim}_events")]
    df = spark.createDataFrame(rows, "event_id long, user_id long")
    df.createOrReplaceTempView("events")
    return df


def pg_options(postgres_srv: Any, table: str) -> dict[str, str]:
    return {"connector": "postgres", "url": postgres_srv.url, "postgres.table": table}


def as_set(rows: list[Any]) -> set[tuple[Any, ...]]:
    return {tuple(row) for row in rows}


@needs(TABLE_FUNCTION)
def test_registered_table_pushdown_and_scan_agree(
    spark: Any, postgres_srv: Any, pg: Any, dim: str
) -> None:
    register_lookup_table(spark, "users", options=pg_options(postgres_srv, dim))  # inferred
    assert spark.table("users").columns == ["id", "name", "tier", "balance", "vip"]
    everything = spark.sql("SELECT * FROM users").collect()
    in_pg = pg.fetch(f"SELECT id, name, tier, balance, vip FROM {dim}")
    assert as_set(everything) == as_set(in_pg) and len(everything) == 300
    query = "SELECT id, name, tier FROM users WHERE id IN (3, 4, 999) ORDER BY id"
    expected = [(3, "user '3'", 3), (4, "user '4'", 0)]
    assert [tuple(r) for r in spark.sql(query).collect()] == expected  # scan + Spark filter
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:  # a registered view does not push filters by default: every query stays right
        assert [tuple(r) for r in spark.sql(query).collect()] == expected
        other = spark.sql("SELECT id FROM users WHERE id = 17 OR id = 18 ORDER BY id")
        assert [r.id for r in other.collect()] == [17, 18]
        assert spark.sql("SELECT count(*) FROM users").collect()[0][0] == 300
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")


@needs(TABLE_FUNCTION)
def test_pushdown_fetches_just_the_filtered_keys(spark: Any) -> None:
    from lookup_source.service import UserService

    with UserService(users=100, latency_ms=0) as service:
        options = {"connector": "http", "url": service.url}
        register_lookup_table(
            spark, "api_users", schema="user_id long, name string", options=options, pushdown=True
        )
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
        try:
            rows = spark.sql("SELECT * FROM api_users WHERE user_id IN (1, 2, 300)").collect()
            assert sorted((r.user_id, r.name) for r in rows) == [(1, "user-1"), (2, "user-2")]
            assert service.requests == 3  # exactly the filtered keys were fetched
            reader = spark.read.format("asynclookup").schema("user_id long, name string")
            fresh = reader.options(**options).load().where("user_id = 5").collect()
            assert [r.name for r in fresh] == ["user-5"] and service.requests == 4
        finally:
            spark.conf.unset("spark.sql.python.filterPushdown.enabled")


def test_catalog_tables_fail_with_a_clear_error(spark: Any, postgres_srv: Any, dim: str) -> None:
    spark.sql("DROP TABLE IF EXISTS pg_users_catalog")
    spark.sql(f"""
        CREATE TABLE pg_users_catalog (id BIGINT, name STRING) USING asynclookup
        OPTIONS (connector 'postgres', url '{postgres_srv.url}', `postgres.table` '{dim}')
    """)
    try:
        with pytest.raises(Exception, match="use CREATE TEMPORARY VIEW <name> USING asynclookup"):
            spark.table("pg_users_catalog").collect()
    finally:
        spark.sql("DROP TABLE pg_users_catalog")


@needs(TABLE_FUNCTION)
def test_sql_join_matches_postgres(
    spark: Any, postgres_srv: Any, pg: Any, dim: str, events: Any
) -> None:
    register_lookup_table(spark, "users", options=pg_options(postgres_srv, dim))
    got = spark.sql("SELECT e.event_id, u.name FROM events e JOIN users u ON e.user_id = u.id")
    expected = pg.fetch(
        f"SELECT e.event_id, u.name FROM {dim}_events e JOIN {dim} u ON e.user_id = u.id"
    )
    assert as_set(got.collect()) == as_set(expected) and got.count() == len(expected)


@needs(TABLE_FUNCTION)
@pytest.mark.parametrize("how", ["left", "inner"])
def test_table_function_matches_postgres(
    spark: Any, postgres_srv: Any, pg: Any, dim: str, events: Any, how: str
) -> None:
    register_lookup_table(
        spark,
        "users",
        options=pg_options(postgres_srv, dim),
        schema="id long, name string, tier int",
    )
    sql = (
        "SELECT * FROM users_lookup(TABLE(events), 'user_id')"
        if how == "left"
        else "SELECT * FROM users_lookup(TABLE(events), 'user_id', 'inner')"
    )
    got = spark.sql(sql)
    assert got.columns == ["event_id", "user_id", "name", "tier"]
    join = "LEFT JOIN" if how == "left" else "JOIN"
    expected = pg.fetch(
        f"SELECT e.event_id, e.user_id, u.name, u.tier FROM {dim}_events e "
        f"{join} {dim} u ON e.user_id = u.id"
    )
    rows = got.collect()
    assert len(rows) == len(expected) and as_set(rows) == as_set(expected)


def test_create_temporary_view_using_asynclookup(spark: Any, postgres_srv: Any, dim: str) -> None:
    spark.sql(f"""
        CREATE OR REPLACE TEMPORARY VIEW pg_users_ddl (id BIGINT, name STRING)
        USING asynclookup
        OPTIONS (connector 'postgres', url '{postgres_srv.url}', `postgres.table` '{dim}')
    """)
    rows = spark.sql("SELECT * FROM pg_users_ddl WHERE id = 7").collect()
    assert [tuple(r) for r in rows] == [(7, "user '7'")]
    spark.sql(f"""
        CREATE OR REPLACE TEMPORARY VIEW pg_users_inferred USING asynclookup
        OPTIONS (connector 'postgres', url '{postgres_srv.url}', `postgres.table` '{dim}')
    """)
    table = spark.table("pg_users_inferred")
    assert table.columns == ["id", "name", "tier", "balance", "vip"]
    assert table.count() == 300


def test_scan_in_partitions_reads_every_row_once(spark: Any, postgres_srv: Any, dim: str) -> None:
    df = (
        spark.read.format("asynclookup")
        .schema("id long, name string")
        .options(**pg_options(postgres_srv, dim), partitions="5")
        .load()
    )
    assert df.rdd.getNumPartitions() == 5
    ids = [r.id for r in df.collect()]
    assert sorted(ids) == list(range(1, 301))
    # an integer key is cut into ranges (one read of the table), not hashed
    parts = df.rdd.glom().map(lambda rows: sorted(r.id for r in rows)).collect()
    assert [(part[0], part[-1]) for part in parts] == [
        (1, 60),
        (61, 120),
        (121, 180),
        (181, 240),
        (241, 300),
    ]


@needs(TABLE_FUNCTION)
def test_composite_keys_in_the_table_function(
    spark: Any, pg: Any, postgres_srv: Any, table_name: str
) -> None:
    pg(f"CREATE TABLE {table_name} (tenant text, uid int, plan text, PRIMARY KEY (tenant, uid))")
    pg.many(f"INSERT INTO {table_name} VALUES ($1, $2, $3)", [("a", 1, "gold"), ("b", 1, "free")])
    try:
        register_lookup_table(spark, "plans", options=pg_options(postgres_srv, table_name))
        spark.createDataFrame(
            [("a", 1), ("b", 1), ("a", 2)], "t string, u int"
        ).createOrReplaceTempView("accounts")
        rows = spark.sql("SELECT * FROM plans_lookup(TABLE(accounts), 't,u')").collect()
        assert as_set(rows) == {("a", 1, "gold"), ("b", 1, "free"), ("a", 2, None)}
    finally:
        pg(f"DROP TABLE {table_name}")


@needs(TABLE_FUNCTION)
def test_redis_key_space_as_a_table(
    spark: Any, redis_srv: RedisServer, redis_db: Any, prefix: str
) -> None:
    redis_db.mset({f"{prefix}u:{i}": json.dumps({"name": f"n{i}"}) for i in range(250)})
    redis_db.set(f"{prefix}other", "not a user")
    options = {
        "connector": "redis",
        "url": redis_srv.url,
        "redis.key.pattern": f"{prefix}u:{{key}}",
        "partitions": "3",
    }
    spark.createDataFrame([(1,), (600,)], "user_id long").createOrReplaceTempView("clicks")
    # the options as a mapping, or parsed once (LookupOptions): the same table
    for given in (options, parse_options(options)):
        register_lookup_table(spark, "rusers", schema="id long, name string", options=given)
        rows = spark.sql("SELECT * FROM rusers").collect()
        assert sorted((r.id, r.name) for r in rows) == [(i, f"n{i}") for i in range(250)]
        rows = spark.sql("SELECT * FROM rusers_lookup(TABLE(clicks), 'user_id')").collect()
        assert as_set(rows) == {(1, "n1"), (600, None)}


@needs(TABLE_FUNCTION)
def test_sql_errors_are_clear(spark: Any, redis_srv: RedisServer) -> None:
    register_lookup_table(
        spark,
        "api_users",
        schema="id long, name string",
        options={"connector": "http", "url": "http://127.0.0.1:9/u/{key}"},
    )
    with pytest.raises(Exception, match=r"cannot scan a whole table.*lookup_join"):
        spark.sql("SELECT * FROM api_users").collect()
    spark.createDataFrame([(1,)], "uid long").createOrReplaceTempView("ids")
    with pytest.raises(
        Exception,
        match=r"the key argument names column 'nope', which the TABLE\(...\) argument does not "
        r"have \(uid\)",
    ):
        spark.sql("SELECT * FROM api_users_lookup(TABLE(ids), 'nope')").collect()
    spark.createDataFrame([(1, "x")], "uid long, name string").createOrReplaceTempView("named")
    with pytest.raises(Exception, match="the TABLE\\(...\\) argument already has a column 'name'"):
        spark.sql("SELECT * FROM api_users_lookup(TABLE(named), 'uid')").collect()
    with pytest.raises(Exception, match="the key argument names column 'name', which the lookup"):
        spark.sql("SELECT * FROM api_users_lookup(TABLE(named), 'name')").collect()
    spark.createDataFrame([("1",)], "code string").createOrReplaceTempView("codes")
    with pytest.raises(Exception, match=r"key column 'code' is string in the TABLE\(...\) arg"):
        spark.sql("SELECT * FROM api_users_lookup(TABLE(codes), 'code')").collect()
    with pytest.raises(Exception, match="how must be 'left', 'inner', 'semi' or 'anti'"):
        spark.sql("SELECT * FROM api_users_lookup(TABLE(ids), 'uid', 'outer')").collect()
    with pytest.raises(Exception, match="must be a plain SQL identifier"):
        register_lookup_table(
            spark,
            "bad name; drop",
            schema="id long, v string",
            options={"connector": "http", "url": "http://h/{key}"},
        )


@needs(TABLE_FUNCTION)
def test_table_function_moves_arrow_batches_and_keeps_every_input_type(
    spark: Any, redis_srv: RedisServer, redis_db: Any, prefix: str
) -> None:
    from pyspark.util import PythonEvalType

    from lookup_source.spark.plan import LookupPlan
    from lookup_source.spark.table_function import lookup_table_function

    options = {"connector": "redis", "url": redis_srv.url, "redis.key.pattern": f"{prefix}{{key}}"}
    plan = LookupPlan.build(options, "user_id long, name string")
    assert lookup_table_function(plan).evalType == PythonEvalType.SQL_ARROW_UDTF
    redis_db.mset({f"{prefix}{i}": json.dumps({"name": f"u{i}"}) for i in range(3)})
    register_lookup_table(spark, "typed_users", schema="user_id long, name string", options=options)
    spark.sql(
        """SELECT CAST(id AS int) AS user_id,
                  TIMESTAMP '2024-05-01 10:00:00' + make_interval(0, 0, 0, 0, id) AS at,
                  TIMESTAMP_NTZ '2024-05-01 10:00:00' AS local, DATE '2024-02-29' AS day,
                  CAST(id AS decimal(10, 2)) / 3 AS amount, array(id, NULL) AS arr,
                  named_struct('a', id, 'b', 'x') AS st, map('k', id) AS m,
                  CAST('raw' AS binary) AS bin, CAST(NULL AS string) AS nothing
           FROM range(5)"""
    ).createOrReplaceTempView("typed_events")
    want = spark.table("typed_events").orderBy("user_id").collect()
    got = spark.sql("SELECT * FROM typed_users_lookup(TABLE(typed_events), 'user_id')")
    assert got.columns == [*spark.table("typed_events").columns, "name"]
    rows = got.orderBy("user_id").collect()
    assert [tuple(r)[:-1] for r in rows] == [tuple(r) for r in want]
    assert [r["name"] for r in rows] == ["u0", "u1", "u2", None, None]
