"""The bench's native user service (nginx + njs): the Python service's answers byte for byte,
its bookkeeping read from nginx's access log, nothing left behind when it stops; and
``http_store(service=...)`` choosing it."""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from lookup_source.bench.native_gets import (
    decimal_range_regex,
    tail_map_entries,
    whole_milliseconds,
)
from lookup_source.bench.native_service import NativeUserService
from lookup_source.bench.native_site import (
    NativeServiceUnavailable,
    echo_gets,
    native_service_available,
    record_body,
)
from lookup_source.bench.stores import http_store, service_of
from lookup_source.service import user_record

MISSING = native_service_available()
needs_nginx = pytest.mark.skipif(MISSING is not None, reason=f"native service: {MISSING}")


def get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as answer:
            return answer.status, answer.headers["Content-Type"], answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read()


ECHO = echo_gets(100, 5)[1] if MISSING is None else MISSING
needs_echo = pytest.mark.skipif(ECHO is not None, reason=f"nginx's directives: {ECHO}")


@pytest.fixture(scope="module", params=["directives", "njs"])
def service(request: pytest.FixtureRequest) -> Iterator[NativeUserService]:
    if request.param == "directives" and ECHO is not None:
        pytest.skip(f"nginx's directives: {ECHO}")
    with NativeUserService(users=100, latency_ms=5, gets=request.param) as running:
        assert running.gets_by == request.param
        yield running


