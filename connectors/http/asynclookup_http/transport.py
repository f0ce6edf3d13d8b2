"""How the HTTP connector speaks HTTP: a small transport interface, so that a client library
is one implementation among others (``http.client``).

A transport sends one request as it is given — the URL already encoded, no redirect followed,
no cookie kept, the body not decompressed — and hands back the answer's status, headers and raw
body chunks. Everything the connector promises beyond that (redirects only within the origin, a
body bounded after decompression, Retry-After, errors that name their key) is the connector's
(:mod:`asynclookup_http.exchange`, :mod:`asynclookup_http.client`), the same whatever the
transport.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any, ClassVar, Protocol


class Response(Protocol):
    """An answer as it arrives: its status and headers, then its raw body."""

    status: int
    content_length: int | None

    def header(self, name: str) -> str | None:
        """A header's value (names compare without case), or None."""

    def chunks(self) -> AsyncIterator[bytes]:
        """The body as sent (not decompressed), chunk by chunk."""

    async def read(self) -> bytes:
        """The whole body as sent (``Content-Length`` bytes)."""

    def abort(self) -> None:
        """Drop the connection: the body is cut short and must not be read by the next
        request over it."""


class Transport(Protocol):
    """One HTTP client library, kept open for the worker's life (a pool of keep-alive
    connections), sending requests for every key of every task."""

    name: ClassVar[str]
    errors: Any
    """A context manager translating the library's exceptions (``translated_errors``)."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    def send(
        self,
        method: str,
        url: str,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> AbstractAsyncContextManager[Response]:
        """Send one request (``url`` as it is: already encoded); its answer, within the
        ``async with``."""
