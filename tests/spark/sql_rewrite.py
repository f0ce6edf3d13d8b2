"""What the SQL join suites share: the rewrite turned on or off for a block, a frame's rows,
the extension's decisions while a query is analyzed, and a query's outcome checked the same
with the rewrite on and off (Spark's own join, the reference)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from lookup_source.spark.internals import clear_decisions, jvm_decisions, plan_text
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


def outcome(spark: Any, sql: str) -> Counter[tuple[Any, ...]] | str:
    """The rows of ``sql``, or the error class it raised."""
    try:
        return rows(spark.sql(sql))
    except Exception as error:  # Spark's own errors, whatever their class
        condition = getattr(error, "getCondition", lambda: None)() or type(error).__name__
        return f"raised {condition}"


def same_outcome_both_ways(
    spark: Any, sql: str, *, rewritten: bool = True, scans: int | None = None
) -> Counter[tuple[Any, ...]] | str:
    """``sql``'s outcome (its rows, or the error it raised) with the rewrite on, checked equal
    to Spark's own (the rewrite off). Whether the rule took it is checked against
    ``rewritten``, by its decision and by the plan (the lookup's ``ArrowEvalPythonUDTF``);
    ``scans``, where given, is how many scans of a lookup table the rewritten plan keeps (its
    input's own, as in a self-join)."""
    with rewrite(spark, True):
        clear_decisions(spark)
        on = outcome(spark, sql)
        decisions = jvm_decisions(spark)
        if not isinstance(on, str):
            physical = plan_text(spark.sql(sql), "simple")
            assert ("ArrowEvalPythonUDTF" in physical) == rewritten, physical
            if rewritten and scans is not None:
                assert physical.count("BatchScan asynclookup") == scans, physical
    assert any(d[0] == ("lookup" if rewritten else "spark") for d in decisions), decisions
    with rewrite(spark, False):
        off = outcome(spark, sql)
    assert on == off, (sql, on, off)
    return on


def same_both_ways(
    spark: Any, sql: str, *, rewritten: bool = True, scans: int | None = 0
) -> Counter[tuple[Any, ...]]:
    """The rows of ``sql``, the same with the rewrite on and off (``same_outcome_both_ways``),
    where Spark's own join answers."""
    got = same_outcome_both_ways(spark, sql, rewritten=rewritten, scans=scans)
    assert not isinstance(got, str), (sql, got)
    return got
