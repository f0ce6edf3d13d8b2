"""What a SQL JOIN's table function decides from what the rule tells it (its last argument):
the table's ``strategy`` judged by Spark's estimate of the input's rows, and the rule's key
columns checked against the data source's; a refusal says why, an acceptance too."""

from __future__ import annotations

from typing import Any

import pytest

from lookup_source.settings import parse_options
from lookup_source.spark.join_checks import RuleFacts
from lookup_source.spark.plan import LookupPlan
from lookup_source.spark.strategy import sql_join_decision
from lookup_source.spark.versions import SQL_JOINS
from tests.helpers import needs


def table(**options: str) -> LookupPlan:
    given = {"connector": "redis", "url": "redis://127.0.0.1:1/0", **options}
    return LookupPlan.build(parse_options(given), "k long, region string, v string")


def test_lookup_always_and_scan_or_broadcast_never() -> None:
    assert sql_join_decision(table(), 10**9) == (True, "strategy=lookup")
    for strategy in ("scan", "broadcast"):
        lookups, why = sql_join_decision(table(strategy=strategy), 1)
        assert not lookups and why == f"strategy={strategy}: Spark scans the table and joins it"


def test_auto_compares_the_input_with_the_limit() -> None:
    plan = table(strategy="auto", **{"strategy.lookup.max-input-rows": "20"})
    assert sql_join_decision(plan, 20) == (
        True,
        "strategy=auto: lookups: the input ~20 rows, lookups up to 20 "
        "(strategy.lookup.max-input-rows)",
    )
    assert sql_join_decision(plan, 100_000) == (
        False,
        "strategy=auto: a scan and Spark's join: the input ~100,000 rows, lookups up to 20 "
        "(strategy.lookup.max-input-rows)",
    )
    assert sql_join_decision(plan, None) == (
        True,
        "strategy=auto: the input's size is unknown: lookups",
    )
    lookups, why = sql_join_decision(table(strategy="auto"), 10**9)
    assert lookups and "no strategy.lookup.max-input-rows" in why


def test_the_rules_facts_parse_and_refuse_what_is_malformed() -> None:
    assert RuleFacts.parse(None) == RuleFacts() == RuleFacts.parse("  ")
    assert RuleFacts.parse('{"input_rows": 5, "table_keys": ["K"]}') == RuleFacts(5, ("K",))
    assert RuleFacts.parse('{"rewrite": "ab12"}') == RuleFacts(rewrite="ab12")
    for bad in (
        "[1]",
        '{"input_rows": -1}',
        '{"input_rows": 1.5}',
        '{"input_rows": true}',
        '{"table_keys": "k"}',
        '{"rewrite": 7}',
        '{"table_keys": [1]}',
        "{",
    ):
        with pytest.raises(ValueError):
            RuleFacts.parse(bad)


def test_keys_the_rule_took_otherwise_than_the_data_source_are_a_refusal() -> None:
    plan = table(**{"key.column": "k,region", "redis.key.pattern": "t:{k}:{region}"})
    assert RuleFacts(None, ("K", "Region")).disagreement(plan) is None  # (case aside)
    assert RuleFacts(None, None).disagreement(plan) is None  # (not told: nothing to check)
    for other in (("k",), ("region", "k"), ("k", "v")):
        why = RuleFacts(None, other).disagreement(plan)
        assert why is not None and "k, region" in why and ", ".join(other) in why


def _argument(value: Any, data_type: Any = None, table: bool = False) -> Any:
    from pyspark.sql.types import StringType
    from pyspark.sql.udtf import AnalyzeArgument

    fields = {"dataType": data_type or StringType(), "value": value, "isTable": table}
    if "isConstantExpression" in AnalyzeArgument.__dataclass_fields__:
        fields["isConstantExpression"] = not table
    return AnalyzeArgument(**fields)


@needs(SQL_JOINS)
@pytest.mark.parametrize(
    ("options", "facts", "refused"),
    [
        ({"strategy": "scan"}, '{"input_rows": 3, "table_keys": ["k"]}', "strategy=scan"),
        ({}, '{"input_rows": 3, "table_keys": ["region"]}', "the SQL rule took"),
        ({}, "not json", "the table function cannot look this table up: JSONDecodeError"),
    ],
)
def test_analyze_refuses_with_the_reason(options: dict[str, str], facts: str, refused: str) -> None:
    from pyspark.sql.types import LongType, StructField, StructType

    from lookup_source.spark.join_markers import VETO, VETO_REASON
    from lookup_source.spark.table_function import lookup_handler

    handler = lookup_handler(table(**options))
    rows = StructType([StructField("__asynclookup_key_0", LongType())])
    result = handler.analyze(
        _argument(None, rows, table=True),
        _argument("__asynclookup_key_0"),
        _argument("left"),
        _argument(""),
        _argument("sql-join"),
        _argument(""),
        _argument(facts),
    )
    (field,) = result.schema.fields
    assert field.name == VETO and refused in field.metadata[VETO_REASON], field.metadata


def test_the_decision_comes_under_the_rewrites_own_key() -> None:
    from pyspark.sql.types import LongType, StructField, StructType

    from lookup_source.spark.join_checks import decided

    schema = StructType(
        [StructField("a", LongType()), StructField("k", LongType(), True, {"x": 1})]
    )
    marked = decided(schema, "k", "why", "ab12")
    assert marked["k"].metadata == {"x": 1, "asynclookup.decision.ab12": "why"}
    assert marked["a"].metadata == {}
