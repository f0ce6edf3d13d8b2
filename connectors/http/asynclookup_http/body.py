"""An answer's body as it streams in: decoded (``gzip``, ``deflate``) and counted after
decoding, so a compressed bomb costs at most ``http.max-response-bytes``; and the
``Retry-After`` header's wait."""

from __future__ import annotations

import datetime
import email.utils
import time
import zlib
from typing import Any

from asynclookup_http.transport import Fetched, Response
from lookup_source.connector_api import PermanentError, redact_url

ACCEPT_ENCODING = "gzip, deflate"
"""What the connector decodes itself (within the size limit)."""


def _decompressor(encoding: str, first: bytes) -> Any:
    """A zlib decompressor for a ``Content-Encoding``, or a PermanentError for one the
    connector does not decode."""
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if encoding == "deflate":  # RFC 1950 (zlib) as it should be, or raw deflate as often sent
        return zlib.decompressobj(zlib.MAX_WBITS if first[:1] and first[0] & 0x0F == 8 else -15)
    raise PermanentError(
        f"the answer's Content-Encoding {encoding!r} is not one the HTTP connector decodes "
        f"({ACCEPT_ENCODING}, identity)"
    )


class TooLarge(Exception):
    """A body past ``http.max-response-bytes``."""


class Malformed(Exception):
    """A compressed body that is not what its encoding says."""


MAX_MEMBERS = 64
"""gzip members one answer may hold (a valid gzip body may be several, one after another)."""


class BoundedBody:
    """A body as it streams in, decoded (``gzip``, ``deflate``) and counted after decoding:
    past ``limit`` bytes, :class:`TooLarge` — so a compressed bomb costs at most the limit.
    Data after the end of a compressed stream must be another gzip member (at most
    :data:`MAX_MEMBERS`), never bytes kept aside unread."""

    def __init__(self, encoding: str, limit: int) -> None:
        self.encoding = {"x-gzip": "gzip", "identity": ""}.get(encoding, encoding)
        self.limit = limit
        self.out = bytearray()
        self._decompressor: Any = None
        self._members = 0
        self._pending = b""

    def feed(self, chunk: bytes) -> None:
        if not self.encoding:
            self.out += chunk
        else:
            chunk, self._pending = self._pending + chunk, b""
            while chunk:
                if self._decompressor is None:
                    if self._members and self.encoding == "gzip" and len(chunk) < 2:
                        self._pending = chunk  # the next member's header, cut between chunks
                        break
                    if self._members and (self.encoding == "deflate" or chunk[:2] != b"\x1f\x8b"):
                        raise Malformed("data after the end of the compressed answer")
                    self._members += 1
                    if self._members > MAX_MEMBERS:
                        raise Malformed(f"more than {MAX_MEMBERS} compressed members")
                    self._decompressor = _decompressor(self.encoding, chunk)
                decompressor = self._decompressor
                self.out += decompressor.decompress(chunk, self.limit + 1 - len(self.out))
                if len(self.out) > self.limit:
                    break
                chunk = decompressor.unconsumed_tail
                if decompressor.eof:  # the member ended: what follows starts the next one
                    chunk = decompressor.unused_data + chunk
                    self._decompressor = None
        if len(self.out) > self.limit:
            raise TooLarge

    def finish(self) -> bytes:
        if self._pending:
            raise Malformed("data after the end of the compressed answer")
        if self._decompressor is not None:
            self.out += self._decompressor.flush()
            if not self._decompressor.eof:
                raise Malformed("the compressed answer ends before its end")
        if len(self.out) > self.limit:
            raise TooLarge
        return bytes(self.out)


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # asctime and "-0000" dates: an HTTP date is in GMT (RFC 9110)
        when = when.replace(tzinfo=datetime.timezone.utc)
    return max(0.0, when.timestamp() - time.time())


async def fetched(response: Response, method: str, url: str, limit: int) -> Fetched:
    """What a transport hands back for ``response``: a redirect unread, with its
    ``Location``; any other answer with its body (:func:`read_body`) and ``Retry-After``."""
    status = response.status
    if 300 <= status < 400:
        return Fetched(status, b"", response.header("Location"), None)
    return Fetched(
        status, await read_body(response, method, url, limit), None, response.header("Retry-After")
    )


async def read_body(response: Response, method: str, url: str, limit: int) -> bytes:
    """The body, decoded, of at most ``limit`` bytes (``http.max-response-bytes``); the
    connection is dropped, not reused, when the body is cut short."""
    length = response.content_length
    encoding = (response.header("Content-Encoding") or "").strip().lower()
    if length is not None and length > limit and encoding in ("", "identity"):
        response.abort()
        raise too_large(method, url, length, limit)
    if encoding in ("", "identity") and length is not None:
        return await response.read()  # exactly Content-Length bytes
    decoder = BoundedBody(encoding, limit)
    try:
        async for chunk in response.chunks():
            decoder.feed(chunk)
        return decoder.finish()
    except TooLarge:
        response.abort()
        raise too_large(method, url, None, limit) from None
    except (zlib.error, Malformed) as exc:
        response.abort()
        raise PermanentError(
            f"the answer to {method} {redact_url(url)} is not valid {encoding}: {exc}"
        ) from None


def too_large(method: str, url: str, length: int | None, limit: int) -> PermanentError:
    size = f" ({length:,} bytes)" if length is not None else ""
    return PermanentError(
        f"the answer to {method} {redact_url(url)} is larger than "
        f"http.max-response-bytes={limit:,}{size}, counted after decompression"
    )
