"""The aiohttp transport (every Python): a ``ClientSession`` with a keep-alive pool sized to
``capacity``, no cookie jar, no redirect following, no decompression (the client decodes within
its size limit)."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Mapping
from typing import Any, ClassVar

from asynclookup_http.body import fetched
from asynclookup_http.transport import Fetched
from lookup_source.connector_api import (
    ConnectorError,
    PermanentError,
    TransientError,
    translated_errors,
)

READ_CHUNK = 1 << 16


def classify(error: Exception) -> type[ConnectorError] | ConnectorError | None:
    """What an aiohttp exception means to the engine (see ``translated_errors``)."""
    import aiohttp

    if isinstance(error, (aiohttp.ClientConnectorCertificateError, aiohttp.ClientSSLError)):
        return PermanentError
    if isinstance(error, (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError)):
        return TransientError  # refused, reset, dropped mid-answer
    return None


AIOHTTP_ERRORS = translated_errors("aiohttp", classify, tls="http")


class AiohttpResponse:
    """aiohttp's ``ClientResponse`` as a :class:`~asynclookup_http.transport.Response`."""

    __slots__ = ("_response", "content_length", "status")

    def __init__(self, response: Any) -> None:
        self._response = response
        self.status: int = response.status
        self.content_length: int | None = response.content_length

    def header(self, name: str) -> str | None:
        value = self._response.headers.get(name)
        return None if value is None else str(value)

    async def chunks(self) -> AsyncIterator[bytes]:
        content = self._response.content
        while chunk := await content.read(READ_CHUNK):
            yield bytes(chunk)

    async def read(self) -> bytes:
        return bytes(await self._response.read())

    def abort(self) -> None:
        self._response.close()


class AiohttpTransport:
    """A :class:`~asynclookup_http.transport.Transport` over aiohttp."""

    name: ClassVar[str] = "aiohttp"
    errors = AIOHTTP_ERRORS

    def __init__(self, capacity: int, headers: Mapping[str, str], tls: Any) -> None:
        self._capacity = max(1, capacity)
        self._headers = dict(headers)
        self._tls = tls  # what aiohttp's ``ssl`` takes: True, False or an SSLContext
        self._session: Any = None

    async def open(self) -> None:
        import aiohttp

        connector = aiohttp.TCPConnector(
            limit=self._capacity, limit_per_host=self._capacity, ssl=self._tls
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            headers=self._headers,
            timeout=aiohttp.ClientTimeout(total=None),
            raise_for_status=False,
            cookie_jar=aiohttp.DummyCookieJar(),  # one key's answer never reaches the next
            auto_decompress=False,  # decoded by the client, within http.max-response-bytes
        )

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    async def fetch(
        self,
        method: str,
        url: str,
        body: bytes | None,
        headers: Mapping[str, str] | None,
        max_bytes: int,
    ) -> Fetched:
        from yarl import URL

        if self._session is None:
            raise RuntimeError("the HTTP transport is used before open()")
        async with self._session.request(
            method, URL(url, encoded=True), data=body, headers=headers, allow_redirects=False
        ) as response:
            return await fetched(AiohttpResponse(response), method, url, max_bytes)


def context_of(setting: Any) -> ssl.SSLContext:
    """The SSL context aiohttp makes of its ``ssl`` argument (a context, True or False)."""
    if isinstance(setting, ssl.SSLContext):
        return setting
    context = ssl.create_default_context()
    if not setting:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context
