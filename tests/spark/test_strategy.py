"""strategy=broadcast and auto on Spark, against a real Postgres and Redis: a scan joined to
the input gives exactly what the lookups give, on every type, one-to-many included."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import pytest
from pyspark.sql import functions as F

from lookup_source import OptionError, lookup_join, lookup_metrics
from lookup_source.settings import parse_options
from lookup_source.spark.versions import BROADCAST
from tests.helpers import needs

pytestmark = needs(BROADCAST)

SOURCE = "; the table read through the asynclookup data source (scan.reader=source)"
"""How a scan's reason ends here (Spark's JDBC reader: test_jdbc_scan)."""

TYPES = (
    "id long, name string, score double, active boolean, born date, seen timestamp, "
    "amount decimal(38,10), tags array<string>"
)


def postgres(postgres_srv: Any, table: str, **extra: str) -> dict[str, str]:
    return {
        "connector": "postgres",
        "url": postgres_srv.url,
        "postgres.table": table,
        "key.column": "id",
        "scan.reader": "source",  # the data source's scan (test_jdbc_scan: Spark's JDBC reader)
        **extra,
    }


def events(spark: Any, rows: int = 3_000) -> Any:
    ids = F.when(F.col("id") % 97 == 0, None).otherwise(F.col("id") % 130)  # nulls, misses
    return spark.range(rows, numPartitions=3).select(
        F.col("id").alias("event_id"), ids.cast("int").alias("uid")
    )


def rows(df: Any) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(tuple(v) if isinstance(v, list) else v for v in r) for r in df.collect())


@pytest.mark.parametrize(
    ("strategy", "how"),
    [("broadcast", "left"), ("broadcast", "inner"), ("scan", "left"), ("scan", "inner")],
)
def test_a_scan_joined_gives_what_lookups_give_on_every_type(
    spark: Any, postgres_srv: Any, typed: str, strategy: str, how: str
) -> None:
    input_ = events(spark)
    looked = lookup_join(
        input_, "uid", schema=TYPES, options=postgres(postgres_srv, typed), how=how
    )
    options = postgres(postgres_srv, typed, strategy=strategy)
    broadcast = lookup_join(input_, "uid", schema=TYPES, options=options, how=how)
    assert broadcast.columns == looked.columns
    assert broadcast.schema == looked.schema
    expected = rows(looked)
    assert rows(broadcast) == expected
    assert sum(1 for r in expected.elements() if r[1] == 7) == 3 * sum(
        1 for e in range(3_000) if e % 97 and e % 130 == 7
    )  # one row per match
    metrics = lookup_metrics(broadcast)
    assert (metrics.strategy, metrics.strategy_reason) == (strategy, f"strategy={strategy}{SOURCE}")
    # a scan leaves the join to Spark's planner (which may still broadcast a table this small
    # at run time); a broadcast asks for one
    plan = broadcast._jdf.queryExecution().optimizedPlan().toString()
    assert ("strategy=broadcast" in plan) == (strategy == "broadcast"), plan
    # the table is read whole (the SQL extension leaves this join a join, never lookups)
    physical = broadcast._jdf.queryExecution().executedPlan().toString()
    assert "ArrowEvalPythonUDTF" not in physical and "asynclookup" in physical, physical
    assert lookup_metrics(looked).strategy == "lookup"


def test_auto_broadcasts_a_small_table_scans_past_the_limit_and_looks_up_few_keys(
    spark: Any, postgres_srv: Any, pg: Any, typed: str
) -> None:
    pg(f"ANALYZE {typed}")
    auto = postgres(postgres_srv, typed, strategy="auto")
    small = lookup_join(events(spark), "uid", schema=TYPES, options=auto)
    metrics = lookup_metrics(small)
    assert metrics.strategy == "broadcast", metrics.strategy_reason
    assert re.fullmatch(  # Spark estimates the input from its plan's statistics
        r"the cheapest by estimate: broadcast ~[0-9.]+ core-m?s, (scan|lookup) ~[0-9.]+ "
        r"core-m?s, (scan|lookup) ~[0-9.]+ core-m?s; the table ~104 rows, the input ~[0-9,]+ "
        r"rows" + re.escape(SOURCE),
        metrics.strategy_reason,
    )
    assert metrics.requests == 0  # no lookup at all
    limited = {**auto, "strategy.broadcast.max-rows": "50"}
    out = lookup_join(events(spark), "uid", schema=TYPES, options=limited)
    assert rows(out) == rows(small)
    metrics = lookup_metrics(out)
    assert metrics.strategy == "scan", metrics.strategy_reason  # beyond the broadcast limit
    assert metrics.strategy_reason.endswith(
        "(more than strategy.broadcast.max-rows, 50: no broadcast)" + SOURCE
    )
    assert metrics.requests == 0
    few = lookup_join(events(spark, rows=20), "uid", schema=TYPES, options=auto)
    looked = postgres(postgres_srv, typed)
    assert rows(few) == rows(lookup_join(events(spark, 20), "uid", schema=TYPES, options=looked))
    metrics = lookup_metrics(few)
    assert metrics.strategy == "lookup", metrics.strategy_reason
    assert re.fullmatch(
        r"the cheapest by estimate: lookup ~[0-9.]+ core-m?s, .*; the table ~104 rows, the "
        r"input ~[0-9]+ rows",
        metrics.strategy_reason,
    )


def test_auto_on_redis_counts_the_keys_of_its_pattern(
    spark: Any, redis_srv: Any, redis_db: Any, prefix: str
) -> None:
    redis_db.mset({f"{prefix}u:{i}": json.dumps({"name": f"user {i}"}) for i in range(40)})
    redis_db.set(f"{prefix}other", "not a user")
    options = {
        "connector": "redis",
        "url": redis_srv.url,
        "redis.key.pattern": f"{prefix}u:{{key}}",
        "strategy": "auto",
    }
    out = lookup_join(events(spark, 500), "uid", schema="id long, name string", options=options)
    metrics = lookup_metrics(out)
    assert metrics.strategy == "broadcast", metrics.strategy_reason
    assert "; the table ~40 rows, the input ~" in metrics.strategy_reason
    got = sorted((r.event_id, r.name) for r in out.collect())
    assert got == sorted(
        (e, f"user {e % 130}" if e % 97 and e % 130 < 40 else None) for e in range(500)
    )


def test_streams_and_stores_that_cannot_scan_keep_lookups(
    spark: Any, tmp_path: Any, postgres_srv: Any, typed: str
) -> None:
    http = {"connector": "http", "url": "http://127.0.0.1:9/users/{key}"}
    out = lookup_join(
        events(spark), "uid", schema="id long, name string", options={**http, "strategy": "auto"}
    )
    assert lookup_metrics(out).strategy_reason == "the http connector cannot scan its table"

    async def fetch(key: int) -> dict[str, str] | None:
        return {"name": f"user {key}"} if key == 1 else None

    by_function = lookup_join(
        events(spark, 3),
        "uid",
        schema="id long, name string",
        fetch=fetch,
        options={"strategy": "auto"},
    )
    assert sorted(by_function.select("event_id", "name").collect()) == [
        (0, None),
        (1, "user 1"),
        (2, None),
    ]
    assert (lookup_metrics(by_function).strategy, lookup_metrics(by_function).strategy_reason) == (
        "lookup",
        "the function connector cannot scan its table",
    )
    # options given parsed (LookupOptions) are chosen for as a mapping is: parsed once, handed on
    as_mapping = postgres(postgres_srv, typed, strategy="auto")
    out = lookup_join(events(spark, 200), "uid", schema=TYPES, options=parse_options(as_mapping))
    assert out.count() == 200 + 2 * sum(1 for e in range(200) if e % 97 and e % 130 in (7, 8))
    same = lookup_join(events(spark, 200), "uid", schema=TYPES, options=as_mapping)
    chosen = lookup_metrics(out)
    assert (chosen.strategy, chosen.strategy_reason) == (
        lookup_metrics(same).strategy,
        lookup_metrics(same).strategy_reason,
    )
    with pytest.raises(OptionError, match="'strategy': is broadcast, but the http connector"):
        lookup_join(
            events(spark),
            "uid",
            schema="id long, name string",
            options={**http, "strategy": "broadcast"},
        )
    with pytest.raises(OptionError, match="'strategy': is scan, but the http connector"):
        lookup_join(
            events(spark),
            "uid",
            schema="id long, name string",
            options={**http, "strategy": "scan"},
        )
    stream = spark.readStream.schema("event_id long, uid int").json(str(tmp_path))
    with pytest.raises(OptionError, match="is scan, but the input is a stream"):
        lookup_join(
            stream, "uid", schema=TYPES, options=postgres(postgres_srv, typed, strategy="scan")
        )
    with pytest.raises(OptionError, match="is broadcast, but the input is a stream"):
        lookup_join(
            stream, "uid", schema=TYPES, options=postgres(postgres_srv, typed, strategy="broadcast")
        )
    auto = lookup_join(
        stream, "uid", schema=TYPES, options=postgres(postgres_srv, typed, strategy="auto")
    )
    assert auto.isStreaming  # (its metrics' reason: the input is a stream)
