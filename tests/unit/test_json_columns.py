"""The native JSON decoder never gives a value the per-value reference path would not.

Whenever :class:`JsonColumns` accepts a request's documents, its columns must equal those of
the reference (``json.loads`` then :func:`to_arrow_column`, the path that names what does not
fit); when it refuses, the connector falls back to the reference, so both paths agree always.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lookup_source.connector_api.json_columns import DECODE_ERRORS, JsonColumns
from lookup_source.connector_api.values import to_arrow_column
from tests.sizes import sized

FIELDS = [
    pa.field("s", pa.string()),
    pa.field("i", pa.int64()),
    pa.field("i32", pa.int32()),
    pa.field("i8", pa.int8()),
    pa.field("f", pa.float64()),
    pa.field("f32", pa.float32()),
    pa.field("b", pa.bool_()),
    pa.field("bin", pa.binary()),
    pa.field("d", pa.date32()),
    pa.field("ts", pa.timestamp("us", tz="UTC")),
    pa.field("ntz", pa.timestamp("us")),
    pa.field("dec", pa.decimal128(10, 2)),
    pa.field("arr", pa.list_(pa.int64())),
    pa.field("obj", pa.struct([("a", pa.string()), ("n", pa.int32())])),
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=-300, max_value=300),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, -0.0, 1.0, 1.5, 2.0**53, 1e300, 12.345]),
    st.text(max_size=8),
    st.sampled_from(
        [
            "2024-02-29",
            "2024-02-30",
            "2024-05-01T10:00:00",
            "2024-05-01T10:00:00+02:00",
            "2024-05-01 10:00:00.123456",
            "2024-05-01T10:00:00Z",
            "1.25",
            "7",
            "true",
            "\u00e9\u6f22\U0001f600",
        ]
    ),
)
values = st.one_of(
    scalars,
    st.lists(st.one_of(st.none(), st.integers(-5, 5), st.text(max_size=2)), max_size=3),
    st.fixed_dictionaries({}, optional={"a": scalars, "n": scalars}),
)
documents = st.dictionaries(st.sampled_from([f.name for f in FIELDS] + ["extra"]), values)


def reference(texts: list[bytes]) -> list[list[Any]]:
    records = [json.loads(t) for t in texts]
    columns = []
    for field in FIELDS:
        array, errors = to_arrow_column(
            [r.get(field.name) for r in records], field.type, column="c"
        )
        if errors:
            return []  # the reference reports a value that does not fit: the fast path must too
        columns.append(array.to_pylist())
    return columns


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (
            a == b and math.copysign(1, a) == math.copysign(1, b)
        )
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@settings(
    max_examples=sized(ci=300, full=1000),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.lists(documents, min_size=1, max_size=5))
def test_fast_path_values_equal_the_reference(docs: list[dict[str, Any]]) -> None:
    texts = [json.dumps(d).encode() for d in docs]
    decoder = JsonColumns(FIELDS)
    try:
        fast = decoder.decode(texts)
    except DECODE_ERRORS:
        return  # the connector falls back to the reference path for this request
    expected = reference(texts)
    assert expected, f"the fast path accepted what the reference rejects: {texts}"
    for field, column in zip(FIELDS, expected):
        got = fast.column(field.name).to_pylist()
        assert same(got, column), (field.name, texts, got, column)


@pytest.mark.parametrize(
    "text",
    [
        b'{"i": 1.0}',
        b'{"i": true}',
        b'{"s": 7}',
        b'{"f": NaN}',
        b'{"f": 1e400}',
        b'{"i8": 300}',
        b"[1, 2]",
        b'"text"',
        b"",
        b'{"s": "a"} {"s": "b"}',
        b'{"s": "\\ud800"}',
        b'{"d": "soon"}',
        b'{"b": 1}',
    ],
)
def test_documents_the_fast_path_refuses(text: bytes) -> None:
    with pytest.raises(DECODE_ERRORS):
        JsonColumns(FIELDS).decode([text])


def test_duplicate_fields_take_the_last_value_like_json_loads() -> None:
    out = JsonColumns(FIELDS).decode([b'{"s": "first", "s": "last"}'])
    assert out.column("s").to_pylist() == [json.loads('{"s": "first", "s": "last"}')["s"]]


@pytest.mark.parametrize("big", [2**63, -(2**63) - 1, 2**70])
def test_integers_beyond_64_bits_go_to_the_reference_path(big: int) -> None:
    with pytest.raises(DECODE_ERRORS):
        JsonColumns(FIELDS).decode([json.dumps({"i": big}).encode()])


@pytest.mark.parametrize(("field", "big"), [("f32", 16_777_217), ("f", 2**53 + 1)])
def test_integers_a_float_column_cannot_hold_exactly_are_not_rounded(field: str, big: int) -> None:
    with pytest.raises(DECODE_ERRORS):
        JsonColumns(FIELDS).decode([json.dumps({field: big}).encode()])
    assert reference([json.dumps({field: big}).encode()]) == []  # the reference refuses too
