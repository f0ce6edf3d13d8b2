"""lookup_join on local[2] against a real Redis, checked value by value."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pyspark.sql import functions as F

from lookup_source import lookup_join
from lookup_source.errors import OptionError, SchemaError
from lookup_source.spark.versions import BROADCAST
from tests.helpers import needs
from tests.servers import RedisServer

SCHEMA = "user_id long, name string, tier int"


@pytest.fixture
def users(redis_db: Any, prefix: str) -> dict[int, dict[str, Any]]:
    data = {i: {"name": f"user {i}", "tier": i % 4} for i in range(0, 5000)}
    pipe = redis_db.pipeline(transaction=False)
    for i, record in data.items():
        pipe.set(f"{prefix}user:{i}", json.dumps(record))
    pipe.execute()
    return data


@pytest.fixture
def options(redis_srv: RedisServer, prefix: str) -> dict[str, str]:
    return {
        "connector": "redis",
        "url": redis_srv.url,
        "redis.key.pattern": f"{prefix}user:{{key}}",
    }


def events(spark: Any, rows: int, modulo: int) -> Any:
    """Events with user_id = id % modulo (keys >= 5000 are missing) and every 97th key null."""
    return spark.range(rows, numPartitions=4).select(
        F.col("id").alias("event_id"),
        F.when(F.col("id") % 97 == 0, F.lit(None)).otherwise(F.col("id") % modulo).alias("user_id"),
    )


@pytest.mark.parametrize("mode", ["ordered", "unordered"])
def test_left_join_attaches_every_value_to_its_key(
    spark: Any, users: dict, options: dict, mode: str
) -> None:
    df = events(spark, 200_000, 6000)
    out = lookup_join(df, "user_id", schema=SCHEMA, options={**options, "output.mode": mode})
    assert out.columns == ["event_id", "user_id", "name", "tier"]
    rows = out.collect()
    assert len(rows) == 200_000
    assert sorted(r.event_id for r in rows) == list(range(200_000))
    for row in rows:
        record = users.get(row.user_id) if row.user_id is not None else None
        assert row.name == (record["name"] if record else None)
        assert row.tier == (record["tier"] if record else None)


def test_inner_join_drops_missing_and_null_keys(spark: Any, users: dict, options: dict) -> None:
    df = events(spark, 20_000, 6000)
    out = lookup_join(df, "user_id", schema=SCHEMA, options=options, how="inner")
    expected = df.where("user_id IS NOT NULL AND user_id < 5000").count()
    rows = out.collect()
    assert len(rows) == expected
    assert all(r.name == f"user {r.user_id}" for r in rows)


def test_matches_a_plain_spark_join(spark: Any, users: dict, options: dict) -> None:
    dim = spark.createDataFrame([(k, v["name"], v["tier"]) for k, v in users.items()], SCHEMA)
    df = events(spark, 30_000, 6000)
    expected = df.join(dim, "user_id", "left").select("event_id", "user_id", "name", "tier")
    got = lookup_join(df, "user_id", schema=SCHEMA, options=options)
    assert got.exceptAll(expected).count() == 0 and expected.exceptAll(got).count() == 0


@pytest.mark.parametrize(
    "strategy",
    [
        "lookup",
        pytest.param("scan", marks=needs(BROADCAST)),
        pytest.param("broadcast", marks=needs(BROADCAST)),
    ],
)
def test_semi_and_anti_joins_match_spark_joins(
    spark: Any, users: dict, options: dict, strategy: str
) -> None:
    """``how="semi"`` keeps each row whose key exists, once; ``how="anti"`` each whose key does
    not, a null key included; neither adds the value columns — as Spark's left semi and left
    anti joins against the table, whatever the strategy."""
    dim = spark.createDataFrame([(k, v["name"], v["tier"]) for k, v in users.items()], SCHEMA)
    df = events(spark, 20_000, 6000)
    for how, spark_how in (("semi", "left_semi"), ("left_anti", "left_anti")):
        got = lookup_join(
            df, "user_id", schema=SCHEMA, options={**options, "strategy": strategy}, how=how
        )
        expected = df.join(dim, "user_id", spark_how)
        assert got.columns == ["event_id", "user_id"], how
        rows = sorted(tuple(r) for r in got.collect())
        assert rows == sorted(tuple(r) for r in expected.select("event_id", "user_id").collect())
        if how == "semi":
            assert len(rows) == df.where("user_id < 5000").count()
        else:
            assert any(r[1] is None for r in rows) and all(
                r[1] is None or r[1] >= 5000 for r in rows
            )
    with pytest.raises(SchemaError, match="how must be 'left', 'inner', 'semi' or 'anti'"):
        lookup_join(df, "user_id", schema=SCHEMA, options=options, how="full")


def test_key_column_with_another_name_and_type(spark: Any, users: dict, options: dict) -> None:
    df = spark.createDataFrame([(1, "a"), (2, "b"), (None, "c")], "uid int, label string")
    out = lookup_join(df, "uid", schema=SCHEMA, options=options).orderBy("label")
    assert [tuple(r) for r in out.collect()] == [
        (1, "a", "user 1", 1),
        (2, "b", "user 2", 2),
        (None, "c", None, None),
    ]


def test_composite_keys(spark: Any, redis_db: Any, redis_srv: RedisServer, prefix: str) -> None:
    redis_db.set(f"{prefix}acme:1", json.dumps({"plan": "gold"}))
    df = spark.createDataFrame([("acme", 1), ("acme", 2), (None, 1)], "t string, u long")
    out = lookup_join(
        df,
        ["t", "u"],
        schema="tenant string, user_id long, plan string",
        options={
            "connector": "redis",
            "url": redis_srv.url,
            "key.column": "tenant,user_id",
            "redis.key.pattern": f"{prefix}{{tenant}}:{{user_id}}",
        },
    )
    assert sorted((r.u, r.plan) for r in out.where("t = 'acme'").collect()) == [
        (1, "gold"),
        (2, None),
    ]
    assert out.count() == 3


def test_a_composite_key_named_once_in_on(
    spark: Any, redis_db: Any, redis_srv: RedisServer, prefix: str
) -> None:
    """``on`` names the key's columns, the schema has them: they are the key, without
    key.column repeating them; otherwise the message says to set key.column."""
    redis_db.set(f"{prefix}JFK:2013:1", json.dumps({"temp": 39.0}))
    flights = spark.createDataFrame(
        [("JFK", 2013, 1), ("JFK", 2013, 2), ("EWR", None, 1)], "origin string, year long, day long"
    )
    options = {
        "connector": "redis",
        "url": redis_srv.url,
        "redis.key.pattern": f"{prefix}{{origin}}:{{year}}:{{day}}",
    }
    out = lookup_join(
        flights,
        ["origin", "year", "day"],
        schema="origin string, year long, day long, temp double",
        options=options,
    )
    rows = sorted((r.origin, r.year, r.day, r.temp) for r in out.collect())
    assert rows == [("EWR", None, 1, None), ("JFK", 2013, 1, 39.0), ("JFK", 2013, 2, None)]
    with pytest.raises(SchemaError) as info:  # the schema names them otherwise
        lookup_join(
            flights,
            ["origin", "year", "day"],
            schema="airport string, yr long, d long, temp double",
            options={**options, "redis.key.pattern": f"{prefix}{{key}}"},
        )
    message = str(info.value)
    assert "on names 3 column(s) (origin, year, day) but the lookup key has 1 (airport)" in message
    assert "set key.column to the lookup schema's 3 key columns" in message


def test_error_column_keeps_every_row(
    spark: Any, redis_db: Any, options: dict, prefix: str
) -> None:
    redis_db.set(f"{prefix}user:1", json.dumps({"name": "fine", "tier": 1}))
    redis_db.set(f"{prefix}user:2", json.dumps({"name": "bad", "tier": "x"}))
    df = spark.createDataFrame([(1,), (2,), (3,)], "user_id long")
    out = lookup_join(
        df, "user_id", schema=SCHEMA, options={**options, "on.error": "column"}, how="inner"
    )
    rows = {r.user_id: r for r in out.collect()}
    assert set(rows) == {1, 2}  # 3 is missing (inner drops it); 2 failed and is kept
    assert rows[1]._lookup_error is None
    assert "key 2: column 'tier' expects int, got str 'x'" in rows[2]._lookup_error


def test_failure_fails_the_job(spark: Any, options: dict) -> None:
    df = spark.createDataFrame([(1,)], "user_id long")
    bad = {**options, "url": "redis://127.0.0.1:1/0", "retry.initial-delay.ms": "5"}
    with pytest.raises(Exception, match=r"redis lookup at redis://127.0.0.1:1/0 failed for 1 key"):
        lookup_join(df, "user_id", schema=SCHEMA, options=bad).collect()


def test_plan_time_errors_name_the_column_or_option(spark: Any, options: dict) -> None:
    df = spark.createDataFrame([(1, "x", [1])], "user_id long, name string, arr array<int>")
    with pytest.raises(SchemaError, match="does not have"):
        lookup_join(df, "nope", schema=SCHEMA, options=options)
    with pytest.raises(SchemaError, match="already has a column 'name'"):
        lookup_join(df, "user_id", schema=SCHEMA, options=options)
    with pytest.raises(SchemaError, match="key column 'arr' is array<int>"):
        lookup_join(df.drop("name"), "arr", schema=SCHEMA, options=options)
    with pytest.raises(OptionError, match=r"option 'on.eror'.*did you mean 'on.error'"):
        lookup_join(df.drop("name"), "user_id", schema=SCHEMA, options={**options, "on.eror": "x"})
    with pytest.raises(SchemaError, match="how must be"):
        lookup_join(df.drop("name"), "user_id", schema=SCHEMA, options=options, how="outer")
    # the key is the schema's first column unless key.column says otherwise
    events = df.drop("name", "arr")
    with pytest.raises(SchemaError, match=r"no value columns: its key is its first column, 'name'"):
        lookup_join(events, "user_id", schema="name string", options=options)
    with pytest.raises(
        SchemaError,
        match=r"on names column 'user_id', which the lookup schema has as a value column: the "
        r"lookup key is 'name' \(the schema's first column; put the key first or set key.column\)",
    ):
        lookup_join(events, "user_id", schema="name string, user_id long", options=options)
    keyed = {**options, "key.column": "user_id"}
    with pytest.raises(SchemaError, match=r"no value columns: key.column takes user_id"):
        lookup_join(events, "user_id", schema="user_id long", options=keyed)


@pytest.mark.parametrize("style", ["per-key", "batch"])
def test_http_lookup_join_through_the_user_service(spark: Any, style: str) -> None:
    from lookup_source.service import UserService, user_record

    with UserService(users=3000, latency_ms=1) as service:
        options = (
            {"connector": "http", "url": service.url}
            if style == "per-key"
            else {"connector": "http", "http.batch.url": service.batch_url}
        )
        df = events(spark, 20_000, 3100)
        out = lookup_join(
            df, "user_id", schema="user_id long, name string, tier string", options=options
        )
        rows = out.collect()
    assert len(rows) == 20_000
    for row in rows:
        known = row.user_id is not None and row.user_id < 3000
        assert row.name == (user_record(row.user_id)["name"] if known else None)
        assert row.tier == (user_record(row.user_id)["tier"] if known else None)


def test_metrics_of_the_result_and_of_what_is_derived_from_it(
    spark: Any, users: dict, options: dict
) -> None:
    from lookup_source import lookup_metrics

    df = spark.range(3000, numPartitions=2).select((F.col("id") % 1000).alias("user_id"))
    out = lookup_join(df, "user_id", schema=SCHEMA, options=options)
    derived = out.filter(F.col("tier") == 1).select("name")
    assert derived.count() == 750
    # one action ran: counted once, whichever DataFrame of the lineage is asked
    for frame in (out, derived):
        metrics = lookup_metrics(frame)
        assert metrics.rows == 3000
        assert metrics.keys == 2000  # 1000 distinct keys in each of the two tasks
    second = lookup_join(
        derived.withColumn("user_id", F.lit(7).cast("long")),
        "user_id",
        schema="user_id long, tier int",
        options=options,
    ).select("name", F.col("tier").alias("tier_of_7"))
    assert {r.tier_of_7 for r in second.collect()} == {3}
    both = lookup_metrics(second)  # both lookup_joins in its plan, merged
    assert both.rows == 3000 * 2 + 750
    with pytest.raises(ValueError, match="no lookup_join in its plan"):
        lookup_metrics(df)
    with pytest.raises(ValueError, match="takes a DataFrame or a lookup table's name"):
        lookup_metrics(42)
