"""HTTPS with a CA made by the test: a private CA, client certificates (mutual TLS), and every
way it can be wrong failing at once with the option to fix."""

from __future__ import annotations

import contextlib
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from asynclookup_http.client import HttpLookupClient

from lookup_source.errors import OptionError
from lookup_source.service import BackgroundHttpServer
from lookup_source.spark.plan import LookupPlan
from tests.helpers import run_keys
from tests.tls import KEY_PASSWORD, Pki, lookup_failure, make_pki

SCHEMA = "id long, v string"
FOUND = [{"id": 1, "v": "secure"}]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(Path(tmp_path_factory.mktemp("pki")))


def _server(pki: Pki) -> BackgroundHttpServer:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"v": "secure"})

    app = web.Application()
    app.router.add_get("/{key}", handler)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=pki.ca)
    context.load_cert_chain(pki.server_cert, pki.server_key)
    context.verify_mode = ssl.CERT_NONE
    server = BackgroundHttpServer(app)
    server.ssl_context = context
    return server


@pytest.fixture(scope="module")
def https(pki: Pki) -> Iterator[BackgroundHttpServer]:
    with _server(pki) as server:
        yield server


class BlockingTlsServer:
    """An HTTPS server on Python's blocking ``ssl`` sockets (OpenSSL does the handshake and
    sends its alerts, as nginx does; asyncio's server closes without the alert)."""

    def __init__(self, context: ssl.SSLContext) -> None:
        import http.server
        import json

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = json.dumps({"v": "secure"}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        class Server(http.server.ThreadingHTTPServer):
            def get_request(self) -> tuple[Any, Any]:
                raw, address = self.socket.accept()
                tls = context.wrap_socket(raw, server_side=True, do_handshake_on_connect=False)
                try:
                    tls.do_handshake()
                except (ssl.SSLError, OSError):
                    # OpenSSL has sent its alert. Under TLS 1.3 the client may already have
                    # sent its request: closing with it unread would reset the connection
                    # (RST) and the alert would be lost, so read it first, as nginx does.
                    plain = socket.socket(fileno=tls.detach())
                    plain.settimeout(0.5)
                    with contextlib.suppress(OSError):
                        while plain.recv(65_536):
                            pass
                    plain.close()
                    raise
                return tls, address

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]

    def __enter__(self) -> BlockingTlsServer:
        import threading

        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def mtls(pki: Pki) -> Iterator[BlockingTlsServer]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=pki.ca)
    context.load_cert_chain(pki.server_cert, pki.server_key)
    context.verify_mode = ssl.CERT_REQUIRED
    with BlockingTlsServer(context) as server:
        yield server


def url(server: Any, host: str = "localhost") -> str:
    return f"https://{host}:{server.port}/{{key}}"


def lookup(address: str, **options: str) -> list[dict[str, Any]]:
    return run_keys({"connector": "http", "url": address, **options}, SCHEMA, [1])


def failure(address: str, **options: str) -> Any:
    return lookup_failure(lambda: lookup(address, **options))


def test_a_private_ca(https: BackgroundHttpServer, pki: Pki) -> None:
    assert lookup(url(https), **{"http.tls.ca-file": pki.ca}) == FOUND
    error = failure(url(https), **{"http.tls.ca-file": pki.other_ca})
    assert "set http.tls.ca-file to the CA that signed it" in str(error)
    assert error.attempts == 1
    error = failure(url(https))  # the system's CAs do not know the test CA
    assert "set http.tls.ca-file" in str(error)


def test_a_wrong_host_name(https: BackgroundHttpServer, pki: Pki, transport: str) -> None:
    by_ip = url(https, host="127.0.0.1")
    error = failure(by_ip, **{"http.tls.ca-file": pki.ca})
    assert "it is not for the host name of the URL" in str(error)
    assert "http.tls.check-hostname=false" in str(error) and error.attempts == 1
    options = {"http.tls.ca-file": pki.ca, "http.tls.check-hostname": "false"}
    if transport == "pyreqwest":  # rustls cannot skip the host name alone: auto takes aiohttp
        with pytest.raises(OptionError, match="'http.client': is pyreqwest, but rustls cannot"):
            lookup(by_ip, **options)
        options["http.client"] = "auto"
    assert lookup(by_ip, **options) == FOUND


def test_client_certificates(
    mtls: BlockingTlsServer, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca = {"http.tls.ca-file": pki.ca}
    error = failure(url(mtls), **ca)
    assert "the server requires a client certificate: set http.tls.cert-file" in str(error)
    assert error.attempts == 1  # not retried
    client = {"http.tls.cert-file": pki.client_cert, "http.tls.key-file": pki.client_key}
    assert lookup(url(mtls), **ca, **client) == FOUND
    monkeypatch.setenv("TEST_HTTP_KEY_PASSWORD", KEY_PASSWORD)
    encrypted = {
        "http.tls.cert-file": pki.client_cert,
        "http.tls.key-file": pki.client_key_encrypted,
        "http.tls.key-password.env": "TEST_HTTP_KEY_PASSWORD",
    }
    assert lookup(url(mtls), **ca, **encrypted) == FOUND
    # a client certificate for a server that is not verified (test servers only)
    unverified = {"http.tls.verify": "false", **client}
    assert lookup(url(mtls, host="127.0.0.1"), **unverified) == FOUND


def test_a_refusal_seen_as_a_reset_is_still_named(
    mtls: BlockingTlsServer, https: BackgroundHttpServer, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that closes at once when it refuses a client certificate (TLS 1.3: after the
    client's handshake) resets a request sent meanwhile, and its alert is lost. Every request
    here sees that reset; the connector asks the server once, listening, and names the option
    (see also test_redis_tls.py)."""

    async def reset(self: HttpLookupClient, keys: Any) -> Any:
        raise ConnectionResetError(104, "Connection reset by peer")

    monkeypatch.setattr(HttpLookupClient, "_get", reset)
    ca = {"http.tls.ca-file": pki.ca, "retry.initial-delay.ms": "1"}
    error = failure(url(mtls), **ca)
    assert "the server requires a client certificate: set http.tls.cert-file" in str(error)
    assert error.attempts == 1
    error = failure(url(https), **ca)  # a server that takes the handshake: retried
    assert "Connection reset by peer" in str(error) and "certificate" not in str(error)
    assert error.attempts == 3


def test_ca_file_and_no_verification_conflict() -> None:
    options = {
        "connector": "http",
        "url": "https://h/{key}",
        "http.tls.verify": "false",
        "http.tls.ca-file": "ca.pem",
    }
    with pytest.raises(OptionError, match="http.tls.ca-file.*http.tls.verify=false"):
        LookupPlan.build(options, SCHEMA)
