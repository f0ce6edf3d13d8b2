"""TLS to a real Postgres (``ssl=on``) with a CA made by the test: verified, mutual, the libpq
URL forms, and every way it can be wrong failing at once with the option to fix."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lookup_source.errors import OptionError
from lookup_source.spark.plan import LookupPlan
from tests.helpers import run_keys
from tests.servers import PostgresServer, postgres_tls_server
from tests.tls import KEY_PASSWORD, Pki, lookup_failure, make_pki

SCHEMA = "id long, name string"
FOUND = [{"id": 1, "name": "Ada"}, {"id": 2, "name": None}]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(Path(tmp_path_factory.mktemp("pki")))


@pytest.fixture(scope="module")
def tls_pg(pki: Pki) -> Iterator[PostgresServer]:
    with postgres_tls_server(pki) as server:
        context = ssl.create_default_context(cafile=pki.ca)
        context.load_cert_chain(pki.client_cert, pki.client_key)

        async def seed() -> None:
            import asyncpg

            base = f"postgresql://postgres@localhost:{server.port}"
            admin = await asyncpg.connect(f"{base}/postgres", ssl=context)
            await admin.execute("CREATE DATABASE mtls")
            for db in (admin, await asyncpg.connect(f"{base}/mtls", ssl=context)):
                await db.execute("CREATE TABLE users (id bigint PRIMARY KEY, name text)")
                await db.execute("INSERT INTO users VALUES (1, 'Ada')")
                await db.close()

        asyncio.run(seed())
        yield server


def url(server: PostgresServer, *, host: str = "localhost", db: str = "postgres") -> str:
    return f"postgresql://postgres@{host}:{server.port}/{db}"


def lookup(address: str, **options: str) -> list[dict[str, Any]]:
    return run_keys(
        {"connector": "postgres", "url": address, "postgres.table": "users", **options},
        SCHEMA,
        [1, 2],
    )


def failure(address: str, **options: str) -> Any:
    return lookup_failure(lambda: lookup(address, **options))


def test_the_right_ca_verifies_the_server(tls_pg: PostgresServer, pki: Pki) -> None:
    assert lookup(url(tls_pg), **{"postgres.tls.ca-file": pki.ca}) == FOUND
    # the libpq URL forms keep working
    assert lookup(f"{url(tls_pg)}?sslmode=verify-full&sslrootcert={pki.ca}") == FOUND


def test_an_unknown_ca_fails_at_once_naming_the_option(tls_pg: PostgresServer, pki: Pki) -> None:
    error = failure(url(tls_pg), **{"postgres.tls.ca-file": pki.other_ca})
    assert "TLS: the server's certificate does not verify" in str(error)
    assert "set postgres.tls.ca-file to the CA that signed it" in str(error)
    assert error.attempts == 1  # not retried
    error = failure(f"{url(tls_pg)}?sslmode=verify-full&sslrootcert={pki.other_ca}")
    assert "set postgres.tls.ca-file" in str(error) and error.attempts == 1


def test_a_wrong_host_name_fails_unless_the_check_is_off(tls_pg: PostgresServer, pki: Pki) -> None:
    by_ip = url(tls_pg, host="127.0.0.1")  # the certificate names localhost
    error = failure(by_ip, **{"postgres.tls.ca-file": pki.ca})
    assert "it is not for the host name of the URL" in str(error)
    assert "postgres.tls.check-hostname=false" in str(error)
    assert error.attempts == 1
    options = {"postgres.tls.ca-file": pki.ca, "postgres.tls.check-hostname": "false"}
    assert lookup(by_ip, **options) == FOUND


def test_mutual_tls(tls_pg: PostgresServer, pki: Pki, monkeypatch: pytest.MonkeyPatch) -> None:
    mtls = url(tls_pg, db="mtls")
    ca = {"postgres.tls.ca-file": pki.ca}
    error = failure(mtls, **ca)
    assert "client certificate" in str(error) and "postgres.tls.cert-file" in str(error)
    assert error.attempts == 1  # not retried
    encrypted = {
        "postgres.tls.cert-file": pki.client_cert,
        "postgres.tls.key-file": pki.client_key_encrypted,
        "postgres.tls.key-password.env": "TEST_PG_KEY_PASSWORD",
    }
    monkeypatch.setenv("TEST_PG_KEY_PASSWORD", KEY_PASSWORD)
    assert lookup(mtls, **ca, **encrypted) == FOUND
    client = {"postgres.tls.cert-file": pki.client_cert, "postgres.tls.key-file": pki.client_key}
    assert lookup(mtls, **ca, **client) == FOUND
    monkeypatch.setenv("TEST_PG_KEY_PASSWORD", "not it")
    error = failure(mtls, **ca, **encrypted)
    assert "is postgres.tls.key-password.env the key's password?" in str(error)
    assert "not it" not in str(error) and KEY_PASSWORD not in str(error)


def test_sslmode_disable_with_tls_options_is_refused() -> None:
    options = {
        "connector": "postgres",
        "url": "postgresql://h/db?sslmode=disable",
        "postgres.table": "t",
        "postgres.tls.ca-file": "ca.pem",
    }
    with pytest.raises(OptionError, match="postgres.tls.ca-file.*sslmode=disable"):
        LookupPlan.build(options, SCHEMA)
