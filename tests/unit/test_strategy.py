"""How strategy=auto chooses between lookups, a broadcast join and a scan joined by Spark (the
decision alone)."""

from __future__ import annotations

from typing import Any

import pytest

from lookup_source.spark.plan_cost import StoreCosts, estimate
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
    strategy, reason = decide(800, 5_000)
    assert strategy == "broadcast"
    assert reason.startswith("the cheapest by estimate: broadcast ~3.4 core-ms, ")
    assert reason.endswith("; the table ~800 rows, the input ~5,000 rows")
    # the input's size unknown: the table decides
    assert decide(800, None) == (
        "broadcast",
        "the table (~800 rows) fits strategy.broadcast.max-rows (1,000) and the input's size "
        "is unknown",
    )


def test_a_large_input_over_a_table_beyond_the_broadcast_limit_is_scanned_and_joined() -> None:
    strategy, reason = decide(2_000_000, 2_000_000, max_rows=1_000_000)
    assert strategy == "scan", reason
    estimates = dict(
        (plan, float(cost.removesuffix(" core-s")))
        for plan, cost in (
            part.split(" ~") for part in reason.split(": ", 1)[1].split("; ")[0].split(", ")
        )
    )
    assert set(estimates) == {"scan", "lookup"}  # no broadcast beyond the limit
    assert estimates["scan"] < estimates["lookup"]
    assert reason.endswith(
        "; the table ~2,000,000 rows, the input ~2,000,000 rows (more than "
        "strategy.broadcast.max-rows, 1,000,000: no broadcast)"
    )


def test_few_rows_over_a_large_table_are_looked_up() -> None:
    assert decide(2_000_000, 20_000, max_rows=1_000_000)[0] == "lookup"
    assert decide(800, 20)[0] == "lookup"  # fewer keys than the table holds
    assert decide(5_000_000, None, max_rows=1_000_000) == (
        "lookup",
        "the input's size is unknown and the table (~5,000,000 rows) is larger than "
        "strategy.broadcast.max-rows (1,000,000)",
    )


def test_the_crossover_moves_with_the_connectors_figures() -> None:
    """A store whose lookups cost more per key makes a scan pay off sooner."""
    table = 1_000_000
    cheap = StoreCosts(lookup_us=2.0, scan_us=1.0)
    dear = StoreCosts(lookup_us=40.0, scan_us=1.0)
    rows = 200_000
    assert decide(table, rows, max_rows=10, costs=cheap)[0] == "lookup"
    assert decide(table, rows, max_rows=10, costs=dear)[0] == "scan"


def test_the_estimates_grow_with_the_sizes() -> None:
    small = estimate(20_000, 2_000_000, broadcast=False)
    large = estimate(2_000_000, 2_000_000, broadcast=False)
    assert small.cheapest == "lookup" and large.cheapest == "scan"
    assert large.seconds["lookup"] == pytest.approx(100 * small.seconds["lookup"])
    assert set(estimate(1, 1, broadcast=False).seconds) == {"lookup", "scan"}


@pytest.mark.parametrize(
    ("table", "rows", "changes", "reason"),
    [
        (None, 5_000, {}, "the table's size is unknown"),
        (10, 5_000, {"streaming": True}, "the input is a stream"),
        (10, 5_000, {"can_scan": False, "connector": "http"}, "the http connector cannot scan"),
        (10, 5_000, {"exact_keys": False}, "the key's type compares otherwise"),
        (10, 5_000, {"data_source": False}, "strategy=broadcast and scan (a scan of the table"),
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

    for asked in ("lookup", "broadcast", "scan"):
        choice = choose(asked, table_rows=never, input_rows=never, **BASE)
        assert (choice.strategy, choice.reason) == (asked, f"strategy={asked}")


class _Conf:
    def __init__(self, memory: str | None) -> None:
        self.memory = memory

    def get(self, key: str, default: str) -> str:
        assert key == "spark.driver.memory"
        return default if self.memory is None else self.memory


class _Session:
    def __init__(self, memory: str | None) -> None:
        self.conf = _Conf(memory)


@pytest.mark.parametrize(
    ("memory", "expected"),
    [
        (None, 2**30 // 4 // (36 * 3)),  # Spark's default driver, 1 GB
        ("2g", 2 * 2**30 // 4 // (36 * 3)),
        ("512m", 2**29 // 4 // (36 * 3)),
        ("1t", 8 * 2**30 // (36 * 3)),  # within Spark's 8 GB broadcast limit
    ],
)
def test_the_broadcast_limit_follows_the_driver_memory(memory: str | None, expected: int) -> None:
    from lookup_source.spark.plan import LookupPlan
    from lookup_source.spark.strategy import broadcast_limit

    options = {"connector": "redis", "url": "redis://h", "redis.key.pattern": "u:{key}"}
    plan = LookupPlan.build(
        options, "uid long, name string, tier int, born date"
    )  # 8 + 20 + 4 + 4 bytes
    assert broadcast_limit(_Session(memory), plan) == expected
    given = LookupPlan.build({**options, "strategy.broadcast.max-rows": "77"}, "uid long, v int")
    assert broadcast_limit(_Session(memory), given) == 77