def test_decimal_range_regex_matches_exactly_the_ids_below_its_end() -> None:
    for end in [*range(0, 130), 999, 1_000, 1_001, 5_000, 10_000, 12_345, 60_000, 100_001]:
        pattern = re.compile(f"^(?:{decimal_range_regex(end)})$")
        tried = range(0, max(2 * end, 1_100) + 10)
        assert [i for i in tried if pattern.match(str(i))] == list(range(end)), end
        assert not pattern.match("") and not pattern.match("01") and not pattern.match("+1")
    for big in (999_999_999, 1_000_000_000, 123_456_789):
        pattern = re.compile(f"^(?:{decimal_range_regex(big)})$")
        for i in (0, 9, big // 3, big - 1, big - 10, big // 10 * 9):
            assert pattern.match(str(i)), (big, i)
        for i in (big, big + 1, big * 10, big + 10**6):
            assert not pattern.match(str(i)), (big, i)


def test_each_tail_is_under_both_spellings_of_its_last_digits() -> None:
    tails = tuple(f"t{i}" for i in range(1_000))
    lines = tail_map_entries(tails)
    table = dict(line.strip().rstrip(";").split(" ", 1) for line in lines)
    assert table['"5"'] == table['"005"'] == "'t5'"
    assert table['"50"'] == table['"050"'] == "'t50'"
    assert table['"999"'] == "'t999'" and table['"0"'] == table['"000"'] == "'t0'"
    assert len(table) == 1_000 + 100  # remainders below 100: also padded to three digits
    with pytest.raises(ValueError, match="power of ten"):
        tail_map_entries(tails[:500])


def test_a_tail_is_quoted_for_nginx_and_a_dollar_refused() -> None:
    lines = tail_map_entries((r"it's \ here",) + ("x",) * 9)
    assert lines[0].strip() == r""""0" 'it\'s \\ here';"""
    with pytest.raises(ValueError, match=r"holding '\$'"):
        tail_map_entries(("$host",) + ("x",) * 9)


def test_directives_need_whole_milliseconds_and_njs_takes_the_rest() -> None:
    assert whole_milliseconds(5) and whole_milliseconds(0) and not whole_milliseconds(0.5)
    gets, why = echo_gets(10, 0.5)
    assert gets is None and why is not None and "whole milliseconds" in why


def test_the_answers_are_the_python_services_text() -> None:
    """No nginx needed: the text the JavaScript builds, for ids across several periods."""
    for user_id in [*range(2_100), 99_999, 123_456_789]:
        assert record_body(user_id) == json.dumps(user_record(user_id))


@needs_nginx
def test_records_404s_and_bookkeeping(service: NativeUserService) -> None:
    assert service.url == f"http://127.0.0.1:{service.port}/users/{{key}}"
    assert service.base_url == f"http://127.0.0.1:{service.port}"
    before = service.request_count()
    asked = ["0", "7", "42", "99", "7"]  # 7 twice
    for key in asked:
        status, content_type, body = get(service.url.format(key=key))
        assert status == 200
        assert content_type.startswith("application/json")
        assert json.loads(body) == user_record(int(key))
        assert body.decode() == json.dumps(user_record(int(key)))
    for key in ("007", "0"):  # leading zeros, as int() reads them
        status, _, body = get(service.url.format(key=key))
        assert status == 200 and body.decode() == json.dumps(user_record(int(key)))
    for key in ("100", "abc", "1000", "-1", "9" * 30, "/5"):  # /users//5: slashes not merged
        status, content_type, body = get(service.url.format(key=key))
        assert status == 404, key
        assert content_type.startswith("application/json")
        assert json.loads(body) == {"error": "no such user"}
    assert service.request_count() - before == len(asked) + 8
    assert service.keys_asked() >= {"0", "7", "42", "99", "100", "abc", "007"}
    assert service.distinct_keys() == len(service.keys_asked())
    assert service.keys_served == service.request_count()


@needs_nginx
def test_a_get_of_another_method_is_refused(service: NativeUserService) -> None:
    request = urllib.request.Request(service.url.format(key=1), data=b"{}", method="PUT")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 405


@needs_echo
def test_directives_wait_the_latency_before_each_answer() -> None:
    with NativeUserService(users=10, latency_ms=40, gets="directives") as slow:
        started = time.monotonic()
        assert get(slow.url.format(key=3))[0] == 200
        assert get(slow.url.format(key=30))[0] == 404  # an unknown key waits too
        assert time.monotonic() - started >= 0.08


@needs_nginx
def test_gets_by_directives_at_a_fraction_of_a_millisecond_is_refused() -> None:
    with (
        pytest.raises(NativeServiceUnavailable, match="whole milliseconds"),
        NativeUserService(users=10, latency_ms=0.5, gets="directives"),
    ):
        pass
    with NativeUserService(users=10, latency_ms=0.5) as auto:
        assert auto.gets_by == "njs" and get(auto.url.format(key=3))[0] == 200
    with pytest.raises(ValueError, match="gets: expected one of auto, directives, njs"):
        NativeUserService(gets="lua")


@needs_nginx
def test_batch_post(service: NativeUserService) -> None:
    request = urllib.request.Request(
        service.batch_url, data=json.dumps({"keys": [3, "4", 3, 500]}).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert json.loads(answer.read()) == {"3": user_record(3), "4": user_record(4)}


async def _at_once(port: int, keys: list[int]) -> list[bytes]:
    """One GET per key, each on its own connection, all written in the same instant (the
    connections opened first), so that they are in flight together even on a busy machine."""
    streams = [await asyncio.open_connection("127.0.0.1", port) for _ in keys]
    for (_, writer), key in zip(streams, keys):
        writer.write(f"GET /users/{key} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    answers = [await reader.read() for reader, _ in streams]
    for _, writer in streams:
        writer.close()
    return answers


@needs_nginx
def test_peak_in_flight_of_concurrent_requests() -> None:
    with NativeUserService(users=100, latency_ms=5) as fresh:
        assert fresh.peak_in_flight() == 0
        answers = asyncio.run(_at_once(fresh.port, list(range(10))))
        assert all(answer.startswith(b"HTTP/1.1 200 ") for answer in answers)
        assert fresh.request_count() == 10
        assert fresh.distinct_keys() == 10
        assert fresh.connections == 10
        assert fresh.peak_in_flight() >= 5


@needs_nginx
def test_nothing_is_left_after_exit() -> None:
    with NativeUserService(users=10, latency_ms=0) as short:
        directory, process = short.directory, short.process
        assert directory is not None and os.path.isdir(directory)
        assert process is not None and process.poll() is None
        assert get(short.url.format(key=1))[0] == 200
    assert not os.path.exists(directory)
    assert process.poll() is not None
    with pytest.raises(ProcessLookupError):
        os.killpg(process.pid, 0)  # its workers are gone too
    assert short.request_count() == 1  # the last counts are kept


@needs_nginx
def test_http_store_native_answers() -> None:
    with http_store(100, 1.0, batch=False, service="native") as store:
        assert store.name == "http-get-1ms, nginx" and service_of(store.name) == "nginx"
        assert store.server_port is not None
        status, _, body = get(store.target.format(key=12))
        assert status == 200 and json.loads(body) == user_record(12)
        assert store.requests() == 1


def test_http_store_rejects_an_unknown_service() -> None:
    with (
        pytest.raises(ValueError, match="python, native, auto"),
        http_store(10, 0.0, batch=False, service="go"),
    ):
        pass


def test_without_nginx_native_says_what_is_missing_and_auto_falls_back(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ASYNCLOOKUP_NGINX", "/nonexistent/nginx")
    why = native_service_available()
    assert why is not None and "nginx is not installed" in why and "\n" not in why
    with (
        pytest.raises(RuntimeError, match="nginx is not installed"),
        http_store(10, 0.0, batch=False, service="native"),
    ):
        pass
    with http_store(10, 0.0, batch=False, service="auto") as store:
        assert store.name == "http-get-0ms" and service_of(store.name) == "python"
        assert get(store.target.format(key=3))[0] == 200
    assert "the Python one answers" in capsys.readouterr().out


def test_a_dynamic_module_is_found_named_built_in_or_said_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    from lookup_source.bench import native_site

    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "ngx_http_echo_module.so").write_bytes(b"")
    version = f"nginx version: nginx/1.22\nconfigure arguments: --modules-path={modules}"
    monkeypatch.setattr(native_site, "nginx_version_text", lambda nginx: version)
    find = native_site.dynamic_module
    echo = ("ngx_http_echo_module.so", "ASYNCLOOKUP_ECHO_MODULE", "echo", "libnginx-mod-http-echo")
    assert find("nginx", *echo) == (str(modules / "ngx_http_echo_module.so"), None)
    path, why = find("nginx", "ngx_http_absent_module.so", "X_NONE", "absent", "pkg-js")
    assert path is None and why is not None
    assert why.startswith(f"the absent module (ngx_http_absent_module.so) is not in {modules}, ")
    assert why.endswith("(Debian: apt-get install pkg-js)")
    monkeypatch.setattr(
        native_site, "nginx_version_text", lambda nginx: version + " --add-module=../njs-0.8/nginx"
    )
    assert find("nginx", "ngx_http_js_module.so", "X_NONE", "njs", "pkg-js") == (None, None)
    monkeypatch.setenv("ASYNCLOOKUP_ECHO_MODULE", str(tmp_path / "absent.so"))
    assert find("nginx", *echo) == (
        None,
        f"ASYNCLOOKUP_ECHO_MODULE={tmp_path / 'absent.so'}: no file",
    )
    monkeypatch.setattr(native_site, "nginx_version_text", lambda nginx: "ERROR no such file")
    monkeypatch.delenv("ASYNCLOOKUP_ECHO_MODULE")
    assert find("/x/nginx", *echo) == (None, "/x/nginx -V failed: no such file")
