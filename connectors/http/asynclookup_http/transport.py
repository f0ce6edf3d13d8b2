"""How the HTTP connector speaks HTTP: a small transport interface, so that a client library
is one implementation among others (``http.client``).

A transport sends one request as it is given — the URL already encoded, no redirect followed,
no cookie kept — and hands back the answer's status and its body, read within the size limit
and decoded by :func:`asynclookup_http.body.fetched` (a :class:`Response` is what it reads
from). Everything the connector promises beyond that (redirects only within the origin, a
body bounded after decompression, Retry-After, errors that name their key) is the connector's
(:mod:`asynclookup_http.exchange`, :mod:`asynclookup_http.client`), the same whatever the
transport.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, ClassVar, NamedTuple, Protocol


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


class Fetched(NamedTuple):
    """One request's answer as the connector takes it: its status; its body, decoded and
    bounded (empty for a redirect); a redirect's ``Location``; ``Retry-After`` (for an answer
    that is not 2xx)."""

    status: int
    body: bytes
    location: str | None
    retry_after: str | None


class Transport(Protocol):
    """One HTTP client library, kept open for the worker's life (a pool of keep-alive
    connections), sending requests for every key of every task."""

    name: ClassVar[str]
    errors: Any
    """A context manager translating the library's exceptions (``translated_errors``)."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def fetch(
        self,
        method: str,
        url: str,
        body: bytes | None,
        headers: Mapping[str, str] | None,
        max_bytes: int,
    ) -> Fetched:
        """Send one request (``url`` as it is: already encoded) and take its answer: a
        redirect's status and ``Location`` unread, any other answer's body read within
        ``max_bytes`` after decoding (:func:`asynclookup_http.body.fetched` does this from a
        :class:`Response`; a transport may take a shorter path for the common answer)."""
        ...
