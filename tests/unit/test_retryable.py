"""One rule decides what is retried (lookup_source.connector_api.retryable), and every part that
asks — the connector boundary, the attempt loop, the function adapter — gives the same answer."""

from __future__ import annotations

import asyncio
import socket
import ssl
from typing import Any

import pytest

from lookup_source.connector_api import failure_kind, is_retryable, translate_error
from lookup_source.errors import (
    ConfigurationError,
    LookupTimeoutError,
    MissingSecretError,
    OverloadedError,
    PermanentError,
    RecordError,
    TransientError,
)
from lookup_source.functions import FunctionLookupClient


def _certificate_error() -> ssl.SSLCertVerificationError:
    error = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] self-signed")
    error.verify_code = 19
    error.verify_message = "self-signed certificate in certificate chain"
    return error


CASES: list[tuple[str, BaseException, bool]] = [
    ("refused", ConnectionRefusedError(111, "Connection refused"), True),
    ("reset", ConnectionResetError(104, "Connection reset by peer"), True),
    ("host does not resolve", socket.gaierror(-2, "Name or service not known"), True),
    ("no route", OSError(113, "No route to host"), True),
    ("timeout", TimeoutError(), True),
    ("asyncio timeout", asyncio.TimeoutError(), True),
    ("certificate", _certificate_error(), False),
    ("not TLS on this port", ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version"), False),
    ("transient", TransientError("busy"), True),
    ("overloaded", OverloadedError("429", retry_after=1.0), True),
    ("our timeout", LookupTimeoutError("no answer within timeout.ms=10"), True),
    ("permanent", PermanentError("refused"), False),
    ("missing secret", MissingSecretError("unset", option="x.password.env", variable="P"), False),
    ("configuration", ConfigurationError("bad"), False),
    ("record", RecordError("not JSON"), False),
    ("a bug", KeyError("name"), False),
    ("a type error", TypeError("unsupported operand"), False),
    # uvloop, writing to a connection it closed under the request (a cut connection)
    (
        "closed transport",
        RuntimeError(
            "unable to perform operation on <TCPTransport closed=True reading=False "
            "0x7f2c>; the handler is closed"
        ),
        True,
    ),
    ("another runtime error", RuntimeError("Event loop is closed"), False),
]


@pytest.mark.parametrize(("what", "error", "retried"), CASES, ids=[c[0] for c in CASES])
def test_every_part_gives_the_same_answer(what: str, error: BaseException, retried: bool) -> None:
    assert is_retryable(error) is retried
    # the boundary of a connector whose classifier leaves the error to the rule
    boundary: Any = translate_error("lib", lambda e: None, error, tls="lib")  # type: ignore[arg-type]
    if boundary is not error:
        assert is_retryable(boundary) is retried
        assert isinstance(boundary, TransientError if retried else PermanentError)
    # the adapter of a user's own function
    if not isinstance(error, Exception):
        return
    adapted = FunctionLookupClient._translated(error, "fetch(7)")
    assert is_retryable(adapted) is retried
    if adapted is not error:
        assert isinstance(adapted, TransientError if retried else PermanentError)
        assert "fetch(7)" in str(adapted) or "TLS" in str(adapted)


def test_a_tls_failure_names_the_option_when_the_connector_is_known() -> None:
    named = failure_kind(_certificate_error(), tls="redis")
    assert isinstance(named, PermanentError)
    assert "redis.tls.ca-file" in str(named)
    assert failure_kind(_certificate_error()) is PermanentError  # unnamed: not retried all the same


def test_a_bug_in_a_connector_is_left_as_it_is_by_the_boundary() -> None:
    bug = KeyError("name")
    assert translate_error("lib", lambda e: None, bug) is bug  # not the library's: not touched
    assert not is_retryable(bug)
