"""The one module that reads what PySpark offers no public API for
(lookup_source/spark/internals.py), on the PySpark of this environment: every supported one
runs it (make spark-versions). Over Spark Connect, the summing observation is checked by the
deployment suite's Connect job (lookup_metrics after two actions)."""

from __future__ import annotations

import threading
from typing import Any

from lookup_source import lookup_join
from lookup_source.spark import internals
from lookup_source.spark.metrics import FUNCTION_ID
from lookup_source.spark.plan_sizes import input_rows, row_width


async def fetch(user_id: int) -> dict[str, str]:
    return {"name": f"user {user_id}"}


def test_plan_text_holds_every_plan_and_the_lookups_function(spark: Any) -> None:
    enriched = lookup_join(
        spark.range(5).withColumnRenamed("id", "user_id"),
        "user_id",
        schema="user_id long, name string",
        fetch=fetch,
    )
    derived = enriched.filter("user_id > 1").select("name")
    text = internals.plan_text(derived)
    for part in ("Parsed Logical Plan", "Analyzed Logical Plan", "Physical Plan"):
        assert f"== {part} ==" in text
    assert len(set(FUNCTION_ID.findall(text))) == 1  # found in a derived DataFrame's plan
    assert sorted(r.name for r in derived.collect()) == ["user 2", "user 3", "user 4"]


def test_plan_text_from_many_threads_keeps_each_plan_apart(spark: Any) -> None:
    frames = [spark.range(n).withColumnRenamed("id", f"column_{n}") for n in range(1, 7)]
    texts: dict[int, str] = {}

    def explain(n: int) -> None:
        texts[n] = internals.plan_text(frames[n - 1])

    threads = [threading.Thread(target=explain, args=(n,)) for n in range(1, 7)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for n, text in texts.items():
        assert f"column_{n}" in text
        assert all(f"column_{m}" not in text for m in range(1, 7) if m != n)


def test_the_cost_plan_gives_the_row_estimate(spark: Any) -> None:
    assert internals.plan_text(spark.range(1_000), "cost").count("Statistics(") >= 1
    assert input_rows(spark.range(1_000)) == 1_000
    filtered = input_rows(spark.range(1_000).filter("id > 10"))
    assert filtered is not None and 0 < filtered <= 1_000  # an estimate, at most its input's
    local = spark.createDataFrame([(1, "a")] * 50, "a long, b string")
    assert input_rows(local) is None  # Spark cannot size it: unknown, never zero


def test_row_width_follows_sparks_default_sizes(spark: Any) -> None:
    schema = spark.createDataFrame(
        [], "a long, b string, c int, d array<double>, e map<string,int>, f decimal(30,2)"
    ).schema
    assert row_width(schema) == 8 + 20 + 4 + 8 + (20 + 4) + 16


def test_an_observation_summed_over_actions() -> None:
    class Observation:  # the attribute PySpark's Connect Observation keeps its result in
        def __init__(self) -> None:
            self._result: dict[str, Any] = {}

        @property
        def get(self) -> dict[str, Any]:
            return self._result

    observation = internals.summed_over_actions(Observation())
    assert internals.observed_result(observation) == {}
    observation._result.update({"metrics": "a", "n": 2})
    observation._result.update({"metrics": "b", "n": 3})
    observation._result.update({"metrics": ""})
    assert internals.observed_result(observation) == {"metrics": "a\nb", "n": 5}
