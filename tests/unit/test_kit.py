"""The connector kit (lookup_source.connector_api.kit and friends): what the connectors share."""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

import pyarrow as pa
import pytest

from lookup_source.connector_api import (
    KeyTemplate,
    OptionError,
    PermanentError,
    TransientError,
    error_rows,
    excerpt,
    password_env_option,
    password_from_env,
    pooled,
    require_url,
    scanned_keys,
    translated_errors,
)
from lookup_source.errors import MissingSecretError


def test_excerpt_of_bytes_and_text() -> None:
    assert excerpt(b"short") == "short"
    assert excerpt(b"\xff" + b"a" * 200) == "\ufffd" + "a" * 119 + "..."
    assert excerpt("x" * 10, limit=4) == "xxxx..."


def test_require_url_names_the_option_and_hides_the_password() -> None:
    with pytest.raises(OptionError, match="option 'url': is required for connector redis, e.g."):
        require_url("url", None, ("redis://",), connector="redis", example="redis://h")
    with pytest.raises(OptionError) as raised:
        require_url(
            "http.batch.url",
            "ftp://me:secret@h/x",
            ("http://", "https://"),
            connector="http",
            example="https://h",
        )
    assert str(raised.value) == (
        "option 'http.batch.url': must start with http:// or https://, got 'ftp://me:***@h/x'"
    )
    require_url("url", "HTTPS://h", ("http://", "https://"), connector="http", example="")


def test_password_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = password_env_option("mystore")
    assert spec.name == "mystore.password.env" and spec.default is None
    assert password_from_env("mystore", {}) is None
    monkeypatch.setenv("MYSTORE_PW", "s3cret")
    assert password_from_env("mystore", {"mystore.password.env": "MYSTORE_PW"}) == "s3cret"
    with pytest.raises(MissingSecretError, match="'mystore.password.env' names .* 'NOPE'"):
        password_from_env("mystore", {"mystore.password.env": "NOPE"})


def test_error_rows_and_scanned_keys() -> None:
    assert error_rows({}, 3) is None
    assert error_rows({1: "bad"}, 3).to_pylist() == [None, "bad", None]  # type: ignore[union-attr]
    assert scanned_keys([1, 2, None]).type == pa.int64()
    assert scanned_keys(["a", 1]).to_pylist() == ["a", "1"]  # mixed: as text


def test_pooled_drops_a_connection_in_doubt_and_always_releases() -> None:
    events: list[str] = []

    class Connection:
        async def drop(self) -> None:
            events.append("dropped")

    async def acquire() -> Connection:
        events.append("acquired")
        return Connection()

    async def release(connection: Connection) -> None:
        events.append("released")

    async def drop(connection: Connection) -> None:
        await connection.drop()

    async def exchange(fail: BaseException | None) -> None:
        async with pooled(acquire(), release, drop):
            if fail is not None:
                raise fail

    asyncio.run(exchange(None))
    assert events == ["acquired", "released"]
    events.clear()
    with pytest.raises(ConnectionResetError):
        asyncio.run(exchange(ConnectionResetError()))
    assert events == ["acquired", "dropped", "released"]
    events.clear()
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(exchange(asyncio.CancelledError()))
    assert events == ["acquired", "dropped", "released"]  # a cancelled exchange is in doubt


def test_a_key_template_gives_its_scan_pattern() -> None:
    glob, regex = KeyTemplate("p", "user[{key}]*", ("id",)).scan_pattern()
    assert glob == "user\\[*\\]\\*"
    match = regex.fullmatch("user[42]*")
    assert match is not None and match.groups() == ("42",)
    glob, regex = KeyTemplate("p", "{tenant}:{id}", ("tenant", "id")).scan_pattern()
    assert glob == "*:*"
    match = regex.fullmatch("acme:7:x")
    assert match is not None and match.groups() == ("acme", "7:x")


def test_a_key_is_written_into_a_template_by_its_value_not_its_class() -> None:
    import datetime
    import enum

    from lookup_source.connector_api import key_text

    class Tier(str, enum.Enum):  # a subclass of str: not taken for a plain text
        GOLD = "gold"

    class Count(int):
        pass

    written = [
        key_text(v)
        for v in (7, -3, "a b", True, False, b"k\xff", Count(5), datetime.date(2026, 1, 2))
    ]
    assert written == ["7", "-3", "a b", "true", "false", "k\udcff", "5", "2026-01-02"]
    assert key_text(Tier.GOLD) == str(Tier.GOLD)
    template = KeyTemplate("url", "/u/{key}", ("id",))
    assert [template.render(k) for k in (42, "x", True)] == ["/u/42", "/u/x", "/u/true"]


