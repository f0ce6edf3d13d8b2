"""TLS to a real Redis (``redis-server --tls-port``) with a CA made by the test: verified,
mutual, and every way it can be wrong failing at once with the option to fix."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from asynclookup_redis.client import RedisLookupClient

from lookup_source.connector_api import TlsSettings, handshake_refusal
from lookup_source.errors import LookupFailedError, OptionError
from lookup_source.spark.plan import LookupPlan
from tests.helpers import run_keys
from tests.servers import RedisServer, free_port, redis_tls_server
from tests.tls import KEY_PASSWORD, Pki, lookup_failure, make_pki

SCHEMA = "id long, name string"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(Path(tmp_path_factory.mktemp("pki")))


def _seed(server: RedisServer, pki: Pki, **client: Any) -> None:
    db = redis.Redis(host="localhost", port=server.port, ssl=True, ssl_ca_certs=pki.ca, **client)
    db.set("user:1", json.dumps({"name": "Ada"}))
    db.close()


@pytest.fixture(scope="module")
def tls_redis(pki: Pki) -> Iterator[RedisServer]:
    with redis_tls_server(pki) as server:
        _seed(server, pki)
        yield server


@pytest.fixture(scope="module")
def mtls_redis(pki: Pki) -> Iterator[RedisServer]:
    with redis_tls_server(pki, client_certificates=True) as server:
        _seed(server, pki, ssl_certfile=pki.client_cert, ssl_keyfile=pki.client_key)
        yield server


def lookup(url: str, **options: str) -> list[dict[str, Any]]:
    return run_keys(
        {"connector": "redis", "url": url, "redis.key.pattern": "user:{key}", **options},
        SCHEMA,
        [1, 2],
    )


FOUND = [{"id": 1, "name": "Ada"}, {"id": 2, "name": None}]


def failure(url: str, **options: str) -> Any:
    return lookup_failure(lambda: lookup(url, **options))


def test_the_right_ca_verifies_the_server(tls_redis: RedisServer, pki: Pki) -> None:
    assert lookup(tls_redis.url, **{"redis.tls.ca-file": pki.ca}) == FOUND
    # the URL form of redis-py keeps working
    assert lookup(f"{tls_redis.url}?ssl_ca_certs={pki.ca}") == FOUND


def test_an_unknown_ca_fails_at_once_naming_the_option(tls_redis: RedisServer, pki: Pki) -> None:
    error = failure(tls_redis.url, **{"redis.tls.ca-file": pki.other_ca})
    assert "TLS: the server's certificate does not verify" in str(error)
    assert "set redis.tls.ca-file to the CA that signed it" in str(error)
    assert error.attempts == 1  # not retried
    error = failure(tls_redis.url)  # the system's CAs do not know the test CA either
    assert "set redis.tls.ca-file" in str(error)


def test_a_wrong_host_name_fails_unless_the_check_is_off(tls_redis: RedisServer, pki: Pki) -> None:
    by_ip = tls_redis.url.replace("localhost", "127.0.0.1")  # the certificate names localhost
    error = failure(by_ip, **{"redis.tls.ca-file": pki.ca})
    assert "it is not for the host name of the URL" in str(error)
    assert "redis.tls.check-hostname=false" in str(error)
    assert error.attempts == 1
    options = {"redis.tls.ca-file": pki.ca, "redis.tls.check-hostname": "false"}
    assert lookup(by_ip, **options) == FOUND


def test_mutual_tls(mtls_redis: RedisServer, pki: Pki, monkeypatch: pytest.MonkeyPatch) -> None:
    ca = {"redis.tls.ca-file": pki.ca}
    error = failure(mtls_redis.url, **ca)
    assert "the server requires a client certificate: set redis.tls.cert-file" in str(error)
    assert error.attempts == 1  # not retried
    client = {"redis.tls.cert-file": pki.client_cert, "redis.tls.key-file": pki.client_key}
    assert lookup(mtls_redis.url, **ca, **client) == FOUND
    encrypted = {
        "redis.tls.cert-file": pki.client_cert,
        "redis.tls.key-file": pki.client_key_encrypted,
        "redis.tls.key-password.env": "TEST_CLIENT_KEY_PASSWORD",
    }
    monkeypatch.setenv("TEST_CLIENT_KEY_PASSWORD", KEY_PASSWORD)
    assert lookup(mtls_redis.url, **ca, **encrypted) == FOUND
    monkeypatch.setenv("TEST_CLIENT_KEY_PASSWORD", "not it")
    error = failure(mtls_redis.url, **ca, **encrypted)
    assert "the certificate and key do not load" in str(error)
    assert "is redis.tls.key-password.env the key's password?" in str(error)
    assert "not it" not in str(error) and KEY_PASSWORD not in str(error)
    monkeypatch.delenv("TEST_CLIENT_KEY_PASSWORD")
    error = failure(mtls_redis.url, **ca, **encrypted)
    assert "TEST_CLIENT_KEY_PASSWORD" in str(error) and "not set on this executor" in str(error)
    assert not isinstance(error, LookupFailedError)  # the task fails before any request


def test_a_refusal_seen_as_a_reset_is_still_named(
    mtls_redis: RedisServer, tls_redis: RedisServer, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under TLS 1.3 Redis refuses a client without a certificate after the client's side of
    the handshake: a first request sent at once may see only "Connection reset by peer" (the
    server closed with it unread; one CI run in ten on a loaded machine). Every request here
    sees that reset; the connector asks the server once, listening, and names the option."""

    async def reset(self: RedisLookupClient, *args: Any) -> list[Any]:
        raise ConnectionResetError(104, "Connection reset by peer")

    monkeypatch.setattr(RedisLookupClient, "_send", reset)
    ca = {"redis.tls.ca-file": pki.ca, "retry.initial-delay.ms": "1"}
    error = failure(mtls_redis.url, **ca)
    assert "the server requires a client certificate: set redis.tls.cert-file" in str(error)
    assert error.attempts == 1  # not retried
    # a server that takes the handshake: the reset stays what it is, and is retried
    error = failure(tls_redis.url, **ca)
    assert "Connection reset by peer" in str(error) and "certificate" not in str(error)
    assert error.attempts == 3


