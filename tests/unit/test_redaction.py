"""Secrets never reach a text the project writes: URLs in any form, the usual secret parameter
names, texts copied from a library, the error column, failures and logs."""

from __future__ import annotations

import logging

import pyarrow as pa
import pytest

from lookup_source.connector_api import translated_errors
from lookup_source.errors import LookupFailedError
from lookup_source.redaction import redact_text, redact_url, secret_name
from tests.fakes import FakeClient, make_config, make_options, make_spec

SECRET = "S3cr3tValue"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://user:pw@h:1/0", "redis://user:***@h:1/0"),
        ("redis://:pw@h", "redis://:***@h"),
        ("https://TOKEN@host/x", "https://***@host/x"),  # a lone token as userinfo
        ("postgresql://user:p@ss@host/db", "postgresql://user:***@host/db"),  # "@" in it
        ("https://h/users/bob@example.com", "https://h/users/bob@example.com"),  # a path's "@"
        ("http://h/u/k1?api_key=A&id=7", "http://h/u/k1?api_key=***&id=7"),
        ("http://h/?access_token=A", "http://h/?access_token=***"),
        ("http://h/?client_secret=A&scope=x", "http://h/?client_secret=***&scope=x"),
        ("http://h/blob?sv=1&sig=A", "http://h/blob?sv=1&sig=***"),
        ("http://h/?X-Amz-Signature=A&X-Amz-Credential=B", None),
        ("http://h/?PASSWORD=A", "http://h/?PASSWORD=***"),
        ("http://h/?AccessToken=A", "http://h/?AccessToken=***"),
        ("http://h/#access_token=A", "http://h/#access_token=***"),
        ("http://h/users/{key}?page=2", "http://h/users/{key}?page=2"),
        (
            "https://h/cb?next=redis://app:pw@cache:6379/0",
            "https://h/cb?next=redis://app:***@cache:6379/0",
        ),
        ("redis://:pa/ss@host:6379/0", "redis://:***@host:6379/0"),  # a "/" in the password
        ("postgresql://app:pa#ss@db/x", "postgresql://app:***@db/x"),
        ("http://127.0.0.1:8080/users/bob@example.com", None),  # a port, then an "@" in the path
        (
            "https://h/u/1?pw=A&passphrase=A&sign=A&hmac=A&otp=A",
            "https://h/u/1?pw=***&passphrase=***&sign=***&hmac=***&otp=***",
        ),
        ("https://h/u/1;jsessionid=A", "https://h/u/1;jsessionid=***"),
    ],
)
def test_a_url_keeps_no_secret(url: str, shown: str | None) -> None:
    redacted = redact_url(url)
    if shown is not None:
        assert redacted == shown
    for secret in ("pw", "TOKEN", "p@ss", "=A", "=B"):
        if secret in url and (shown is None or secret not in shown):
            assert secret not in redacted, redacted


def test_secret_names_in_any_case_and_form() -> None:
    secret = ["password", "X-Api-Key", "api_key", "apikey", "client_secret", "refresh-token"]
    secret += ["Authorization", "sig", "Signature", "private_key", "x-goog-credential"]
    assert all(secret_name(name) for name in secret), [n for n in secret if not secret_name(n)]
    plain = ["page", "id", "name", "keys", "limit", "format", "Accept"]
    assert not any(secret_name(name) for name in plain)


@pytest.mark.parametrize(
    "text",
    [
        f"GET /users/1?auth[token]={SECRET} failed",  # a path echoed back, no scheme
        f"Authorization: Bearer {SECRET}",  # a header written out
        f"{{'x-api-key': '{SECRET}', 'accept': 'application/json'}}",
        f"dsn=postgresql://app:{SECRET}@db/x",
        f"upstream said: /users/1?access_token={SECRET} -> 500",
    ],
)
def test_secrets_without_a_url_around_them_are_redacted(text: str) -> None:
    assert SECRET not in redact_text(text), redact_text(text)


def test_the_lookups_own_secrets_are_hidden_even_cut_in_an_excerpt() -> None:
    from lookup_source.connector_api import excerpt
    from lookup_source.redaction import Redactor

    redact = Redactor(["Bearer tok-1234567890", "tok-1234567890"])
    body = "x" * 100 + "tok-1234567890" + "y" * 100
    shown = redact(f"HTTP 401: {excerpt(body, limit=106)!r}")
    assert "tok-12" not in shown and "***" in shown
    assert redact("a " * 3 + "tok-1234567890 echoed") == "a a a *** echoed"


