"""Bad input, generated (hypothesis), against a real HTTP server: odd keys and malformed answers
give the right value or the documented per-key error, never a wrong value, a value on another
key's row, a hang or a crash."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, unquote

import pyarrow as pa
import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from lookup_source.service import BackgroundHttpServer
from tests.generated import ERROR, SETTINGS, expected_outcome, good, malformed, texts
from tests.helpers import run_keys


class Store:
    """GET /<run>/<key> answers the body stored for that key (404 if none)."""

    def __init__(self) -> None:
        self.bodies: dict[str, bytes] = {}
        app = web.Application()
        app.router.add_get(r"/{tail:[\s\S]*}", self.get)  # keys may hold line breaks
        self.server = BackgroundHttpServer(app)

    async def get(self, request: web.Request) -> web.Response:
        body = self.bodies.get(unquote(request.raw_path))
        if body is None:
            return web.Response(status=404)
        return web.Response(body=body, content_type="application/json")


@pytest.fixture(scope="module")
def store() -> Iterator[Store]:
    served = Store()
    with served.server:
        yield served


def _options(store: Store, run: int) -> dict[str, str]:
    return {
        "connector": "http",
        "url": f"{store.server.base_url}/{run}/{{key}}",
        "on.error": "column",
        "capacity": "20",
    }


RUNS = iter(range(10**9))


@SETTINGS
@given(keys=st.lists(texts | st.none(), max_size=20), stored=st.data())
def test_odd_text_keys_find_their_own_values(store: Store, keys: list[Any], stored: Any) -> None:
    run = next(RUNS)
    present = {k for k in keys if k is not None and stored.draw(st.booleans())}
    for key in present:
        store.bodies[f"/{run}/{key}"] = json.dumps({"echo": key}).encode()
    rows = run_keys(_options(store, run), "k string, echo string", keys, key_type=pa.string())
    assert [r["k"] for r in rows] == keys
    for row in rows:
        if row["k"] in ("", ".", ".."):  # it would reach another resource: its own error
            assert row["echo"] is None and "cannot be a path segment" in row["_lookup_error"]
            continue
        if row["k"] is not None and len(quote(row["k"].encode())) > 8000:
            # longer than the server takes in a URL: its 400, as an error of that key
            assert row["echo"] is None and "HTTP 400" in row["_lookup_error"]
            continue
        assert row["_lookup_error"] is None
        assert row["echo"] == (row["k"] if row["k"] in present else None)


@SETTINGS
@given(values=st.lists(st.one_of(good, malformed), min_size=1, max_size=20))
def test_malformed_answers_are_errors_of_their_own_key(store: Store, values: list[bytes]) -> None:
    run = next(RUNS)
    for key, value in enumerate(values):
        store.bodies[f"/{run}/{key}"] = value
    keys = list(range(len(values)))
    rows = run_keys(_options(store, run), "k long, n long, name string", keys)
    assert [r["k"] for r in rows] == keys
    for key, (value, row) in enumerate(zip(values, rows)):
        outcome, n, name = expected_outcome(value)
        assert (row["n"], row["name"]) == (n, name), (value[:80], row)
        if outcome == ERROR:
            assert (row["_lookup_error"] or "").startswith(f"key {key}:"), (value[:80], row)
        else:
            assert row["_lookup_error"] is None, (value[:80], row)