def test_handshake_refusal_listens_without_sending(
    mtls_redis: RedisServer, tls_redis: RedisServer, pki: Pki
) -> None:
    def refusal(port: int, **options: str) -> Any:
        settings = TlsSettings.from_options("redis", {"redis.tls.ca-file": pki.ca, **options})
        return asyncio.run(
            handshake_refusal("localhost", port, settings.context(), "redis", wait=0.3)
        )

    for _ in range(20):  # the alert every time, not a reset
        found = refusal(mtls_redis.port)
        assert "requires a client certificate: set redis.tls.cert-file" in str(found)
    client = {"redis.tls.cert-file": pki.client_cert, "redis.tls.key-file": pki.client_key}
    assert refusal(mtls_redis.port, **client) is None
    assert refusal(tls_redis.port) is None
    assert refusal(free_port()) is None  # nothing listens: nothing to say about TLS
    # the server's certificate not verifying is the client's own finding, not a refusal
    assert refusal(tls_redis.port, **{"redis.tls.ca-file": pki.other_ca}) is None
    assert refusal(mtls_redis.port, **{"redis.tls.ca-file": pki.other_ca}) is None


def test_a_missing_file_names_its_option(tls_redis: RedisServer, pki: Pki) -> None:
    error = failure(tls_redis.url, **{"redis.tls.ca-file": "/nowhere/ca.pem"})
    assert (
        "option 'redis.tls.ca-file': cannot read a PEM CA certificate from '/nowhere/ca.pem'"
        in (str(error))
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"url": "redis://localhost/0", "redis.tls.ca-file": "ca.pem"}, "use a rediss:// URL"),
        (
            {"url": "rediss://localhost/0", "redis.tls.key-file": "k.pem"},
            "needs redis.tls.cert-file",
        ),
        ({"url": "rediss://localhost/0", "redis.tls.check-hostname": "maybe"}, "true or false"),
    ],
)
def test_tls_options_are_checked_on_the_driver(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        LookupPlan.build({"connector": "redis", **options}, SCHEMA)
