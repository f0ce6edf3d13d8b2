"""One request of the HTTP connector and its answer as the connector trusts it, whatever the
transport: a redirect followed only within the origin (``http.redirects=same-origin``), the
body bounded by ``http.max-response-bytes`` after decompression, and a status that is not 2xx
raised as an error, retried (honouring ``Retry-After``) or not."""

from __future__ import annotations

from typing import Any

from yarl import URL

from asynclookup_http.body import parse_retry_after
from asynclookup_http.options import MAX_REDIRECTS
from asynclookup_http.transport import Transport
from asynclookup_http.urls import same_origin
from lookup_source.connector_api import (
    OverloadedError,
    PermanentError,
    TransientError,
    excerpt,
    redact_url,
)

RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})
OVERLOADED_STATUS = frozenset({429, 503})


async def exchange(
    transport: Transport,
    method: str,
    url: str,
    body: bytes | None = None,
    headers: Any = None,
    *,
    follow: bool,
    max_bytes: int,
) -> tuple[int, bytes, str | None]:
    """One request (``url`` encoded): its status, its body (bounded, decoded) and its
    Retry-After; a redirect followed only when ``follow`` (``http.redirects=same-origin``)
    allows it."""
    for _ in range(MAX_REDIRECTS + 1):
        answer = await transport.fetch(method, url, body, headers, max_bytes)
        if 300 <= answer.status < 400:
            url = redirected(method, url, answer.status, answer.location, follow)
            continue
        return answer.status, answer.body, answer.retry_after
    raise PermanentError(f"more than {MAX_REDIRECTS} redirects from {method} {redact_url(url)}")


def redirected(method: str, url: str, status: int, location: str | None, follow: bool) -> str:
    """Where a redirect may be followed (encoded), or the PermanentError that says why
    not."""
    where = f"HTTP {status} redirect from {method} {redact_url(url)}"
    if not location:
        raise PermanentError(f"{where} with no Location")
    asked = URL(url)
    target = asked.join(URL(location))
    shown = redact_url(str(target))
    if not follow:
        raise PermanentError(
            f"{where} to {shown}: redirects are not followed (set http.redirects="
            "same-origin to follow those that stay on the same scheme, host and port)"
        )
    if not same_origin(asked, target):
        raise PermanentError(
            f"{where} to {shown}: it leaves the origin, and the lookup's headers never do"
        )
    if method != "GET" and status not in (307, 308):
        raise PermanentError(f"{where} to {shown}: a {method} follows only 307 and 308")
    return str(target)


def check_status(status: int, body: bytes, retry_after: str | None, what: str) -> None:
    """Nothing for a 2xx answer; else the error its status means: retried (overloaded for 429
    and 503) with the wait of ``Retry-After``, or permanent."""
    if 200 <= status < 300:
        return
    message = f"HTTP {status} from {what}: {excerpt(body)!r}"
    if status in RETRYABLE_STATUS:
        kind = OverloadedError if status in OVERLOADED_STATUS else TransientError
        raise kind(message, retry_after=parse_retry_after(retry_after))
    raise PermanentError(message)
