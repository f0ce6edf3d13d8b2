"""Secrets given inline never appear in a Spark plan, on every surface: the plan text of
``lookup_join``, of ``strategy=broadcast`` (which reads the table through the data source), of
the data source read directly, of a view made by ``register_lookup_table`` and of its table
function — in every ``explain`` mode, after the job ran."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lookup_source import lookup_join, register_lookup_table
from lookup_source.spark.internals import plan_text
from lookup_source.spark.versions import BROADCAST, DATA_SOURCE, SQL_JOINS, TABLE_FUNCTION
from tests.helpers import needs

SECRET = "S3CRETV4LUE"
SCHEMA = "user_id long, name string"
MODES = ("simple", "extended", "formatted", "cost")


@pytest.fixture
def inline(redis_srv: Any, redis_db: Any, prefix: str) -> dict[str, str]:
    """A Redis lookup whose options hold the secret inline: in the URL's query and in an
    option of the connector (the Redis server does not read either)."""
    redis_db.mset({f"{prefix}{i}": json.dumps({"name": f"user {i}"}) for i in range(5)})
    separator = "&" if "?" in redis_srv.url else "?"
    return {
        "connector": "redis",
        "url": f"{redis_srv.url}{separator}client_name=tok{SECRET}",
        "redis.key.pattern": f"{prefix}{{key}}",
        "cache.shared.namespace": f"x-token-{SECRET}",  # an inline text, like a secret
    }


def _shows_no_secret(frame: Any) -> None:
    rows = frame.collect()  # the plan after the job ran, as the UI shows it
    assert rows
    for mode in MODES:
        text = plan_text(frame, mode)
        assert SECRET not in text, (mode, [line for line in text.splitlines() if SECRET in line])


def test_lookup_join(spark: Any, inline: dict[str, str]) -> None:
    events = spark.range(5).withColumnRenamed("id", "user_id")
    _shows_no_secret(lookup_join(events, "user_id", schema=SCHEMA, options=inline))


@needs(BROADCAST)
def test_a_broadcast_through_the_data_source(spark: Any, inline: dict[str, str]) -> None:
    events = spark.range(5).withColumnRenamed("id", "user_id")
    options = {**inline, "strategy": "broadcast"}
    _shows_no_secret(lookup_join(events, "user_id", schema=SCHEMA, options=options))


@needs(DATA_SOURCE)
def test_the_data_source(spark: Any, inline: dict[str, str]) -> None:
    reader = spark.read.format("asynclookup").options(**inline, keys="[1, 2]").schema(SCHEMA)
    _shows_no_secret(reader.load())


@needs(TABLE_FUNCTION)
def test_a_registered_table_and_its_table_function(spark: Any, inline: dict[str, str]) -> None:
    register_lookup_table(spark, "secret_users", schema=SCHEMA, options=inline)
    _shows_no_secret(spark.table("secret_users").where("user_id IN (1, 2)"))
    spark.range(5).withColumnRenamed("id", "user_id").createOrReplaceTempView("secret_events")
    _shows_no_secret(
        spark.sql("SELECT * FROM secret_users_lookup(TABLE(secret_events), 'user_id')")
    )


@needs(SQL_JOINS)
def test_a_sql_join_rewritten_into_lookups(spark: Any, inline: dict[str, str]) -> None:
    """A JOIN against a registered table, and against a data source DataFrame whose table
    function the SQL extension makes from its options (which travel pickled, never in text)."""
    register_lookup_table(spark, "secret_join_users", schema=SCHEMA, options=inline)
    events = spark.range(5).withColumnRenamed("id", "user_id")
    events.createOrReplaceTempView("secret_join_events")
    joined = spark.sql(
        "SELECT e.user_id, u.name FROM secret_join_events e "
        "JOIN secret_join_users u ON e.user_id = u.user_id"
    )
    assert "ArrowEvalPythonUDTF" in plan_text(joined, "simple")
    _shows_no_secret(joined)
    users = spark.read.format("asynclookup").options(**inline).schema(SCHEMA).load()
    made = events.join(users, "user_id", "left")
    assert "asynclookup_join_" in plan_text(made, "simple")
    _shows_no_secret(made)
    assert sorted(made.collect()) == [(i, f"user {i}") for i in range(5)]
