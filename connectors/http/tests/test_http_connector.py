"""The HTTP connector against a real aiohttp server on loopback."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest
from aiohttp import web
from asynclookup_http import HttpLookupClient

from lookup_source.engine.metrics import LookupMetrics
from lookup_source.errors import LookupFailedError, OptionError
from lookup_source.service import BackgroundHttpServer, UserService, user_record
from lookup_source.spark.plan import LookupPlan
from tests.helpers import INT64, run_keys
from tests.servers import free_port

Handler = Callable[[web.Request, bytes], Awaitable[web.StreamResponse]]


@dataclass
class Seen:
    at: float
    method: str
    raw_path: str
    path: str
    headers: Any
    body: bytes


class ScriptedServer(BackgroundHttpServer):
    """Answers every request with ``self.handler`` and records what it received."""

    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self.handler: Handler = self._not_found
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        super().__init__(app)

    async def _not_found(self, request: web.Request, body: bytes) -> web.StreamResponse:
        return web.Response(status=404)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.seen.append(
            Seen(
                time.monotonic(),
                request.method,
                request.raw_path,
                request.path,
                request.headers.copy(),
                body,
            )
        )
        return await self.handler(request, body)


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as srv:
        yield srv  # type: ignore[misc]


@pytest.fixture
def srv(server: ScriptedServer) -> ScriptedServer:
    server.seen.clear()
    server.handler = server._not_found
    return server


def lookup(
    schema: str,
    keys: list[Any],
    *,
    key_type: pa.DataType = INT64,
    stats: list[LookupMetrics] | None = None,
    **options: str,
) -> list[dict[str, Any]]:
    return run_keys({"connector": "http", **options}, schema, keys, key_type=key_type, stats=stats)


FAST_RETRY = {"retry.initial-delay.ms": "10", "retry.max-delay.ms": "2000"}


def test_per_key_get_with_json_path_and_404(srv: ScriptedServer) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        user = int(request.match_info["tail"].split("/")[-1])
        if user >= 100:
            return web.json_response({"error": "nope"}, status=404)
        return web.json_response({"data": {"user": {"name": f"n{user}", "tier": user % 3}}})

    srv.handler = handler
    keys = [1, 2, 150, None, 2]
    rows = lookup(
        "id long, name string, tier int",
        keys,
        url=f"{srv.base_url}/users/{{key}}",
        **{"http.json.path": "data.user"},
    )
    assert rows == [
        {"id": 1, "name": "n1", "tier": 1},
        {"id": 2, "name": "n2", "tier": 2},
        {"id": 150, "name": None, "tier": None},
        {"id": None, "name": None, "tier": None},
        {"id": 2, "name": "n2", "tier": 2},
    ]
    assert sorted(s.path for s in srv.seen) == ["/users/1", "/users/150", "/users/2"]
    assert all(s.method == "GET" for s in srv.seen)


def test_keys_are_url_encoded(srv: ScriptedServer) -> None:
    async def echo(request: web.Request, body: bytes) -> web.StreamResponse:
        return web.json_response({"echo": request.match_info["tail"].removeprefix("k/")})

    srv.handler = echo
    odd = ["a b", "x/y", "é ü", "100%", "?q=1&r", "#frag", "{key}"]
    rows = lookup(
        "k string, echo string", odd, key_type=pa.string(), url=f"{srv.base_url}/k/{{key}}"
    )
    assert [r["echo"] for r in rows] == odd  # the server decodes exactly the key we had
    raw = {s.raw_path for s in srv.seen}
    assert "/k/a%20b" in raw and "/k/x%2Fy" in raw and "/k/100%25" in raw
    assert "/k/%C3%A9%20%C3%BC" in raw


def test_batch_post_object_and_array_answers(srv: ScriptedServer) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        keys = json.loads(body)["ids"]
        if request.path == "/object":
            return web.json_response({"result": {str(k): {"v": k * 2} for k in keys if k < 50}})
        return web.json_response({"result": [{"id": k, "v": k * 2} for k in keys if k < 50]})

    srv.handler = handler
    keys = [*list(range(0, 60)), 3, None]
    for path in ("/object", "/array"):
        srv.seen.clear()
        rows = lookup(
            "id long, v long",
            keys,
            **{
                "http.batch.url": f"{srv.base_url}{path}",
                "http.batch.keys-field": "ids",
                "http.json.path": "result",
                "batch.size": "25",
            },
        )
        assert [r["v"] for r in rows] == [k * 2 if k is not None and k < 50 else None for k in keys]
        sizes = sorted(len(json.loads(s.body)["ids"]) for s in srv.seen)
        assert sizes == [10, 25, 25]  # 60 distinct keys in requests of at most 25
        assert all(s.method == "POST" for s in srv.seen)


def test_batch_composite_keys(srv: ScriptedServer) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        keys = json.loads(body)["keys"]
        return web.json_response([{**k, "plan": f"{k['t']}-{k['u']}"} for k in keys if k["u"] < 2])

    srv.handler = handler
    rows = lookup(
        "t string, u long, plan string",
        [("a", 1), ("b", 1), ("a", 5)],
        **{"key.column": "t,u", "http.batch.url": f"{srv.base_url}/b"},
    )
    assert [r["plan"] for r in rows] == ["a-1", "b-1", None]


def test_429_honours_retry_after(srv: ScriptedServer) -> None:
    calls = 0

    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        nonlocal calls
        calls += 1
        if calls == 1:
            return web.Response(status=429, headers={"Retry-After": "1"}, text="slow down")
        return web.json_response({"v": "ok"})

    srv.handler = handler
    stats: list[LookupMetrics] = []
    rows = lookup(
        "id long, v string", [1], stats=stats, url=f"{srv.base_url}/{{key}}", **FAST_RETRY
    )
    assert rows[0]["v"] == "ok"
    assert len(srv.seen) == 2 and stats[0].retries == 1
    assert srv.seen[1].at - srv.seen[0].at >= 0.95  # waited as told, not 10 ms


def test_503_then_success_and_500_retried(srv: ScriptedServer) -> None:
    statuses = [503, 500, 200]

    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        status = statuses.pop(0)
        if status != 200:
            return web.Response(status=status, text="busy")
        return web.json_response({"v": "ok"})

    srv.handler = handler
    rows = lookup("id long, v string", [1], url=f"{srv.base_url}/{{key}}", **FAST_RETRY)
    assert rows[0]["v"] == "ok" and len(srv.seen) == 3


@pytest.mark.parametrize("status", [400, 401, 403, 422])
def test_other_4xx_are_not_retried(srv: ScriptedServer, status: int) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return web.Response(status=status, text="denied")

    srv.handler = handler
    with pytest.raises(LookupFailedError, match=f"HTTP {status} from GET") as info:
        lookup("id long, v string", [7], url=f"{srv.base_url}/u/{{key}}", **FAST_RETRY)
    assert info.value.attempts == 1 and len(srv.seen) == 1
    assert "denied" in str(info.value)


def test_slow_endpoint_hits_the_timeout(srv: ScriptedServer) -> None:
    import asyncio

    async def slow(request: web.Request, body: bytes) -> web.StreamResponse:
        await asyncio.sleep(1.0)
        return web.json_response({"v": "late"})

    srv.handler = slow
    options = {
        "url": f"{srv.base_url}/{{key}}",
        "timeout.ms": "100",
        "retry.max-attempts": "2",
        **FAST_RETRY,
    }
    with pytest.raises(LookupFailedError, match=r"no answer within timeout.ms=100") as info:
        lookup("id long, v string", [1], **options)
    assert info.value.attempts == 2  # each cut at 100 ms (the answer would take 1 s)
    rows = lookup("id long, v string", [1, 2], **options, **{"on.error": "null"})
    assert rows == [{"id": 1, "v": None}, {"id": 2, "v": None}]
    rows = lookup("id long, v string", [1], **options, **{"on.error": "column"})
    assert "LookupTimeoutError: no answer within timeout.ms=100" in rows[0]["_lookup_error"]


def test_invalid_json_names_the_key_with_an_excerpt(srv: ScriptedServer) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        if request.path.endswith("/2"):
            return web.Response(text="<html>oops</html>", content_type="text/html")
        if request.path.endswith("/3"):
            return web.json_response([1, 2])
        return web.json_response({"v": "fine"})

    srv.handler = handler
    rows = lookup(
        "id long, v string", [1, 2, 3], url=f"{srv.base_url}/{{key}}", **{"on.error": "column"}
    )
    assert rows[0]["v"] == "fine" and rows[0]["_lookup_error"] is None
    assert rows[1]["_lookup_error"] == (
        "key 2: the response is not valid JSON: '<html>oops</html>'"
    )
    assert rows[2]["_lookup_error"] == (
        "key 3: the response holds a JSON array with a number in it; expected an object or an "
        "array of objects (one per match)"
    )


def test_a_json_array_at_the_path_is_several_matches(srv: ScriptedServer) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        user = int(request.path.rsplit("/", 1)[1])
        orders = {
            1: [{"item": "pen"}, {"item": "ink"}, {"item": "pad"}],
            2: [],
            3: {"item": "one"},
            4: "text",
        }
        return web.json_response({"data": {"orders": orders[user]}})

    srv.handler = handler
    options = {"url": f"{srv.base_url}/{{key}}", "http.json.path": "data.orders"}
    rows = lookup("uid long, item string", [1, 2, 3, 4], **options, **{"on.error": "column"})
    assert [(r["uid"], r["item"]) for r in rows] == [
        (1, "pen"),
        (1, "ink"),
        (1, "pad"),
        (2, None),
        (3, "one"),
        (4, None),
    ]
    assert "key 4: the response at data.orders holds a JSON string" in rows[-1]["_lookup_error"]
    nulls = run_keys(
        {"connector": "http", **options, "on.error": "null"}, "uid long, item string", [1, 2, 4]
    )
    assert [r["item"] for r in nulls] == ["pen", "ink", "pad", None, None]


def test_headers_plain_and_from_the_environment(
    srv: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return web.json_response({"v": "ok"})

    srv.handler = handler
    monkeypatch.setenv("DEMO_API_TOKEN", "Bearer t0ken-xyz")
    options = {
        "url": f"{srv.base_url}/{{key}}",
        "http.header.X-Client": "asynclookup",
        "http.header.Authorization.env": "DEMO_API_TOKEN",
    }
    plan = LookupPlan.build({"connector": "http", **options}, "id long, v string")
    assert "t0ken" not in repr(plan.options)  # the plan holds the variable's name only
    lookup("id long, v string", [1], **options)
    headers = srv.seen[0].headers
    assert headers["Authorization"] == "Bearer t0ken-xyz"
    assert headers["X-Client"] == "asynclookup"
    monkeypatch.delenv("DEMO_API_TOKEN")
    with pytest.raises(Exception, match=r"DEMO_API_TOKEN.*not set on this executor"):
        lookup("id long, v string", [1], **options)


def test_rate_limit_spaces_requests(srv: ScriptedServer) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return web.json_response({"v": "ok"})

    srv.handler = handler
    lookup(
        "id long, v string",
        list(range(16)),
        url=f"{srv.base_url}/{{key}}",
        **{"rate.limit": "20", "capacity": "16"},
    )
    times = sorted(s.at for s in srv.seen)
    assert len(times) == 16
    assert times[-1] - times[0] >= 15 / 20 * 0.95  # 16 requests at 20/s span >= 0.75 s
    for start in times:  # 5 in any quarter second; arrivals on a loaded machine may bunch by 2
        assert sum(1 for t in times if start <= t < start + 0.25) <= 5 + 2


def test_unreachable_server_names_the_address() -> None:
    port = free_port()
    with pytest.raises(LookupFailedError) as info:
        lookup("id long, v string", [1, 2], url=f"http://127.0.0.1:{port}/u/{{key}}", **FAST_RETRY)
    assert f"http lookup at http://127.0.0.1:{port}/u/{{key}} failed" in str(info.value)
    assert info.value.attempts == 3


def test_demo_service_in_both_styles() -> None:
    with UserService(users=500, latency_ms=2) as service:
        keys = [*range(0, 520, 3), None]
        per_key = lookup(
            "user_id long, name string, tier string, score double",
            keys,
            url=service.url,
            capacity="50",
        )
        batch = lookup(
            "user_id long, name string, tier string, score double",
            keys,
            **{"http.batch.url": service.batch_url, "batch.size": "40"},
        )
    for rows in (per_key, batch):
        for row in rows:
            expected = (
                user_record(row["user_id"])
                if row["user_id"] is not None and row["user_id"] < 500
                else None
            )
            assert row["name"] == (expected["name"] if expected else None)
            assert row["tier"] == (expected["tier"] if expected else None)
            assert row["score"] == (expected["score"] if expected else None)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"url": "http://h/{key}", "batch.size": "10"}, "option 'batch.size': is 10, but per-key"),
        ({"url": "ftp://h/{key}"}, "option 'url': must start with http:// or https://"),
        ({"url": "http://h/users"}, "option 'url': 'http://h/users' has no placeholder"),
        ({"url": "http://h/{user}"}, "uses placeholder {user}"),
        ({}, "option 'url': is required for connector http"),
        ({"url": "http://h/{key}", "http.tls.verify": "maybe"}, "option 'http.tls.verify'"),
        ({"url": "http://h/{key}", "rate.limit": "-1"}, "option 'rate.limit'"),
        ({"url": "http://h/{key}", "http.jsonpath": "a"}, "did you mean 'http.json.path'"),
    ],
)
def test_configuration_errors(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message.replace("{", r"\{").replace("}", r"\}")):
        LookupPlan.build({"connector": "http", **options}, "id long, v string")


def test_a_ten_megabyte_answer(srv: ScriptedServer) -> None:
    blob = "y" * 10_000_000

    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return web.json_response({"blob": blob})

    srv.handler = handler
    url = f"{srv.base_url}/{{key}}"
    rows = lookup("id long, blob string", [1], url=url, **{"http.max-response-bytes": "20000000"})
    assert rows[0]["blob"] == blob
    # beyond the default limit (8 MiB): an error of its key, not retried
    with pytest.raises(LookupFailedError, match="larger than http.max-response-bytes=8,388,608"):
        lookup("id long, blob string", [1], url=url)


class ReferenceHttp(HttpLookupClient):
    """The HTTP connector decoding batch answers value by value: the reference path."""

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self._batch_decode = None


BATCH_SCHEMA = (
    "id long, name string, tier int, score double, active boolean, day date, at timestamp, "
    "tags array<string>, amount decimal(8,2)"
)


def batch_record(k: int) -> dict[str, Any]:
    return {
        "id": k,
        "name": ["Ada", "ünï 😀", "", None][k % 4],
        "tier": [1, None, -3, 2**31 - 1][k % 4],
        "score": [0.5, 2, None, -1e10][k % 4],
        "active": [True, None, False, True][k % 4],
        "day": ["2024-02-29", None, "1999-12-31", "2000-01-01"][k % 4],
        "at": ["2024-05-01T10:00:00", "2024-05-01T10:00:00+02:00", None, "2024-05-01 01:02:03"][
            k % 4
        ],
        "tags": [["a"], [], None, ["b", None]][k % 4],
        "amount": [1.5, "2.25", None, 3][k % 4],
        "extra": {"ignored": True},
    }


@pytest.mark.parametrize("shape", ["object", "array"])
@pytest.mark.parametrize("malformed", [False, True])
def test_batch_columnar_path_equals_the_reference_path(
    srv: ScriptedServer, shape: str, malformed: bool
) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        keys = json.loads(body)["keys"]
        records = {k: batch_record(k) for k in keys if k % 7 != 0}  # every 7th key is missing
        if malformed and 5 in records:
            records[5]["tier"] = "high"  # a value that does not fit
        if shape == "object":
            answer: Any = {str(k): r for k, r in records.items()}
            answer["999999"] = batch_record(1)  # a key nobody asked
        else:
            answer = [*records.values(), batch_record(999999)]
            if 3 in records:
                answer.append({**records[3], "name": "second match"})  # one key, two records
        return web.json_response({"data": {"result": answer}})

    srv.handler = handler
    options = {
        "http.batch.url": f"{srv.base_url}/batch",
        "http.json.path": "data.result",
        "batch.size": "10",
        "on.error": "column",
    }
    keys = [*range(40), None, 3]
    fast = run_keys({"connector": "http", **options}, BATCH_SCHEMA, keys)
    slow = run_keys(
        {"connector": "http", **options}, BATCH_SCHEMA, keys, client_factory=ReferenceHttp
    )
    assert fast == slow
    by_key: dict[Any, list[dict[str, Any]]] = {}
    for row in fast:
        by_key.setdefault(row["id"], []).append(row)
    assert by_key[0][0]["name"] is None and by_key[7][0]["name"] is None  # missing
    assert by_key[1][0]["name"] == "ünï 😀" and by_key[1][0]["score"] == 2.0
    if malformed:
        assert by_key[5][0]["_lookup_error"].startswith("key 5: column 'tier' expects int")
    if shape == "array":  # a key with two records gives two rows, for each row asking it
        assert [r["name"] for r in by_key[3]] == [None, "second match", None, "second match"]


def test_a_well_formed_batch_answer_takes_the_columnar_path(srv: ScriptedServer) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return web.json_response({str(k): batch_record(k) for k in json.loads(body)["keys"]})

    srv.handler = handler

    class NoReference(HttpLookupClient):
        def _match_batch(self, *args: Any) -> Any:
            raise AssertionError("a well-formed answer must not need the reference path")

    rows = run_keys(
        {"connector": "http", "http.batch.url": f"{srv.base_url}/b"},
        BATCH_SCHEMA,
        [1, 2, 3],
        client_factory=NoReference,
    )
    assert [r["tier"] for r in rows] == [None, -3, 2**31 - 1]


def test_https_verifies_certificates_unless_told_not_to(tmp_path: Any) -> None:
    import shutil
    import ssl
    import subprocess

    from aiohttp import web

    from lookup_source.errors import LookupFailedError
    from lookup_source.service import BackgroundHttpServer

    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a self-signed certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)

    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"v": "secure"})

    app = web.Application()
    app.router.add_get("/{key}", handler)
    server = BackgroundHttpServer(app)
    server.ssl_context = context  # type: ignore[attr-defined]
    with server:
        url = f"https://127.0.0.1:{server.port}/{{key}}"
        with pytest.raises(LookupFailedError, match="(?i)certificate") as info:
            lookup("id long, v string", [1], url=url, **{"retry.initial-delay.ms": "10"})
        assert info.value.attempts == 1  # a certificate failure is not retried
        rows = lookup("id long, v string", [1], url=url, **{"http.tls.verify": "false"})
        assert rows == [{"id": 1, "v": "secure"}]


def test_the_deadline_ends_retries_against_a_slow_server(srv: ScriptedServer) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        await asyncio.sleep(2.5)
        return web.json_response({"v": "late"})

    srv.handler = handler
    # times of a second (an attempt, a pause, a deadline of three): a busy machine's late
    # timer does not change how many attempts fit
    options = {
        "url": f"{srv.base_url}/{{key}}",
        "timeout.ms": "1000",
        "retry.max-attempts": "10",  # ~10 x 1.5 s without the deadline
        "retry.backoff": "fixed",
        "retry.initial-delay.ms": "500",
        "deadline.ms": "3000",
    }
    with pytest.raises(LookupFailedError, match=r"deadline\.ms=3000 \((2|3) attempts\)"):
        lookup("id long, v string", [1], **options)
    assert 2 <= len(srv.seen) <= 3  # the server saw each attempt; none after the deadline


def test_an_answer_without_the_json_path_is_an_error_not_a_miss(srv: ScriptedServer) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        user = int(request.path.rsplit("/", 1)[1])
        if user == 1:
            return web.json_response({"data": {"user": {"name": "Ada"}}})
        if user == 2:
            return web.json_response({"data": {"user": None}})  # says: no such user
        if user == 3:
            return web.json_response({"data": {"customer": {"name": "typo?"}}})
        if user == 4:
            return web.json_response({"data": "maintenance"})
        return web.json_response({"error": "no"}, status=404)

    srv.handler = handler
    options = {"url": f"{srv.base_url}/{{key}}", "http.json.path": "data.user"}
    rows = lookup("id long, name string", [1, 2, 3, 4, 5], **options, **{"on.error": "column"})
    assert [(r["name"], r["_lookup_error"]) for r in rows[:2]] == [("Ada", None), (None, None)]
    assert rows[2]["name"] is None and rows[2]["_lookup_error"] == (
        "key 3: the response has no 'user' at http.json.path=data.user (data has customer; "
        'check the option against an answer): \'{"data": {"customer": {"name": "typo?"}}}\''
    )
    assert (
        "key 4: the response has no 'user' at http.json.path=data.user (data is a JSON "
        in (rows[3]["_lookup_error"])
    )
    assert rows[4]["_lookup_error"] is None  # a 404 stays a miss
    with pytest.raises(LookupFailedError, match=r"has no 'user' at http.json.path=data.user"):
        lookup("id long, name string", [3], **options)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ({"results": {"1": {"name": "a"}}}, "has no 'data' at http.json.path=data.users"),
        ({"data": {"items": []}}, "has no 'users' at http.json.path=data.users (data has items"),
        ({"data": {"users": [{"name": "no key"}]}}, "has no id: the records of an array answer"),
        ({"data": {"users": [{"id": 1, "name": "a"}, 7]}}, "holds a JSON number in its array"),
    ],
)
def test_a_batch_answer_of_another_shape_is_an_error(
    srv: ScriptedServer, answer: Any, message: str
) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return web.json_response(answer)

    srv.handler = handler
    options = {
        "http.batch.url": f"{srv.base_url}/batch",
        "http.json.path": "data.users",
        "on.error": "column",
    }
    rows = lookup("id long, name string", [1, 2], **options)
    assert [r["name"] for r in rows] == [None, None]
    assert all(message in r["_lookup_error"] for r in rows)
    assert len(srv.seen) == 1  # a shape that does not match is not retried


def test_a_batch_answer_that_omits_a_key_is_a_miss(srv: ScriptedServer) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return web.json_response({"data": {"users": [{"id": 1, "name": "a"}]}})

    srv.handler = handler
    options = {"http.batch.url": f"{srv.base_url}/batch", "http.json.path": "data.users"}
    rows = lookup("id long, name string", [1, 2], **options, **{"on.error": "column"})
    assert [(r["name"], r["_lookup_error"]) for r in rows] == [("a", None), (None, None)]


def test_the_demo_service_refuses_a_batch_without_its_keys_field() -> None:
    with UserService(users=10, latency_ms=0) as service:
        options = {
            "http.batch.url": service.batch_url,
            "http.batch.keys-field": "ids",  # the demo service reads "keys"
        }
        with pytest.raises(LookupFailedError, match=r"HTTP 400 .*expected a JSON object"):
            lookup("id long, name string", [1, 2], **options)


def test_a_batch_answer_is_matched_to_its_keys_by_their_text() -> None:
    """Answers name keys by text: integer, string and date keys, a null key (never matched,
    even by a record named "None"), a key asked twice (its first row), records for keys
    nobody asked (ignored), in any order, as an object and as an array of records."""
    import datetime

    from asynclookup_http.answers import BatchAnswers

    fields = [pa.field("name", pa.string())]
    answers = BatchAnswers(fields, ("k",), ())
    cases: list[tuple[pa.Array, dict[str, str]]] = [
        (pa.array([7, None, 42, 7, -3], pa.int64()), {"-3": "m", "42": "f", "7": "s", "9": "x"}),
        (pa.array(["a b", None, "None", "ü"]), {"ü": "u", "None": "n", "a b": "ab", "zz": "x"}),
        (
            pa.array([datetime.date(2024, 1, 2), None], pa.date32()),
            {"2024-01-02": "d", "None": "x"},
        ),
    ]
    for column, named in cases:
        keys = pa.RecordBatch.from_arrays([column], names=["k"])
        body = {text: {"name": value} for text, value in named.items()}
        array = [{"k": text, "name": value} for text, value in named.items()]
        for answer in (body, array):
            matches = answers.matches(keys, json.dumps(answer).encode(), "POST /batch")
            got = {
                int(row): value
                for row, value in zip(matches.key_index, matches.values.column(0).to_pylist())
            }
            asked = column.to_pylist()
            texts = [
                None if v is None else (str(v) if not isinstance(v, str) else v) for v in asked
            ]
            expected = {}
            for row, text in enumerate(texts):
                if text is not None and text in named and text not in texts[:row]:
                    expected[row] = named[text]
            if column.type == pa.date32():
                expected = {0: "d"}
            assert got == expected, (column.type, answer)


def test_a_composite_key_with_a_null_part_matches_no_record() -> None:
    import datetime

    from asynclookup_http.answers import BatchAnswers

    answers = BatchAnswers([pa.field("name", pa.string())], ("t", "d"), ())
    keys = pa.RecordBatch.from_arrays(
        [pa.array([1, 1], pa.int64()), pa.array([datetime.date(2024, 1, 2), None], pa.date32())],
        names=["t", "d"],
    )
    body = [{"t": 1, "d": "2024-01-02", "name": "a"}, {"t": 1, "d": "None", "name": "x"}]
    matches = answers.matches(keys, json.dumps(body).encode(), "POST /batch")
    assert matches.key_index.tolist() == [0]
    assert matches.values.column(0).to_pylist() == ["a"]
