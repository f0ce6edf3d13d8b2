"""The asynclookup data source on local[2] against a real Redis."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from lookup_source.spark.versions import DATA_SOURCE, FILTER_PUSHDOWN
from tests.helpers import needs
from tests.servers import RedisServer

pytestmark = needs(DATA_SOURCE)

SCHEMA = "user_id long, name string, tier int"


@pytest.fixture
def users(redis_db: Any, prefix: str) -> dict[int, dict[str, Any]]:
    data = {i: {"name": f"user {i}", "tier": i % 4} for i in range(1, 501)}
    redis_db.mset({f"{prefix}user:{i}": json.dumps(r) for i, r in data.items()})
    return data


@pytest.fixture
def options(redis_srv: RedisServer, prefix: str) -> dict[str, str]:
    return {
        "connector": "redis",
        "url": redis_srv.url,
        "redis.key.pattern": f"{prefix}user:{{key}}",
    }


@pytest.fixture
def pushdown(spark: Any) -> Iterator[None]:
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    yield
    spark.conf.unset("spark.sql.python.filterPushdown.enabled")


def read(spark: Any, options: dict[str, str], schema: str = SCHEMA, **extra: Any) -> Any:
    return spark.read.format("asynclookup").schema(schema).options(**options, **extra).load()


def test_reads_exactly_the_given_keys(spark: Any, users: dict, options: dict) -> None:
    keys = [*range(1, 301), 9999, 7, 7]
    df = read(spark, options, keys=json.dumps(keys), partitions="3")
    assert df.rdd.getNumPartitions() == 3
    rows = sorted(df.collect())
    assert [r.user_id for r in rows] == list(range(1, 301))  # missing key absent, dups once
    for row in rows:
        assert row.name == users[row.user_id]["name"]
        assert row.tier == users[row.user_id]["tier"]


def test_schema_order_need_not_start_with_the_key(spark: Any, users: dict, options: dict) -> None:
    df = read(
        spark,
        options,
        schema="name string, tier int, user_id long",
        **{"key.column": "user_id", "keys": "[3, 4]"},
    )
    assert df.columns == ["name", "tier", "user_id"]
    assert sorted(tuple(r) for r in df.collect()) == [("user 3", 3, 3), ("user 4", 0, 4)]


def test_composite_keys(spark: Any, redis_db: Any, redis_srv: RedisServer, prefix: str) -> None:
    redis_db.set(f"{prefix}acme:1", json.dumps({"plan": "gold"}))
    redis_db.set(f"{prefix}beta:1", json.dumps({"plan": "free"}))
    df = read(
        spark,
        {
            "connector": "redis",
            "url": redis_srv.url,
            "redis.key.pattern": f"{prefix}{{tenant}}:{{id}}",
        },
        schema="tenant string, id int, plan string",
        **{"key.column": "tenant,id", "keys": '[["acme", 1], ["beta", 1], ["acme", 2]]'},
    )
    assert sorted(tuple(r) for r in df.collect()) == [("acme", 1, "gold"), ("beta", 1, "free")]


@needs(FILTER_PUSHDOWN)
def test_filter_pushdown_fetches_the_filtered_keys(
    spark: Any, users: dict, options: dict, pushdown: None
) -> None:
    df = read(spark, options)
    rows = df.where("user_id IN (5, 6, 7000)").collect()
    assert sorted((r.user_id, r.name) for r in rows) == [(5, "user 5"), (6, "user 6")]
    assert [tuple(r) for r in df.where("user_id = 12").collect()] == [(12, "user 12", 0)]
    both = df.where("user_id IN (1, 2, 3) AND tier = 2").collect()
    assert [r.user_id for r in both] == [2]  # the non-key filter is applied by Spark


@needs(FILTER_PUSHDOWN)
def test_without_pushdown_the_source_still_reads_keys(
    spark: Any, users: dict, options: dict
) -> None:
    assert spark.conf.get("spark.sql.python.filterPushdown.enabled") == "false"
    df = read(spark, options, keys="[10, 11]")
    assert sorted(r.name for r in df.where("user_id IN (10, 11, 12)").collect()) == [
        "user 10",
        "user 11",
    ]


def test_without_keys_redis_is_scanned(spark: Any, users: dict, options: dict) -> None:
    rows = read(spark, options, partitions="3").collect()
    assert sorted((r.user_id, r.name, r.tier) for r in rows) == [
        (k, v["name"], v["tier"]) for k, v in sorted(users.items())
    ]


@needs(FILTER_PUSHDOWN)
def test_without_keys_http_says_what_to_do(spark: Any) -> None:
    http = {"connector": "http", "url": "http://127.0.0.1:9/users/{key}"}
    with pytest.raises(Exception, match="cannot scan a whole table") as info:
        read(spark, http).collect()
    assert "filterPushdown.enabled" in str(info.value) and "lookup_join" in str(info.value)


def test_bad_options_fail_at_load_naming_the_option(spark: Any, options: dict) -> None:
    with pytest.raises(Exception, match=r"option 'capacty'.*did you mean 'capacity'"):
        read(spark, options, capacty="5", keys="[1]").collect()
    with pytest.raises(Exception, match="option 'keys': key 'x'"):
        read(spark, options, keys='["x"]').collect()


def test_a_schema_is_required(spark: Any, options: dict) -> None:
    with pytest.raises(Exception, match="the redis connector cannot infer a schema: give"):
        spark.read.format("asynclookup").options(**options, keys="[1]").load()


def test_error_column_in_the_reader(spark: Any, redis_db: Any, options: dict, prefix: str) -> None:
    redis_db.set(f"{prefix}user:1", json.dumps({"name": "ok", "tier": 1}))
    redis_db.set(f"{prefix}user:2", "garbage")
    df = read(
        spark,
        options,
        schema=SCHEMA + ", _lookup_error string",
        **{"keys": "[1, 2]", "on.error": "column"},
    )
    rows = {r.user_id: r for r in df.collect()}
    assert rows[1].name == "ok" and rows[1]._lookup_error is None
    assert rows[2].name is None and "does not hold valid JSON" in rows[2]._lookup_error
    with pytest.raises(Exception, match=r"on.error=column needs a '_lookup_error string' column"):
        read(spark, options, **{"keys": "[1]", "on.error": "column"}).collect()


def test_failures_fail_the_job_with_a_clear_error(spark: Any, options: dict) -> None:
    bad = {
        **options,
        "url": "redis://127.0.0.1:1/0",
        "retry.max-attempts": "2",
        "retry.initial-delay.ms": "10",
    }
    with pytest.raises(Exception, match=r"redis lookup at redis://127.0.0.1:1/0 failed for 2 keys"):
        read(spark, bad, keys="[1, 2]").collect()
