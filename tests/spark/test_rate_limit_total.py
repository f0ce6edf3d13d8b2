"""rate.limit.total: one request rate for the whole lookup, measured by the timestamps of the
requests at a real HTTP server, through lookup_join, the table function and the data source."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web
from pyspark.sql import functions as F

from lookup_source import lookup_join, register_lookup_table
from lookup_source.errors import OptionError
from lookup_source.service import BackgroundHttpServer
from lookup_source.settings import parse_options
from lookup_source.spark.versions import TABLE_FUNCTION
from tests.helpers import needs

TOTAL = 40.0  # requests per second for the whole lookup


class Stamped:
    """Answers GET /{id} with a record and keeps the time of every request."""

    def __init__(self) -> None:
        self.times: list[float] = []
        app = web.Application()
        app.router.add_get("/{id}", self.get)
        self.server = BackgroundHttpServer(app)

    async def get(self, request: web.Request) -> web.Response:
        self.times.append(time.monotonic())
        return web.json_response({"name": f"user {request.match_info['id']}"})


@pytest.fixture(scope="module")
def stamped() -> Iterator[Stamped]:
    service = Stamped()
    with service.server:
        yield service


def check_rate(times: list[float], requests: int) -> None:
    assert len(times) == requests
    times = sorted(times)
    # never more than the quota in any one-second window: one request of slack per task for
    # two tasks starting together, and a quarter second of the quota for the server's own
    # stamps, which a busy machine delays and bunches (each task taking the whole quota would
    # be twice it)
    busiest = max(sum(1 for t in times if start <= t < start + 1.0) for start in times)
    assert busiest <= TOTAL * 1.25 + 2, busiest
    # and the quota is used: the tasks that run at once share it, they do not each take it
    # (below: real time on a shared machine, a generous bound; above: the guarantee, with
    # the same allowance for late stamps)
    rate = (len(times) - 1) / (times[-1] - times[0])
    assert TOTAL * 0.4 <= rate <= TOTAL * 1.25, rate


def options(stamped: Stamped) -> dict[str, str]:
    return {
        "connector": "http",
        "url": f"{stamped.server.base_url}/{{key}}",
        "rate.limit.total": str(TOTAL),
    }


def test_lookup_join_shares_the_rate_over_its_tasks(spark: Any, stamped: Stamped) -> None:
    stamped.times.clear()
    # 4 partitions on 2 cores: 2 tasks at a time, each at TOTAL / 2
    df = spark.range(120, numPartitions=4).select(F.col("id").alias("user_id"))
    out = lookup_join(df, "user_id", schema="user_id long, name string", options=options(stamped))
    rows = out.collect()
    assert sorted(r.name for r in rows) == sorted(f"user {i}" for i in range(120))
    check_rate(stamped.times, 120)


@needs(TABLE_FUNCTION)
def test_the_table_function_and_the_data_source_share_it_too(spark: Any, stamped: Stamped) -> None:
    stamped.times.clear()
    register_lookup_table(
        spark, "rated", schema="user_id long, name string", options=options(stamped)
    )
    spark.range(80, numPartitions=2).select(F.col("id").alias("user_id")).createOrReplaceTempView(
        "rated_events"
    )
    got = spark.sql("SELECT user_id, name FROM rated_lookup(TABLE(rated_events), 'user_id')")
    assert got.count() == 80
    check_rate(stamped.times, 80)
    stamped.times.clear()
    read = (
        spark.read.format("asynclookup")
        .schema("user_id long, name string")
        .options(**options(stamped))
        .option("keys", str(list(range(1000, 1080))))
        .option("partitions", "2")
        .load()
    )
    assert read.count() == 80
    check_rate(stamped.times, 80)


def test_the_split_is_an_even_share_and_the_smaller_rate_wins() -> None:
    base = {"connector": "http", "url": "http://h/{key}", "rate.limit.total": "100"}
    assert parse_options(base).split_over(4).rate_limit == 25.0
    both = parse_options({**base, "rate.limit": "10"}).split_over(4)
    assert both.rate_limit == 10.0 and both.rate_limit_total == 0.0
    assert parse_options({**base, "rate.limit.total": "0"}).split_over(4).rate_limit == 0.0
    with pytest.raises(OptionError, match="rate.limit.total"):
        parse_options({**base, "rate.limit.total": "-1"})
