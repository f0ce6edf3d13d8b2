"""What a hostile or careless service can do to a kept HTTP session, each tried against real
aiohttp servers on loopback: redirects to another server that records what it receives,
compressed bombs, cookies set by one key's answer, keys that would change the URL's path, and
secrets in URLs reaching a message."""

from __future__ import annotations

import gzip
import socket
import traceback
import tracemalloc
import zlib
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from aiohttp import web

from lookup_source.errors import LookupFailedError
from lookup_source.service import BackgroundHttpServer
from lookup_source.testing.contract_network import RawServer, read_request
from tests.helpers import INT64, run_keys

SECRET = "S3cr3t-api-key"


class Recorder(BackgroundHttpServer):
    """Answers with ``self.respond(request)`` and records each request's path and headers."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, dict[str, str]]] = []
        self.respond: Any = lambda request: web.json_response({"name": "from elsewhere"})
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        super().__init__(app)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        self.seen.append(
            (request.method, request.raw_path, {k.lower(): v for k, v in request.headers.items()})
        )
        answer = self.respond(request)
        return await answer if hasattr(answer, "__await__") else answer


@pytest.fixture
def service() -> Iterator[Recorder]:
    with Recorder() as server:
        yield server  # type: ignore[misc]


@pytest.fixture
def elsewhere() -> Iterator[Recorder]:
    with Recorder() as server:
        yield server  # type: ignore[misc]


def lookup(
    keys: list[Any], *, schema: str = "id long, name string", key_type: Any = INT64, **options: str
) -> list[dict[str, Any]]:
    given = {"connector": "http", "on.error": "column", "retry.max-attempts": "1", **options}
    return run_keys(given, schema, keys, key_type=key_type)


def _secret_header() -> dict[str, str]:
    return {"http.header.X-Api-Key": SECRET}


# -- redirects ------------------------------------------------------------------------------


def test_a_redirect_to_another_server_is_an_error_and_carries_nothing_there(
    service: Recorder, elsewhere: Recorder
) -> None:
    target = f"{elsewhere.base_url}/users/1?api_key={SECRET}"
    service.respond = lambda request: web.Response(status=302, headers={"Location": target})
    for redirects in ("none", "same-origin"):
        rows = lookup(
            [1],
            url=f"{service.base_url}/users/{{key}}",
            **{**_secret_header(), "http.redirects": redirects},
        )
        error = rows[0]["_lookup_error"]
        assert rows[0]["name"] is None and error is not None
        assert "HTTP 302 redirect from GET" in error and elsewhere.base_url in error
        assert SECRET not in error and "api_key=***" in error  # the Location, redacted
    assert elsewhere.seen == []  # the other server received nothing, and no secret
    assert service.seen and all(h.get("x-api-key") == SECRET for _, _, h in service.seen), (
        service.seen
    )


def test_same_origin_redirects_are_followed_when_asked(service: Recorder) -> None:
    def respond(request: web.Request) -> web.StreamResponse:
        if request.path.startswith("/old/"):
            user = request.path.rsplit("/", 1)[1]
            return web.Response(status=301, headers={"Location": f"/users/{user}"})
        return web.json_response({"name": f"user {request.path.rsplit('/', 1)[1]}"})

    service.respond = respond
    url = f"{service.base_url}/old/{{key}}"
    followed = lookup([1, 2], url=url, **{"http.redirects": "same-origin"})
    assert [(r["name"], r["_lookup_error"]) for r in followed] == [
        ("user 1", None),
        ("user 2", None),
    ]
    refused = lookup([3], url=url)  # the default: not followed
    assert (
        refused[0]["name"] is None and "redirects are not followed" in refused[0]["_lookup_error"]
    )


def test_a_batch_post_follows_only_307_and_308_on_its_origin(service: Recorder) -> None:
    def respond(request: web.Request) -> web.StreamResponse:
        if request.path == "/moved-307":
            return web.Response(status=307, headers={"Location": "/batch"})
        if request.path == "/moved-302":
            return web.Response(status=302, headers={"Location": "/batch"})
        return web.json_response({"1": {"name": "one"}})

    service.respond = respond
    options = {"http.redirects": "same-origin", "batch.size": "10"}
    kept = lookup([1], **options, **{"http.batch.url": f"{service.base_url}/moved-307"})
    assert kept[0]["name"] == "one"
    posted = [(method, path) for method, path, _ in service.seen]
    assert posted == [("POST", "/moved-307"), ("POST", "/batch")]  # the body posted again
    refused = lookup([1], **options, **{"http.batch.url": f"{service.base_url}/moved-302"})
    assert "a POST follows only 307 and 308" in refused[0]["_lookup_error"]


def test_https_to_http_is_never_the_same_origin() -> None:
    from asynclookup_http.urls import same_origin as _same_origin
    from yarl import URL

    asked = URL("https://api.example.com/users/1")
    assert _same_origin(asked, URL("https://api.example.com/v2/users/1"))
    assert not _same_origin(asked, URL("http://api.example.com/users/1"))  # downgraded
    assert not _same_origin(asked, URL("https://api.example.com:8443/users/1"))
    assert not _same_origin(asked, URL("https://evil.example.com/users/1"))


# -- sizes -----------------------------------------------------------------------------------


def _gzip_bomb(megabytes: int) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = b"\0" * (1 << 20)
    return b"".join([*(compressor.compress(chunk) for _ in range(megabytes)), compressor.flush()])


def test_a_gzip_bomb_costs_at_most_the_limit(service: Recorder) -> None:
    bomb = _gzip_bomb(200)  # 200 MiB of zeros in about 200 KiB
    assert len(bomb) < 300_000
    service.respond = lambda request: web.Response(
        body=bomb, headers={"Content-Encoding": "gzip", "Content-Type": "application/json"}
    )
    tracemalloc.start()
    try:
        rows = lookup([1, 2], url=f"{service.base_url}/users/{{key}}", capacity="2")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    for row in rows:
        assert row["name"] is None
        assert "larger than http.max-response-bytes=8,388,608" in row["_lookup_error"]
        assert "after decompression" in row["_lookup_error"]
    assert peak < 64 << 20, f"peak {peak / 2**20:.0f} MiB"  # two answers in flight, each cut short


@pytest.mark.parametrize("chunked", [False, True])
def test_a_plain_body_larger_than_the_limit_is_an_error_and_a_smaller_one_passes(
    service: Recorder, chunked: bool
) -> None:
    async def respond(request: web.Request) -> web.StreamResponse:
        size = int(request.path.rsplit("/", 1)[1])
        body = b'{"name": "' + b"x" * size + b'"}'
        if not chunked:
            return web.Response(body=body, content_type="application/json")
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        for start in range(0, len(body), 50_000):
            await response.write(body[start : start + 50_000])
        await response.write_eof()
        return response

    service.respond = respond
    limit = {"http.max-response-bytes": "100000"}
    rows = lookup([1_000, 200_000], url=f"{service.base_url}/size/{{key}}", **limit)
    assert rows[0]["name"] == "x" * 1_000 and rows[0]["_lookup_error"] is None
    assert rows[1]["name"] is None
    assert "larger than http.max-response-bytes=100,000" in rows[1]["_lookup_error"]


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "raw-deflate"])
def test_compressed_answers_are_decoded(service: Recorder, encoding: str) -> None:
    def compress(data: bytes) -> bytes:
        if encoding == "gzip":
            return gzip.compress(data)
        if encoding == "deflate":
            return zlib.compress(data)
        raw = zlib.compressobj(6, zlib.DEFLATED, -15)
        return raw.compress(data) + raw.flush()

    def respond(request: web.Request) -> web.StreamResponse:
        user = request.path.rsplit("/", 1)[1]
        body = compress(b'{"name": "user ' + user.encode() + b'"}')
        name = "deflate" if encoding == "raw-deflate" else encoding
        return web.Response(body=body, headers={"Content-Encoding": name})

    service.respond = respond
    rows = lookup([1, 2], url=f"{service.base_url}/users/{{key}}")
    assert [(r["name"], r["_lookup_error"]) for r in rows] == [("user 1", None), ("user 2", None)]
    assert all(h.get("accept-encoding") == "gzip, deflate" for _, _, h in service.seen)


def test_an_encoding_the_connector_does_not_decode_is_an_error(service: Recorder) -> None:
    service.respond = lambda request: web.Response(body=b"...", headers={"Content-Encoding": "br"})
    rows = lookup([1], url=f"{service.base_url}/users/{{key}}")
    assert "Content-Encoding 'br' is not one the HTTP connector decodes" in rows[0]["_lookup_error"]


@pytest.mark.parametrize("after", ["garbage", "endless"])
def test_data_after_a_gzip_answer_is_an_error_not_memory(service: Recorder, after: str) -> None:
    """Bytes after a gzip member that are not another member: refused as they come (zlib
    would keep them aside, uncounted, for as long as the service sends them)."""

    async def respond(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Encoding": "gzip"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        await response.write(gzip.compress(b'{"name": "x"}'))
        for _ in range(1 if after == "garbage" else 2_000):
            await response.write(b"\x00" * 65_536)
        await response.write_eof()
        return response

    service.respond = respond
    tracemalloc.start()
    try:
        rows = lookup([1], url=f"{service.base_url}/users/{{key}}")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert rows[0]["name"] is None
    assert "data after the end of the compressed answer" in rows[0]["_lookup_error"]
    assert peak < 16 << 20


def test_a_gzip_answer_of_several_members_is_decoded(service: Recorder) -> None:
    body = gzip.compress(b'{"name": ') + gzip.compress(b'"two members"}')
    service.respond = lambda request: web.Response(body=body, headers={"Content-Encoding": "gzip"})
    rows = lookup([1], url=f"{service.base_url}/users/{{key}}")
    assert rows[0]["name"] == "two members" and rows[0]["_lookup_error"] is None


# -- cookies ---------------------------------------------------------------------------------


def test_no_cookie_of_one_key_reaches_the_next(service: Recorder) -> None:
    def respond(request: web.Request) -> web.StreamResponse:
        user = request.path.rsplit("/", 1)[1]
        response = web.json_response({"name": user})
        response.set_cookie("session", f"tenant-of-{user}", path="/")
        return response

    service.respond = respond
    url = f"http://localhost:{service.port}/users/{{key}}"  # a host name: a jar would keep it
    rows = lookup(
        ["alice", "bob", "carol"],
        schema="id string, name string",
        key_type=pa.string(),
        url=url,
        capacity="1",
    )
    assert [r["name"] for r in rows] == ["alice", "bob", "carol"]
    assert [headers.get("cookie") for _, _, headers in service.seen] == [None, None, None]


# -- keys as path segments -------------------------------------------------------------------


def test_a_key_that_would_change_the_path_is_its_own_error(service: Recorder) -> None:
    service.respond = lambda request: web.json_response({"name": f"at {request.raw_path}"})
    keys = [".", "..", "", "a.b", "..x", "ok"]
    rows = lookup(
        keys,
        schema="id string, name string",
        key_type=pa.string(),
        url=f"{service.base_url}/u/{{key}}",
    )
    by_key = {r["id"]: r for r in rows}
    for key in (".", "..", ""):
        assert by_key[key]["name"] is None
        assert "cannot be a path segment of url" in by_key[key]["_lookup_error"]
    for key in ("a.b", "..x", "ok"):
        assert by_key[key]["name"] == f"at /u/{key}" and by_key[key]["_lookup_error"] is None
    assert sorted(path for _, path, _ in service.seen) == ["/u/..x", "/u/a.b", "/u/ok"]


def test_a_composite_key_part_cannot_climb_out_of_its_segment(service: Recorder) -> None:
    service.respond = lambda request: web.json_response({"name": f"at {request.raw_path}"})
    rows = lookup(
        [("..", 7), ("acme", 7)],
        schema="tenant string, id long, name string",
        url=f"{service.base_url}/tenants/{{tenant}}/users/{{id}}",
        **{"key.column": "tenant,id"},
    )
    assert rows[0]["name"] is None and "cannot be a path segment" in rows[0]["_lookup_error"]
    assert rows[1]["name"] == "at /tenants/acme/users/7"
    assert [path for _, path, _ in service.seen] == ["/tenants/acme/users/7"]


def test_characters_a_server_cuts_paths_at_stay_encoded_on_the_wire(service: Recorder) -> None:
    """A URL library decodes ``%3B`` back to ``;`` (and ``!``, ``$``, ``,``, ``=``), which a
    Java server takes as a path parameter: ``..;`` would climb a segment there."""
    service.respond = lambda request: web.json_response({"name": "x"})
    keys = ["..;", "a;b", "..!", "x=y", "a,b", "a b"]
    lookup(
        keys,
        schema="id string, name string",
        key_type=pa.string(),
        url=f"{service.base_url}/api/users/{{key}}/profile",
    )
    seen = sorted(path for _, path, _ in service.seen)
    assert seen == sorted(
        [
            "/api/users/..%3B/profile",
            "/api/users/a%3Bb/profile",
            "/api/users/..%21/profile",
            "/api/users/x%3Dy/profile",
            "/api/users/a%2Cb/profile",
            "/api/users/a%20b/profile",
        ]
    ), seen


# -- secrets in messages ---------------------------------------------------------------------


def test_a_secret_query_parameter_never_reaches_an_error(service: Recorder) -> None:
    service.respond = lambda request: web.Response(status=500, text=f"bad {request.raw_path}")
    rows = lookup([1], url=f"{service.base_url}/users/{{key}}?api_key={SECRET}")
    error = rows[0]["_lookup_error"]
    assert "HTTP 500 from GET" in error and "api_key=***" in error
    assert SECRET not in error  # neither from the URL nor from the body's excerpt


def test_a_service_echoing_the_lookups_secret_headers_shows_none(
    service: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("USERS_TOKEN", f"env-{SECRET}")
    service.respond = lambda request: web.json_response(
        {"error": "invalid credentials", "headers": dict(request.headers)}, status=401
    )
    rows = lookup(
        [1],
        url=f"{service.base_url}/users/{{key}}",
        **{
            "http.header.Authorization": f"Bearer {SECRET}",
            "http.header.X-Custom-Token.env": "USERS_TOKEN",
        },
    )
    error = rows[0]["_lookup_error"]
    assert "HTTP 401" in error and SECRET not in error, error


def test_a_failed_tasks_traceback_shows_no_header_the_service_echoed(service: Recorder) -> None:
    """Under on.error=fail the task fails with a LookupFailedError whose traceback Spark prints
    and sends to the driver, cause included: a header value echoed in the service's error page
    is hidden there too, though the header's name says nothing of a secret."""
    routing = "zq81echoedroutingvalue77"
    service.respond = lambda request: web.Response(
        status=403, text=f"forbidden for x-routing {request.headers.get('X-Routing')}"
    )
    with pytest.raises(LookupFailedError) as info:
        lookup(
            [1],
            url=f"{service.base_url}/users/{{key}}",
            **{"on.error": "fail", "http.header.X-Routing": routing},
        )
    printed = "".join(traceback.format_exception(info.value))
    assert "HTTP 403" in printed and "forbidden for x-routing ***" in printed
    assert "failed for 1 key" in printed and routing not in printed, printed
    assert service.seen and all(h.get("x-routing") == routing for _, _, h in service.seen)


