"""One row per match, on every surface: a Postgres query that returns several rows for a key
(a user's orders) through lookup_join, the SQL table function and the data source, left and
inner, compared with the same join run inside Postgres."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql import functions as F

from lookup_source import lookup_join, register_lookup_table
from lookup_source.spark.versions import DATA_SOURCE, TABLE_FUNCTION
from tests.helpers import needs

SCHEMA = "uid long, item string, qty int"


@pytest.fixture
def orders(pg: Any, table_name: str) -> Iterator[str]:
    """Users 0..299: user u has u % 4 orders (none for u % 4 == 0); user 7 has 500."""
    table = f"{table_name}_orders"
    pg(f"CREATE TABLE {table} (order_id bigserial PRIMARY KEY, uid bigint, item text, qty int)")
    rows = [(u, f"item {u}-{n}", n) for u in range(300) for n in range(u % 4)]
    rows += [(7, f"bulk {n}", n) for n in range(500)]
    pg.many(f"INSERT INTO {table} (uid, item, qty) VALUES ($1, $2, $3)", rows)
    pg(f"CREATE INDEX ON {table} (uid)")
    yield table
    pg(f"DROP TABLE {table}")


def options(postgres_srv: Any, table: str) -> dict[str, str]:
    return {
        "connector": "postgres",
        "url": postgres_srv.url,
        "postgres.query": f"SELECT uid, item, qty FROM {table} WHERE uid = ANY($1)",
    }


def expected(pg: Any, table: str, users: range, how: str) -> Counter[tuple[Any, ...]]:
    join = "LEFT JOIN" if how == "left" else "JOIN"
    rows = pg.fetch(
        f"SELECT e.event_id, e.uid, o.item, o.qty FROM "
        f"(SELECT g AS event_id, g % {len(users)} AS uid FROM generate_series(0, 1999) g) e "
        f"{join} {table} o ON o.uid = e.uid"
    )
    return Counter(tuple(r) for r in rows)


def events(spark: Any, users: range) -> Any:
    return spark.range(2000, numPartitions=3).select(
        F.col("id").alias("event_id"), (F.col("id") % len(users)).alias("uid")
    )


@pytest.mark.parametrize("how", ["left", "inner"])
def test_lookup_join_emits_a_row_per_match(
    spark: Any, postgres_srv: Any, pg: Any, orders: str, how: str
) -> None:
    users = range(300)
    out = lookup_join(
        events(spark, users), "uid", schema=SCHEMA, options=options(postgres_srv, orders), how=how
    )
    got = Counter(tuple(r) for r in out.select("event_id", "uid", "item", "qty").collect())
    assert got == expected(pg, orders, users, how)
    assert sum(1 for row in got.elements() if row[1] == 7) == 7 * 503  # 7 events x 503 orders


@needs(TABLE_FUNCTION)
@pytest.mark.parametrize("how", ["left", "inner"])
def test_table_function_emits_a_row_per_match(
    spark: Any, postgres_srv: Any, pg: Any, orders: str, how: str
) -> None:
    users = range(300)
    register_lookup_table(spark, "orders", schema=SCHEMA, options=options(postgres_srv, orders))
    events(spark, users).createOrReplaceTempView("order_events")
    out = spark.sql(
        f"SELECT event_id, uid, item, qty FROM orders_lookup(TABLE(order_events), 'uid', '{how}')"
    )
    assert Counter(tuple(r) for r in out.collect()) == expected(pg, orders, users, how)


@needs(DATA_SOURCE)
def test_data_source_reads_every_match_of_the_keys(
    spark: Any, postgres_srv: Any, pg: Any, orders: str
) -> None:
    keys = [1, 2, 3, 4, 7, 100_000]
    out = (
        spark.read.format("asynclookup")
        .schema(SCHEMA)
        .options(**options(postgres_srv, orders))
        .option("keys", str(keys))
        .load()
    )
    want = pg.fetch(f"SELECT uid, item, qty FROM {orders} WHERE uid = ANY($1::bigint[])", keys)
    assert Counter(tuple(r) for r in out.collect()) == Counter(tuple(r) for r in want)


def test_the_guard_names_the_key_with_too_many_matches(
    spark: Any, postgres_srv: Any, orders: str
) -> None:
    guarded = {**options(postgres_srv, orders), "lookup.max-matches": "100"}
    out = lookup_join(events(spark, range(300)), "uid", schema=SCHEMA, options=guarded)
    with pytest.raises(Exception, match="key 7: 503 matches, more than lookup.max-matches=100"):
        out.collect()
    kept = lookup_join(
        events(spark, range(300)),
        "uid",
        schema=SCHEMA,
        options={**guarded, "on.error": "null"},
    )
    rows = kept.filter("uid = 7").collect()
    assert len(rows) == 7 and all(r.item is None for r in rows)  # one null row per event


@pytest.fixture
def hot_key(pg: Any, table_name: str) -> Iterator[str]:
    """User 7 has 2,000 orders."""
    table = f"{table_name}_hot"
    pg(f"CREATE TABLE {table} (order_id bigserial PRIMARY KEY, uid bigint, item text, qty int)")
    pg.many(
        f"INSERT INTO {table} (uid, item, qty) VALUES ($1, $2, $3)",
        [(7, f"order {n}", n) for n in range(2_000)],
    )
    pg(f"CREATE INDEX ON {table} (uid)")
    yield table
    pg(f"DROP TABLE {table}")


def test_a_hot_key_leaves_in_bounded_batches_in_bounded_memory(
    postgres_srv: Any, hot_key: str
) -> None:
    """10,000 input rows of a key with 2,000 rows in Postgres: 20,000,000 output rows, in
    batches of at most maxRecordsPerBatch (10,000), while Arrow's memory stays under what one
    ordinary batch takes, far below the ~1 GB the output would take at once."""
    import pyarrow as pa

    from lookup_source.engine.runner import run_lookups
    from lookup_source.spark.plan import LookupPlan

    plan = LookupPlan.build(options(postgres_srv, hot_key), SCHEMA)
    spec = plan.engine_spec(("uid",), how="left")
    assert spec.output_rows == 10_000
    inputs = [pa.record_batch({"event_id": pa.array(range(10_000)), "uid": pa.array([7] * 10_000)})]
    before = pa.total_allocated_bytes()
    rows = largest = peak = 0
    for batch in run_lookups(inputs, spec, plan.connector_config()):
        if rows == 0:  # the first input row, once per order, in the order Postgres gave them
            assert batch.column("event_id").to_pylist()[:2] == [0, 0]
            assert batch.column("item").to_pylist()[:2] == ["order 0", "order 1"]
        rows += batch.num_rows
        largest = max(largest, batch.num_rows)
        peak = max(peak, pa.total_allocated_bytes() - before)
    assert rows == 20_000_000
    assert largest <= 10_000
    assert peak < 64 * 1024 * 1024, peak


@pytest.mark.parametrize(
    "surface", ["lookup_join", pytest.param("table function", marks=needs(TABLE_FUNCTION))]
)
def test_spark_gets_every_row_of_a_hot_key(
    spark: Any, postgres_srv: Any, hot_key: str, surface: str
) -> None:
    events = spark.range(10_000, numPartitions=1).select(
        F.col("id").alias("event_id"), F.lit(7).cast("long").alias("uid")
    )
    if surface == "lookup_join":
        out = lookup_join(events, "uid", schema=SCHEMA, options=options(postgres_srv, hot_key))
    else:
        register_lookup_table(spark, "hot", schema=SCHEMA, options=options(postgres_srv, hot_key))
        events.createOrReplaceTempView("hot_events")
        out = spark.sql("SELECT * FROM hot_lookup(TABLE(hot_events), 'uid')")
    assert out.count() == 20_000_000
    assert out.where("qty = 1999").count() == 10_000  # every event got the last order too