def test_translated_errors_name_a_certificate_problem_first() -> None:
    def classify(error: Exception) -> Any:
        return TransientError  # whatever the library says: a certificate problem is permanent

    failure = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] unknown ca")
    named = pytest.raises(PermanentError, match="set mystore.tls.ca-file to the CA")
    with named, translated_errors("ssl", classify, tls="mystore"):
        raise failure
    with pytest.raises(TransientError), translated_errors("ssl", classify):
        raise failure


def test_a_handshake_check_asks_the_server_once_and_only_before_a_success(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The bookkeeping of HandshakeCheck (the real refusal is tested against a real Redis in
    connectors/redis/tests/test_redis_tls.py)."""
    from lookup_source.connector_api import tls

    asked: list[str] = []

    async def refusal(host: str, port: int, context: Any, prefix: str) -> PermanentError | None:
        asked.append(host)
        await asyncio.sleep(0.01)
        return PermanentError(f"TLS: the server requires a client certificate: set {prefix}...")

    monkeypatch.setattr(tls, "handshake_refusal", refusal)
    made: list[ssl.SSLContext] = []

    def context() -> ssl.SSLContext:  # made only to ask the server
        made.append(ssl.create_default_context())
        return made[-1]

    async def failing(check: tls.HandshakeCheck) -> BaseException:
        try:
            async with check:
                raise TransientError("redis ConnectionError: Connection reset by peer")
        except Exception as error:
            return error
        raise AssertionError("not raised")

    async def together() -> list[BaseException]:
        check = tls.HandshakeCheck("redis", "refusing", 6380, context)
        return list(await asyncio.gather(*(failing(check) for _ in range(5))))

    errors = asyncio.run(together())
    assert asked == ["refusing"]  # five requests failing together: the server asked once
    assert len(made) == 1
    assert {type(e) for e in errors} == {PermanentError}
    assert all("set redis..." in str(e) for e in errors)
    assert all(isinstance(e.__cause__, TransientError) for e in errors)
    assert len({id(e) for e in errors}) == 5  # each request raises an error of its own

    async def after_a_success() -> BaseException:
        check = tls.HandshakeCheck("redis", "served", 6380, context)
        async with check:
            pass  # a request succeeded: the handshake works
        return await failing(check)

    error = asyncio.run(after_a_success())
    assert type(error) is TransientError and "served" not in asked
    assert len(made) == 1  # no context made where the server is not asked

    async def other_errors() -> list[BaseException]:
        check = tls.HandshakeCheck("redis", "other", 6380, context)
        found = []
        for raised in (PermanentError("bad command"), ValueError("a bug")):
            try:
                async with check:
                    raise raised
            except Exception as error:
                found.append(error)
        return found

    assert [type(e) for e in asyncio.run(other_errors())] == [PermanentError, ValueError]
    assert "other" not in asked  # only a transient failure can hide a refusal

    async def nothing_to_say() -> list[BaseException]:
        check = tls.HandshakeCheck("redis", "accepting", 6380, context)
        return [await failing(check), await failing(check)]

    monkeypatch.setattr(tls, "handshake_refusal", lambda *a: _none(asked, a[0]))
    assert [type(e) for e in asyncio.run(nothing_to_say())] == [TransientError] * 2
    assert asked.count("accepting") == 1  # a server that accepts the handshake: asked once


async def _none(asked: list[str], host: str) -> None:
    asked.append(host)


def test_a_family_of_options_is_read_through_its_declaration() -> None:
    from lookup_source.connector_api import OptionSpec

    header = OptionSpec("acme.header.", str, None, "A header.", prefix=True)
    options = {
        "acme.header.accept": "text/plain",
        "acme.header.x-token.env": "TOKEN",
        "acme.header.unset": None,
        "acme.table": "users",
    }
    assert header.family(options) == [("accept", "text/plain"), ("x-token.env", "TOKEN")]
    with pytest.raises(ValueError, match="acme.table"):
        OptionSpec("acme.table", str, None, "A table.").family(options)


def test_tls_options_are_declared_once_and_read_through_their_declarations() -> None:
    from lookup_source.connector_api.tls import TlsOptions, TlsSettings, tls_option_specs
    from lookup_source.errors import OptionError

    declared = TlsOptions.of("acme", "the store")
    assert [s.name for s in tls_option_specs("acme", "the store")] == [
        s.name for s in declared.specs
    ]
    given = {"acme.tls.ca-file": "/ca.pem", "acme.tls.check-hostname": False}
    settings = TlsSettings.from_options("acme", given)
    assert (settings.ca_file, settings.cert_file, settings.check_hostname) == (
        "/ca.pem",
        None,
        False,
    )
    assert settings.configured
    assert not TlsSettings.from_options("acme", {}).configured
    with pytest.raises(OptionError, match=r"acme\.tls\.key-file.*acme\.tls\.cert-file"):
        TlsSettings.from_options("acme", {"acme.tls.key-file": "/key.pem"})
