"""Whether a failure may succeed if tried again: the one rule every part of asynclookup asks —
the connector boundary (:func:`~lookup_source.connector_api.boundary.translate_error`), the
attempt loop, and the adapter of your own ``fetch=`` function.

The rule, in this order:

1. asynclookup's own errors say it by their class: a :class:`TransientError` (and so a
   :class:`LookupTimeoutError` or an :class:`OverloadedError`) is retried; a
   :class:`PermanentError`, and every other error of ours, is not.
2. A TLS failure that no retry can fix — a certificate that does not verify, a client
   certificate the server wants or refuses, a port that does not speak TLS — is permanent,
   whatever wraps it (an ``ssl.SSLError`` is an ``OSError`` too: it is told apart first).
3. A timeout or any other ``OSError`` — refused, reset or dropped connections, a host name that
   does not resolve (``socket.gaierror``) — is transient; so is a write to a connection the
   event loop has already closed under it (uvloop's ``RuntimeError: unable to perform
   operation on <TCPTransport closed=True>; the handler is closed``: a dropped connection).
4. Anything else is permanent.

A connector says what its library's own exceptions mean in one place, the ``classify`` it
hands to :func:`~lookup_source.connector_api.boundary.translated_errors`; what it leaves to the
defaults follows this rule::

    >>> import socket
    >>> is_retryable(socket.gaierror(-2, "Name or service not known"))
    True
    >>> is_retryable(KeyError("user"))
    False
"""

from __future__ import annotations

import asyncio

from lookup_source.connector_api.tls import tls_failure
from lookup_source.errors import AsyncLookupError, PermanentError, TransientError


def failure_kind(
    error: BaseException, *, tls: str | None = None
) -> type[TransientError] | type[PermanentError] | PermanentError:
    """What ``error`` means by the rule: :class:`TransientError` or :class:`PermanentError`
    (the class); for a TLS failure, given the connector's ``tls`` name, the
    :class:`PermanentError` that names its ``<tls>.tls.*`` option to fix."""
    if isinstance(error, AsyncLookupError):
        return TransientError if isinstance(error, TransientError) else PermanentError
    named = tls_failure(error, tls or "tls")
    if named is not None:
        return named if tls else PermanentError
    if is_os_level(error):
        return TransientError
    return PermanentError


def is_retryable(error: BaseException) -> bool:
    """Whether ``error`` may succeed if tried again (the rule of this module)."""
    return failure_kind(error) is TransientError


def is_os_level(error: BaseException) -> bool:
    """A timeout, an ``OSError``, or a connection the event loop closed under the request: a
    failure of the connection rather than of the request, whatever library raised it (which
    the boundary translates even when it is not the library's own)."""
    if isinstance(error, (OSError, TimeoutError, asyncio.TimeoutError)):
        return True
    return isinstance(error, RuntimeError) and _closed_transport(str(error))


def _closed_transport(text: str) -> bool:
    """uvloop's words for an operation on a transport it has closed (a dropped connection)."""
    return "unable to perform operation on" in text and "closed=True" in text