def test_urls_inside_a_library_text_are_redacted() -> None:
    text = (
        "TooManyRedirects: (), message='', "
        f"url='http://127.0.0.1:1/users/k1?api_key={SECRET}' after https://me:{SECRET}@h/x"
    )
    assert SECRET not in redact_text(text)
    assert "url='http://127.0.0.1:1/users/k1?api_key=***'" in redact_text(text)


class _LibraryError(Exception):
    __module__ = "somelib.errors"


def test_a_translated_library_error_carries_no_secret_nor_does_its_cause() -> None:
    import traceback

    with pytest.raises(Exception) as info, translated_errors("somelib", lambda e: None):
        raise _LibraryError(f"GET https://api/users/1?token={SECRET} refused")
    assert SECRET not in str(info.value) and "token=***" in str(info.value)
    printed = "".join(traceback.format_exception(info.value))
    assert SECRET not in printed  # the chained cause is the library's error, redacted
    assert "somelib.errors._LibraryError" in printed and "test_redaction.py" in printed


def test_a_failure_and_the_error_column_carry_no_secret() -> None:
    failure = LookupFailedError(
        connector="http",
        address=f"https://u:{SECRET}@api/users/{{key}}",
        failed_keys=1,
        attempts=1,
        reason=f"HTTP 500 from GET https://api/users/1?api_key={SECRET}",
    )
    assert SECRET not in str(failure) and SECRET not in failure.reason

    from lookup_source.engine.runner import run_lookups

    class Leaky(FakeClient):
        async def lookup(self, keys):  # type: ignore[no-untyped-def]
            raise RuntimeError(f"cannot reach https://api/users?key={SECRET}")

    spec = make_spec(make_options(on_error="column", max_attempts=1))
    batch = pa.record_batch({"k": pa.array([1, 2], pa.int64())})
    rows = [
        row
        for out in run_lookups([batch], spec, make_config(spec), client_factory=Leaky)
        for row in out.to_pylist()
    ]
    assert len(rows) == 2 and all(row["_lookup_error"] for row in rows)
    assert all(SECRET not in row["_lookup_error"] for row in rows), rows


def test_logs_carry_no_secret(caplog: pytest.LogCaptureFixture) -> None:
    import lookup_source  # noqa: F401  (installs the filter)

    log = logging.getLogger("lookup_source")
    with caplog.at_level(logging.WARNING, logger="lookup_source"):
        try:
            raise ValueError(f"cannot reach https://u:{SECRET}@h/x")
        except ValueError:
            log.warning("failed at %s", f"redis://a:{SECRET}@c/0", exc_info=True)
    (record,) = [r for r in caplog.records if r.name == "lookup_source"]
    assert record.getMessage() == "failed at redis://a:***@c/0"
    assert record.exc_text and "ValueError: cannot reach https://u:***@h/x" in record.exc_text
    assert record.exc_info is None  # a formatter of its own cannot reach the exception itself
    assert SECRET not in caplog.text  # whatever formatter the handler has
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="lookup_source"):
        log.warning("service answered: %s", f"GET /users/1?access_token={SECRET} -> 500")
    assert SECRET not in caplog.records[0].getMessage()  # no scheme in the text: still hidden


def test_a_failures_cause_is_kept_when_clean_and_redacted_when_it_quotes_a_secret() -> None:
    from lookup_source.connector_api.boundary import LibraryError, clean_cause
    from lookup_source.redaction import Redactor

    redact = Redactor(["zq81echoedroutingvalue77"])
    clean = TimeoutError("the store took longer than 2 s")
    assert clean_cause(clean, redact) is clean  # nothing to hide: the error itself, its type kept
    quoting = PermissionError("403 with x-routing: zq81echoedroutingvalue77")
    cause = clean_cause(quoting, redact)
    assert isinstance(cause, LibraryError)
    assert str(cause) == "builtins.PermissionError: 403 with x-routing: ***"
    try:  # a clean error whose context quotes it: the chain a traceback prints is checked
        try:
            raise quoting
        except PermissionError:
            raise ConnectionError("the store closed the connection") from None
    except ConnectionError as suppressed:
        assert clean_cause(suppressed, redact) is suppressed  # (from None: context not printed)
    try:
        try:
            raise quoting
        except PermissionError:
            raise ConnectionError("the store closed the connection")  # noqa: B904
    except ConnectionError as chained:
        replaced = clean_cause(chained, redact)
        assert isinstance(replaced, LibraryError) and "zq81" not in str(replaced)
        assert replaced.__suppress_context__
