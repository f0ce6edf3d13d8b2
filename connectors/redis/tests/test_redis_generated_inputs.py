"""Bad input, generated (hypothesis), against the real Redis: odd keys and malformed stored
values give the right value or the documented per-key error, never a wrong value, a value on
another key's row, a hang or a crash."""

from __future__ import annotations

import json
import math
import uuid
from typing import Any

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from tests.generated import ERROR, SETTINGS, expected_outcome, good, malformed, texts
from tests.helpers import run_keys

integers = st.integers(min_value=-(2**63), max_value=2**63 - 1)
doubles = st.floats(allow_nan=True, allow_infinity=True)


def _options(redis_srv: Any, run: str) -> dict[str, str]:
    return {
        "connector": "redis",
        "url": redis_srv.url,
        "redis.key.pattern": f"{run}:{{key}}",
        "on.error": "column",
    }


def _redis_key(run: str, key: Any) -> str:
    """The key the connector writes for ``key`` (what its documentation says)."""
    from lookup_source.connector_api import key_text

    return f"{run}:{key_text(key)}"


@SETTINGS
@given(keys=st.lists(texts | st.none(), max_size=30), stored=st.data())
def test_odd_text_keys_find_their_own_values(
    redis_srv: Any, redis_db: Any, keys: list[Any], stored: Any
) -> None:
    run = uuid.uuid4().hex[:8]
    present = {k for k in keys if k is not None and stored.draw(st.booleans())}
    for key in present:
        redis_db.set(_redis_key(run, key), json.dumps({"echo": key}))
    rows = run_keys(_options(redis_srv, run), "k string, echo string", keys, key_type=pa.string())
    assert [r["k"] for r in rows] == keys  # every row, in order
    for row in rows:
        assert row["_lookup_error"] is None
        assert row["echo"] == (row["k"] if row["k"] in present else None)


@SETTINGS
@given(keys=st.lists(integers | st.none(), max_size=30) | st.lists(doubles, max_size=20))
def test_extreme_numbers_as_keys(redis_srv: Any, redis_db: Any, keys: list[Any]) -> None:
    run = uuid.uuid4().hex[:8]
    doubles_asked = any(isinstance(k, float) for k in keys)
    for key in keys:
        if key is not None:
            redis_db.set(_redis_key(run, key), json.dumps({"echo": repr(key)}))
    key_type = pa.float64() if doubles_asked else pa.int64()
    schema = f"k {'double' if doubles_asked else 'long'}, echo string"
    rows = run_keys(_options(redis_srv, run), schema, keys, key_type=key_type)
    assert len(rows) == len(keys)
    for asked, row in zip(keys, rows):
        got = row["k"]
        assert (
            (got is None and asked is None)
            or got == asked
            or (isinstance(got, float) and math.isnan(got) and math.isnan(asked))
        )
        if asked is not None and not (isinstance(asked, float) and math.isnan(asked)):
            assert row["echo"] == repr(asked)


@SETTINGS
@given(values=st.lists(st.one_of(good, malformed), min_size=1, max_size=25))
def test_malformed_stored_values_are_errors_of_their_own_key(
    redis_srv: Any, redis_db: Any, values: list[bytes]
) -> None:
    run = uuid.uuid4().hex[:8]
    for key, value in enumerate(values):
        redis_db.set(f"{run}:{key}", value)
    keys = list(range(len(values)))
    rows = run_keys(_options(redis_srv, run), "k long, n long, name string", keys)
    assert [r["k"] for r in rows] == keys  # no row lost, none invented, in order
    for key, (value, row) in enumerate(zip(values, rows)):
        outcome, n, name = expected_outcome(value)
        assert (row["n"], row["name"]) == (n, name)  # never a value from elsewhere
        if outcome == ERROR:  # this key's error, naming it
            assert (row["_lookup_error"] or "").startswith(f"key {key}:"), (value, row)
        else:
            assert row["_lookup_error"] is None, (value, row)


@SETTINGS
@given(
    keys=st.lists(st.tuples(texts | st.none(), integers | st.none()), min_size=1, max_size=20),
    stored=st.data(),
)
def test_composite_keys_with_null_parts(
    redis_srv: Any, redis_db: Any, keys: list[tuple[Any, Any]], stored: Any
) -> None:
    """A composite key with a null part is never asked (its row stays, with nulls); the others
    find their own values."""
    run = uuid.uuid4().hex[:8]
    from lookup_source.connector_api import key_text

    complete = {k for k in keys if None not in k}
    present = {k for k in complete if stored.draw(st.booleans())}
    for tenant, user in present:
        redis_db.set(
            f"{run}:{key_text(tenant)}:{key_text(user)}", json.dumps({"echo": repr((tenant, user))})
        )
    options = {
        **_options(redis_srv, run),
        "key.column": "tenant,user_id",
        "redis.key.pattern": f"{run}:{{tenant}}:{{user_id}}",
    }
    rows = run_keys(options, "tenant string, user_id long, echo string", [list(k) for k in keys])
    assert [(r["tenant"], r["user_id"]) for r in rows] == keys
    for row in rows:
        key = (row["tenant"], row["user_id"])
        assert row["_lookup_error"] is None
        assert row["echo"] == (repr(key) if key in present else None)
