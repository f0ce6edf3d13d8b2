"""partition.by-key: with a per-worker cache, skewed keys are asked once each when the input is
hash-partitioned by the key, and once per worker that sees them when it is not; counted at a
real HTTP server."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web
from pyspark.sql import functions as F

from lookup_source import lookup_join, register_lookup_table
from lookup_source.spark.versions import DATA_SOURCE, TABLE_FUNCTION
from tests.helpers import needs

SCHEMA = "user_id long, name string"


class Counting:
    def __init__(self) -> None:
        self.asked: Counter[int] = Counter()
        app = web.Application()
        app.router.add_get("/{id}", self.get)
        from lookup_source.service import BackgroundHttpServer

        self.server = BackgroundHttpServer(app)

    async def get(self, request: web.Request) -> web.Response:
        user = int(request.match_info["id"])
        self.asked[user] += 1
        return web.json_response({"name": f"user {user}"})


@pytest.fixture(scope="module")
def service() -> Iterator[Counting]:
    counting = Counting()
    with counting.server:
        yield counting


def skewed(spark: Any) -> Any:
    """6,000 events over 4 partitions; user k appears about 1/k as often (Zipf-like)."""
    rank = F.pmod(F.hash("id"), 300) + 1
    return spark.range(6000, numPartitions=4).select(
        F.col("id").alias("event_id"), F.floor(F.lit(300) / rank).cast("long").alias("user_id")
    )


@pytest.mark.parametrize("by_key", [False, True])
def test_each_worker_caches_a_disjoint_share(spark: Any, service: Counting, by_key: bool) -> None:
    # a cache of its own for this run: another key pattern (the cache is keyed by the options)
    service.asked.clear()
    options = {
        "connector": "http",
        "url": f"{service.server.base_url}/{{key}}",
        "cache.max-rows": "10000",
        "capacity": "20",
        "http.header.X-Run": f"by-key-{by_key}",
        "partition.by-key": str(by_key).lower(),
    }
    events = skewed(spark)
    out = lookup_join(events, "user_id", schema=SCHEMA, options=options)
    rows = out.collect()
    assert len(rows) == 6000
    assert all(r.name == f"user {r.user_id}" for r in rows)
    distinct = {r.user_id for r in rows}
    if by_key:
        assert service.asked == Counter(dict.fromkeys(distinct, 1))  # each key asked once
    else:
        assert set(service.asked) == distinct
        assert sum(service.asked.values()) > len(distinct)  # several workers ask the same keys


@needs(TABLE_FUNCTION)
def test_the_table_function_partitions_its_input_by_the_key(spark: Any, service: Counting) -> None:
    service.asked.clear()
    register_lookup_table(
        spark,
        "by_key_users",
        schema=SCHEMA,
        options={
            "connector": "http",
            "url": f"{service.server.base_url}/{{key}}",
            "cache.max-rows": "10000",
            "http.header.X-Run": "by-key-sql",
            "partition.by-key": "true",
        },
    )
    skewed(spark).createOrReplaceTempView("skewed_events")
    rows = spark.sql("SELECT * FROM by_key_users_lookup(TABLE(skewed_events), 'user_id')").collect()
    assert len(rows) == 6000
    assert all(r.name == f"user {r.user_id}" for r in rows)
    assert service.asked == Counter(dict.fromkeys({r.user_id for r in rows}, 1))


@needs(DATA_SOURCE)
def test_the_data_source_refuses_it(spark: Any, service: Counting) -> None:
    read = (
        spark.read.format("asynclookup")
        .schema(SCHEMA)
        .options(connector="http", url=f"{service.server.base_url}/{{key}}")
        .option("keys", "[1]")
        .option("partition.by-key", "true")
    )
    with pytest.raises(Exception, match="partition.by-key.*not to a read of the data source"):
        read.load().collect()