@pytest.mark.parametrize("zone", ["UTC", "America/Sao_Paulo", "Asia/Tokyo"])
def test_a_retry_after_date_is_read_in_gmt_whatever_the_machine_zone(
    zone: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An HTTP date is in GMT (RFC 9110), also in the asctime and ``-0000`` forms, which parse
    without a zone: read in the machine's zone, a date 60 s away waited 0 s in Tokyo and three
    hours in Sao Paulo."""
    import email.utils
    import time

    from asynclookup_http.body import parse_retry_after

    monkeypatch.setenv("TZ", zone)
    time.tzset()
    try:
        soon = time.time() + 60
        forms = [
            email.utils.formatdate(soon, usegmt=True),  # IMF-fixdate: "... GMT"
            email.utils.formatdate(soon).replace("+0000", "-0000"),
            time.strftime("%a %b %d %H:%M:%S %Y", time.gmtime(soon)),  # asctime
        ]
        for form in forms:
            wait = parse_retry_after(form)
            assert wait is not None and 55 <= wait <= 61, (zone, form, wait)
        assert parse_retry_after("not a date") is None
        assert parse_retry_after("-5") == 0.0
    finally:
        monkeypatch.undo()  # the zone the process had, set again
        time.tzset()


def lying_server(answer: bytes) -> RawServer:
    """Answers every request with ``answer`` (bytes, as sent), then closes: headers no HTTP
    library would send, such as a ``Content-Length`` beside a ``Transfer-Encoding``."""

    def answer_it(connection: socket.socket) -> None:
        read_request(connection)
        connection.sendall(answer)

    return RawServer(answer_it)


def test_a_content_length_beside_a_transfer_encoding_does_not_lift_the_limit() -> None:
    """A hostile server declares 20 bytes and sends 200,000 in chunks: hyper frames the body
    by its chunks and leaves the Content-Length as sent; the connector must still count what
    it reads (aiohttp refuses such an answer outright)."""
    body = b'{"name": "' + b"x" * 200_000 + b'"}'
    chunks = b"".join(
        b"%x\r\n%s\r\n" % (len(body[i : i + 50_000]), body[i : i + 50_000])
        for i in range(0, len(body), 50_000)
    )
    answer = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
        b"Content-Length: 20\r\nConnection: close\r\n\r\n" + chunks + b"0\r\n\r\n"
    )
    server = lying_server(answer)
    try:
        rows = lookup(
            [1],
            url=f"http://127.0.0.1:{server.port}/users/{{key}}",
            **{"http.max-response-bytes": "100000"},
        )
    finally:
        server.close()
    assert rows[0]["name"] is None and rows[0]["_lookup_error"]
    error = rows[0]["_lookup_error"]
    assert "larger than http.max-response-bytes=100,000" in error or "Content-Length" in error, (
        error
    )
