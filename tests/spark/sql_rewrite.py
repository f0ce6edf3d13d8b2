"""What the SQL join suites share: the rewrite turned on or off for a block, a frame's rows,
and the extension's decisions while a query is analyzed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from lookup_source.spark.internals import clear_decisions, jvm_decisions
from lookup_source.spark.sql_extension import ENABLED


@contextmanager
def rewrite(spark: Any, on: bool) -> Iterator[None]:
    spark.conf.set(ENABLED, "true" if on else "false")
    try:
        yield
    finally:
        spark.conf.unset(ENABLED)


def rows(frame: Any) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(r) for r in frame.collect())


def decided(spark: Any, sql: str) -> list[tuple[str, str, str, str]]:
    """The extension's decisions while ``sql`` is analyzed (the rewrite on)."""
    clear_decisions(spark)
    spark.sql(sql).schema  # noqa: B018 - analysis only
    return jvm_decisions(spark)
