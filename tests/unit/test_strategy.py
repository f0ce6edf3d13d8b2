"""How strategy=auto chooses between lookups and a broadcast join (the decision alone)."""

from __future__ import annotations

from typing import Any

import pytest

from lookup_source.spark.strategy import choose

BASE: dict[str, Any] = {
    "streaming": False,
    "can_scan": True,
    "exact_keys": True,
    "max_rows": 1_000,
    "connector": "redis",
    "data_source": True,
}


def decide(table: int | None, rows: int | None, **changes: Any) -> tuple[str, str]:
    asked: list[str] = []

    def table_rows() -> int | None:
        asked.append("table")
        return table

    def input_rows() -> int | None:
        asked.append("input")
        return rows

    choice = choose("auto", table_rows=table_rows, input_rows=input_rows, **{**BASE, **changes})
    return choice.strategy, choice.reason


def test_a_small_table_and_a_larger_input_are_broadcast() -> None:
    assert decide(800, 5_000) == (
        "broadcast",
        "the table (~800 rows) fits strategy.broadcast.max-rows (1,000) and not larger than "
        "the input (~5,000 rows)",
    )
    assert decide(800, None)[0] == "broadcast"  # the input's size unknown: the table decides


@pytest.mark.parametrize(
    ("table", "rows", "changes", "reason"),
    [
        (1_200, 5_000, {}, "the table (~1,200 rows) is larger than strategy.broadcast.max-rows"),
        (800, 100, {}, "the table (~800 rows) is larger than the input (~100 rows)"),
        (None, 5_000, {}, "the table's size is unknown"),
        (10, 5_000, {"streaming": True}, "the input is a stream"),
        (10, 5_000, {"can_scan": False, "connector": "http"}, "the http connector cannot scan"),
        (10, 5_000, {"exact_keys": False}, "the key's type compares otherwise"),
        (10, 5_000, {"data_source": False}, "strategy=broadcast (a scan of the table, broadca"),
    ],
)
def test_otherwise_lookups_are_kept_and_the_reason_says_why(
    table: int | None, rows: int | None, changes: dict[str, Any], reason: str
) -> None:
    strategy, why = decide(table, rows, **changes)
    assert strategy == "lookup" and why.startswith(reason), why


def test_lookup_and_broadcast_are_taken_as_asked_without_estimates() -> None:
    def never() -> int:
        raise AssertionError("no estimate is needed")

    for asked in ("lookup", "broadcast"):
        choice = choose(asked, table_rows=never, input_rows=never, **BASE)
        assert (choice.strategy, choice.reason) == (asked, f"strategy={asked}")
