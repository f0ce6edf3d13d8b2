"""What connectors share, so that the next one does not start by copying another: URL checks,
the password-from-the-environment option, excerpts of bad answers, error columns, scanned keys,
and a pooled connection that is dropped when an exchange on it is in doubt.

>>> excerpt(b"not json at all, " * 10, limit=16)
'not json at all,...'
>>> require_url("url", "redis://h:6379", ("redis://", "rediss://"), connector="redis",
...             example="redis://localhost:6379/0")
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import pyarrow as pa

from lookup_source.connector_api.options import OptionSpec, parse_text
from lookup_source.connector_api.secrets import secret_from_env
from lookup_source.errors import OptionError
from lookup_source.redaction import redact_text, redact_url

EXCERPT_CHARS = 120
"""How much of a bad answer a message shows."""

C = TypeVar("C")


def excerpt(raw: bytes | str, limit: int = EXCERPT_CHARS) -> str:
    """The start of ``raw`` (an answer, a stored value) as text, for a message, with any URL
    in it redacted; ``...`` when it goes on."""
    window = raw[: limit * 4]  # redacted whole before the cut: no secret cut in half shows
    text = window.decode("utf-8", errors="replace") if isinstance(window, bytes) else window
    text = redact_text(text)
    return text[:limit] + ("..." if len(raw) > limit or len(text) > limit else "")


def require_url(
    option: str,
    url: str | None,
    schemes: Sequence[str],
    *,
    connector: str,
    example: str,
) -> None:
    """Raise :class:`OptionError` naming ``option`` unless ``url`` is set and starts with one
    of ``schemes`` (the password, if any, redacted in the message)."""
    if not url:
        raise OptionError(option, f"is required for connector {connector}, e.g. {example}")
    if not url.lower().startswith(tuple(schemes)):
        allowed = ", ".join(schemes[:-1]) + (" or " if len(schemes) > 1 else "") + schemes[-1]
        raise OptionError(option, f"must start with {allowed}, got {redact_url(url)!r}")


def password_env_option(connector: str) -> OptionSpec:
    """``<connector>.password.env``: the environment variable, on the executors, that holds the
    password (read with :func:`password_from_env`)."""
    return OptionSpec(
        f"{connector}.password.env",
        parse_text,
        None,
        "Name of an environment variable, on the executors, holding the password (it "
        "overrides one in the URL), so the secret never sits in an option.",
    )


def password_from_env(connector: str, options: Mapping[str, Any]) -> str | None:
    """The password ``<connector>.password.env`` names, read from this process's environment
    (None when the option is not set)."""
    spec = password_env_option(connector)
    variable = spec.get(options)
    return secret_from_env(spec.name, variable) if variable else None


def error_rows(reasons: Mapping[int, str], rows: int) -> pa.Array | None:
    """The errors column of ``Matches`` of ``rows`` rows: the reason of each row that has one
    (``reasons``: row -> why), null elsewhere; None when no row has one."""
    if not reasons:
        return None
    return pa.array([reasons.get(row) for row in range(rows)], type=pa.string())


def scanned_keys(values: Sequence[Any]) -> pa.Array:
    """Key values read by a scan as an Arrow array of their own type, or as text when they do
    not make one (the scan converts them to the declared key types, naming those that fail)."""
    try:
        return pa.array(list(values))
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return pa.array([None if v is None else str(v) for v in values], type=pa.string())


@asynccontextmanager
async def pooled(
    acquire: Awaitable[C],
    release: Callable[[C], Awaitable[Any]],
    drop: Callable[[C], Any],
) -> AsyncIterator[C]:
    """A connection from a pool for one exchange. If the exchange fails or is cancelled, the
    connection is in doubt (a cut socket, a half-read answer): it is dropped (``drop``), never
    handed to the next request, so one cut cannot starve the pool::

        async with pooled(pool.acquire(), pool.release, lambda c: c.terminate()) as connection:
            rows = await connection.fetch(query)
    """
    connection = await acquire
    try:
        yield connection
    except BaseException:
        dropped = drop(connection)
        if inspect.isawaitable(dropped):
            await dropped
        raise
    finally:
        await release(connection)
