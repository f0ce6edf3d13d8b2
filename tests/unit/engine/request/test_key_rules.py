"""Which of a store's matches are a key's (``key.equality``), and what a key the store cannot
hold is (``on.unfit-key``): the engine's key rules, through a whole lookup, against a store
whose ``=`` is case-insensitive and whose key type holds no text longer than four letters."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from lookup_source.connector_api import ConnectorConfig, LookupClient, Matches
from lookup_source.engine.metrics import LookupMetrics
from lookup_source.engine.request.key_rules import KeyRules
from lookup_source.engine.runner import run_lookups
from lookup_source.errors import LookupFailedError
from lookup_source.settings import KeySettings
from lookup_source.testing.clock import VirtualTimeLoop
from tests.fakes import make_options, make_spec

ROWS = [("EU", "eu-1"), ("eu", "eu-2"), ("us", "us-1"), ("us", "us-2")]
"""The store's rows (key, name): two keys that differ in case, and a key with two rows."""
FIELDS = [pa.field("name", pa.string())]


class CaseInsensitiveStore(LookupClient):
    """Answers a key with every row whose key equals it case-insensitively, reporting each
    row's own key when asked to; a key longer than four letters cannot be a key at all."""

    name = "ci"
    reports_keys = True

    async def lookup_arrow(self, keys: pa.RecordBatch) -> Matches:
        asked = keys.column(0).to_pylist()
        index, names, own = [], [], []
        unfit = {}
        for position, key in enumerate(asked):
            if len(key) > 4:
                unfit[position] = "it is longer than the key column's four letters"
                continue
            for row_key, name in ROWS:
                if row_key.lower() == key.lower():
                    index.append(position)
                    names.append(name)
                    own.append(row_key)
        reported = None
        if self.config.key_equality == "spark":
            reported = pa.record_batch({"k": pa.array(own, pa.string())})
        values = pa.record_batch({"name": pa.array(names, pa.string())})
        return Matches(np.array(index, dtype=np.int64), values, None, reported, unfit or None)


def lookup(
    keys: list[Any],
    how: str = "left",
    *,
    equality: str = "store",
    on_unfit: str = "error",
    on_error: str = "fail",
) -> tuple[list[Any], LookupMetrics]:
    options = make_options(keys=KeySettings(equality, on_unfit), on_error=on_error)
    spec = make_spec(options, values=(("name", pa.string()),), how=how)
    config = ConnectorConfig(
        connector="ci",
        url=None,
        key_columns=("k",),
        value_columns=("name",),
        value_types=(pa.string(),),
        key_types=(pa.string(),),
        key_equality=spec.options.keys.equality,
    )
    seen: list[LookupMetrics] = []
    batch = pa.record_batch({"k": pa.array(keys, pa.string())})
    out = run_lookups(
        [batch],
        spec,
        config,
        client_factory=CaseInsensitiveStore,
        loop_factory=VirtualTimeLoop,
        on_metrics=seen.append,
    )
    rows = [tuple(r.values()) for b in out for r in b.to_pylist()]
    merged = LookupMetrics()
    for m in seen:
        merged.merge(m)
    return rows, merged


def test_the_stores_equality_by_default() -> None:
    rows, metrics = lookup(["eu", "US", "fr"])
    assert rows == [
        ("eu", "eu-1"),
        ("eu", "eu-2"),
        ("US", "us-1"),
        ("US", "us-2"),
        ("fr", None),
    ]
    assert metrics.unequal_matches == 0


def test_spark_equality_keeps_only_the_rows_of_the_asked_key() -> None:
    rows, metrics = lookup(["eu", "EU", "US", "us", "fr"], equality="spark")
    assert rows == [
        ("eu", "eu-2"),
        ("EU", "eu-1"),
        ("US", None),
        ("us", "us-1"),
        ("us", "us-2"),
        ("fr", None),
    ]
    assert metrics.unequal_matches == 1 + 1 + 2  # (eu: EU; EU: eu; US: us, us)


def test_spark_equality_in_inner_semi_and_anti_joins() -> None:
    keys = ["eu", "US", "us", None, "fr"]
    assert lookup(keys, "inner", equality="spark")[0] == [
        ("eu", "eu-2"),
        ("us", "us-1"),
        ("us", "us-2"),
    ]
    assert lookup(keys, "semi", equality="spark")[0] == [("eu",), ("us",)]
    assert lookup(keys, "anti", equality="spark")[0] == [("US",), (None,), ("fr",)]
    # the store's own equality: US exists too
    assert lookup(keys, "semi")[0] == [("eu",), ("US",), ("us",)]


def test_an_unfit_key_fails_by_default_naming_itself() -> None:
    with pytest.raises(LookupFailedError) as failed:
        lookup(["eu", "europe"])
    assert "europe" in str(failed.value) and "four letters" in str(failed.value)


def test_an_unfit_key_is_a_miss_when_asked_and_counted() -> None:
    rows, metrics = lookup(["europe", "us"], on_unfit="miss")
    assert rows == [("europe", None), ("us", "us-1"), ("us", "us-2")]
    assert metrics.unfit_keys == 1 and metrics.failed_keys == 0
    assert lookup(["europe", "us"], "inner", on_unfit="miss")[0] == [
        ("us", "us-1"),
        ("us", "us-2"),
    ]


def test_an_unfit_key_under_on_error_column_says_why() -> None:
    rows, metrics = lookup(["europe"], on_error="column")
    assert len(rows) == 1 and rows[0][:2] == ("europe", None)
    assert "four letters" in rows[0][2] and "europe" in rows[0][2]
    assert metrics.unfit_keys == 1


def test_settle_compares_every_key_column_and_types() -> None:
    rules = KeyRules(spark_equality=True)
    asked = pa.record_batch({"a": pa.array([1, 2], pa.int64()), "b": ["x", "y"]})
    reported = pa.record_batch({"a": pa.array([1, 2, 2], pa.int32()), "b": ["x", "Y", "y"]})
    values = pa.record_batch({"v": [10, 20, 21]})
    metrics = LookupMetrics()
    settled = rules.settle(
        Matches(np.array([0, 1, 1]), values, None, reported),
        asked,
        [pa.field("v", pa.int64())],
        metrics,
    )
    assert settled.key_index.tolist() == [0, 1] and settled.values.column(0).to_pylist() == [10, 21]
    assert settled.keys is None and metrics.unequal_matches == 1
