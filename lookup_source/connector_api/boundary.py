"""Translate a client library's exceptions into asynclookup's, at a connector's boundary.

The engine decides what to retry from the exception tree alone (:class:`TransientError` is
retried, :class:`PermanentError` is not); it never sees a redis, aiohttp or asyncpg exception.
A connector wraps each method that talks to its store::

    from lookup_source.connector_api import PermanentError, TransientError, translated_errors


    def classify(error: Exception) -> type[ConnectorError] | ConnectorError | None:
        if isinstance(error, mylib.AuthError):
            return PermanentError  # a wrong password does not get better by retrying
        if isinstance(error, mylib.Unavailable):
            return TransientError
        return None  # the defaults


    MYLIB_ERRORS = translated_errors("mylib", classify, tls="mylib")


    async def lookup_arrow(self, keys):
        with MYLIB_ERRORS:
            ...

With ``tls="<connector>"``, a certificate problem is named first, whatever the classifier says
(:func:`~lookup_source.connector_api.tls.tls_failure`: which ``<connector>.tls.*`` option to
fix); it is never retried.

An exception the classifier does not place is translated by the one rule of
:mod:`~lookup_source.connector_api.retryable`: a timeout or an ``OSError`` (refused, reset or
dropped connections, a host that does not resolve) becomes a :class:`TransientError`, any other
exception defined by the library (its top-level module is ``library``) a
:class:`PermanentError`. asynclookup's own errors pass through; other exceptions (a bug in the
connector) are not touched. The translated error keeps the original, redacted
(:class:`LibraryError`: its type's name, text and traceback), as its ``__cause__`` and
names it in its message: ``redis ConnectionError: Error 111 connecting to ...``. With
``redact=Redactor(secrets)``, the request's own secrets are removed from those texts too, for a
library that quotes one outside any URL (libpq quotes a password it cannot parse).
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Literal

from lookup_source.connector_api.retryable import failure_kind, is_os_level
from lookup_source.connector_api.tls import tls_failure
from lookup_source.errors import AsyncLookupError, ConnectorError
from lookup_source.redaction import redact_text

Classifier = Callable[[Exception], "type[ConnectorError] | ConnectorError | None"]
"""Given a library's exception, the class to translate it into (or the error itself, with a
message of its own), or None for the default."""


def translate_error(
    library: str,
    classify: Classifier,
    error: Exception,
    tls: str | None = None,
    redact: Callable[[str], str] = redact_text,
) -> AsyncLookupError | Exception:
    """``error`` as asynclookup sees it (see the module docstring); ``error`` itself if it is
    already one of ours or foreign to ``library``. ``redact`` clears the library's text
    (:func:`redact_text`; a :class:`~lookup_source.redaction.Redactor` also removes the
    request's own secrets, which a library may quote outside any URL)."""
    if isinstance(error, AsyncLookupError):
        return error
    kind: type[ConnectorError] | ConnectorError | None = (
        tls_failure(error, tls) if tls is not None else None
    )
    if kind is None:
        kind = classify(error)
    if kind is None:  # the one rule decides, for the connection's failures and the library's
        if not is_os_level(error) and type(error).__module__.partition(".")[0] != library:
            return error  # neither: a bug of the connector's own, not touched
        kind = failure_kind(error, tls=tls)
    if isinstance(kind, ConnectorError):  # the message is written already
        kind.__cause__ = redacted_cause(error, redact)
        return kind
    text = redact(str(error).strip())  # a library's text may quote a URL's secrets
    name = f"{library} {type(error).__name__}"
    translated = kind(f"{name}: {text}" if text else name)
    translated.__cause__ = redacted_cause(error, redact)
    return translated


class LibraryError(Exception):
    """A client library's exception, its text redacted (the cause of a translated error): a
    traceback shows where the library failed and why, never the URL's secrets it quoted."""


def redacted_cause(
    error: BaseException, redact: Callable[[str], str] = redact_text
) -> LibraryError:
    """``error`` as the cause a translated error keeps: its type's full name and its text,
    redacted, with its traceback (not its own causes, which may quote the same secrets)."""
    kind = type(error)
    text = redact(str(error).strip())
    name = f"{kind.__module__}.{kind.__qualname__}"
    cause = LibraryError(f"{name}: {text}" if text else name).with_traceback(error.__traceback__)
    cause.__suppress_context__ = True
    return cause


def clean_cause(error: BaseException, redact: Callable[[str], str] = redact_text) -> BaseException:
    """``error`` as the cause of an error that leaves the task (a ``LookupFailedError``, whose
    traceback Spark prints and sends to the driver): ``error`` itself when no text of it nor
    of the chain a traceback prints (its causes and contexts) has anything for ``redact`` to
    hide; else :func:`redacted_cause` (its type's name, text and traceback, redacted)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        text = str(current)
        if redact(text) != text:
            return redacted_cause(error, redact)
        if current.__cause__ is not None:
            current = current.__cause__
        else:
            current = None if current.__suppress_context__ else current.__context__
    return error


class translated_errors:
    """Raise what the body raises translated by :func:`translate_error` (a class, not a
    generator: it is entered on every request of a hot path)."""

    __slots__ = ("classify", "library", "redact", "tls")

    def __init__(
        self,
        library: str,
        classify: Classifier,
        *,
        tls: str | None = None,
        redact: Callable[[str], str] = redact_text,
    ) -> None:
        self.library = library
        self.classify = classify
        self.tls = tls
        self.redact = redact

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> Literal[False]:
        if not isinstance(error, Exception):
            return False  # no error, or a cancellation, KeyboardInterrupt, GeneratorExit
        translated = translate_error(self.library, self.classify, error, self.tls, self.redact)
        if translated is error:
            return False
        raise translated from translated.__cause__
