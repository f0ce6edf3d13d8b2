"""The input every scenario joins: events whose user key is drawn by a distribution (uniform,
zipf, distinct), and the distinct keys of each batch of a task, as asynclookup asks them."""

from __future__ import annotations

from typing import Any

BATCH_ROWS = 10_000


def events(spark: Any, rows: int, users: int, tasks: int, distribution: str) -> Any:
    from pyspark.sql import functions as F

    ids = spark.range(rows, numPartitions=tasks)
    if distribution == "zipf":  # a power law: a few keys take most of the traffic
        key = F.floor(F.pow(F.rand(7), F.lit(4.0)) * users)
    elif distribution == "distinct":  # in order: no key is asked while it is in flight
        key = F.col("id") % F.lit(users)
    else:
        key = F.pmod(F.xxhash64("id"), F.lit(users))
    return ids.select(F.col("id").alias("event_id"), key.cast("long").alias("user_id"))


def task_keys(df: Any) -> list[list[int]]:
    """The distinct keys of each 10,000-row batch, per task: the keys asynclookup asks."""
    out: list[list[int]] = []
    for part in df.rdd.glom().collect():
        keys: list[int] = []
        for start in range(0, len(part), BATCH_ROWS):
            keys.extend(dict.fromkeys(r.user_id for r in part[start : start + BATCH_ROWS]))
        out.append(keys)
    return out
