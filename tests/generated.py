"""Generated bad input shared by the connectors' property tests (hypothesis): stored values,
malformed in every way the connectors document, with the outcome each must have."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

SETTINGS = settings(
    max_examples=40,
    derandomize=True,  # the same examples on every CI run; run with a seed to explore
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

texts = st.text(max_size=40) | st.sampled_from(
    ["", " ", ".", "..", "a:b", "{key}", "é" * 3000, "\x00"]
)
"""Key values: unicode, empty, dots, separators, braces, huge, NUL."""


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


VALUE = "value"
NULL = "null"
ERROR = "error"

SAMPLES: dict[bytes, str] = {
    b'{"n": 1, "name": "trunc': ERROR,  # truncated JSON
    b'{"n": "one", "name": "x"}': ERROR,  # a string for an int
    b'{"n": 1.5, "name": "x"}': ERROR,  # a fraction for an int
    b'{"n": 99999999999999999999999, "name": "x"}': ERROR,  # beyond a long
    b"[1, 2, 3]": ERROR,  # an array of numbers, not of objects
    b'"just text"': ERROR,
    b"": ERROR,
    b"\xff\xfe not utf-8": ERROR,
    b'{"n": 1, "name": {"nested": [1, 2]}}': ERROR,  # an object for a string
    b'{"n": NaN, "name": "x"}': ERROR,
    b"null": NULL,  # JSON null: no record
    # deeper than the JSON decoders go (msgspec's and Python's recursion limits; Python 3.13
    # decodes 2,000 levels, 3.10 fewer than 1,000): an error
    ('{"n": 1, "name": "x", "deep": ' + _deep(20_000) + "}").encode(): ERROR,
    # extra fields are ignored, however deep (within the limit) or big
    ('{"n": 1, "name": "x", "deep": ' + _deep(300) + "}").encode(): VALUE,
    ('{"n": 1, "name": "x", "big": [' + ",".join(["0"] * 100_000) + "]}").encode(): VALUE,
}
malformed = st.sampled_from(sorted(SAMPLES))
good = st.builds(
    lambda n, name: json.dumps({"n": n, "name": name}).encode(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.text(max_size=20) | st.none(),
)


def expected_outcome(value: bytes) -> tuple[str, Any, Any]:
    """(outcome, n, name) of a stored value under schema ``n long, name string``."""
    outcome = SAMPLES.get(value)
    if outcome is None:  # a good record
        record = json.loads(value)
        return VALUE, record["n"], record["name"]
    return (outcome, 1, "x") if outcome == VALUE else (outcome, None, None)
