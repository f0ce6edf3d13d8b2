"""The native transport (``http.client=pyreqwest``): pyreqwest, Rust's reqwest and hyper with
rustls, on Python 3.11 and newer — about half aiohttp's CPU per GET on uvloop (the bench's
per-key HTTP scenario). Installed with ``pip install "asynclookup-http[native]"``.

Set up to keep every promise of the connector: no redirect followed (the client follows those
``http.redirects`` allows), no cookie store, no decompression (the client decodes within
``http.max-response-bytes``), the body streamed; TLS from the ``http.tls.*`` options (a CA in
PEM, a client certificate and key in PEM, an encrypted key decrypted in memory with
``cryptography``). What rustls cannot do as the options ask — not checking the host name
alone — is said by :func:`unsupported`, and ``http.client=auto`` then takes aiohttp. Errors
are translated at this boundary, their text redacted (pyreqwest quotes a request's query
string), and a certificate problem named with the option to fix, in the same words as over
aiohttp.

A request that the engine abandons (a timeout, a hedge's loser) goes on in pyreqwest's runtime
until its own timeout: each request carries ``timeout.ms`` and :data:`BACKSTOP` (the engine's
limit comes first, so an attempt ends in the engine's timeout, never in a race with
pyreqwest's), and the pool is not capped at ``capacity`` (the engine's slots are), so an
abandoned request never holds a slot the engine has handed on.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Mapping
from datetime import timedelta
from typing import Any, ClassVar

from asynclookup_http.body import fetched, too_large
from asynclookup_http.transport import Fetched
from lookup_source.connector_api import (
    ConnectorError,
    PermanentError,
    TlsSettings,
    TransientError,
    translated_errors,
)

BACKSTOP = timedelta(seconds=1)
"""How much longer than ``timeout.ms`` pyreqwest's own timer waits (see the module)."""

IDLE = timedelta(seconds=90)
"""How long an idle keep-alive connection stays in the pool (reqwest's default)."""


def available() -> str | None:
    """Why the native transport cannot run here, or None."""
    if sys.version_info < (3, 11):
        return "pyreqwest needs Python 3.11 or newer"
    try:
        import pyreqwest.client  # noqa: F401
    except ImportError:
        return 'pyreqwest is not installed (pip install "asynclookup-http[native]")'
    return None


def unsupported(tls: TlsSettings, verify: bool) -> str | None:
    """Why rustls cannot keep these TLS options as asked, or None."""
    if verify and not tls.check_hostname:
        return "rustls cannot skip the host name check alone (http.tls.check-hostname=false)"
    if tls.key_password_env:
        try:
            import cryptography  # noqa: F401 - decrypts the key in memory for rustls
        except ImportError:
            return (
                "rustls takes no password for a client key (http.tls.key-password.env), and "
                "cryptography, which would decrypt it, is not installed"
            )
    return None


def _text(error: BaseException) -> str:
    """An exception's message and its causes' (pyreqwest keeps them apart)."""
    parts = [str(getattr(error, "message", "") or error)]
    details = getattr(error, "details", None)
    if isinstance(details, Mapping):
        for cause in details.get("causes") or ():
            message = cause.get("message") if isinstance(cause, Mapping) else None
            if message and message not in parts[0]:
                parts.append(str(message))
    return ": ".join(parts)


def tls_failure(error: BaseException) -> PermanentError | None:
    """A certificate problem rustls reported, in the words the aiohttp transport uses."""
    text = _text(error)
    if "invalid peer certificate" not in text:
        return None
    reason = text[text.index("invalid peer certificate") :].split(": https://")[0]
    if "not valid for name" in reason or "NotValidForName" in reason:
        hint = (
            "it is not for the host name of the URL: connect by a name the certificate has, "
            "or set http.tls.check-hostname=false"
        )
    elif "Expired" in reason:
        hint = "it has expired: the server needs a new certificate"
    else:
        hint = "set http.tls.ca-file to the CA that signed it"
    return PermanentError(f"TLS: the server's certificate does not verify ({reason}): {hint}")


def classify(error: Exception) -> type[ConnectorError] | ConnectorError | None:
    """What a pyreqwest exception means to the engine (see ``translated_errors``)."""
    from pyreqwest import exceptions as px

    certificate = tls_failure(error)
    if certificate is not None:
        return certificate
    if isinstance(error, (px.TransportError, px.BodyDecodeError)):
        return TransientError  # refused, reset, cut mid-answer, timed out
    if isinstance(error, (px.ClientClosedError, px.RequestPanicError)):
        return TransientError
    if isinstance(error, (px.DecodeError, px.BuilderError, px.RequestError, ValueError)):
        return PermanentError  # not an HTTP answer, a URL it cannot send
    return None


NATIVE_ERRORS = translated_errors("pyreqwest", classify)


def declared_length(response: Any) -> int | None:
    """The body's length as ``Content-Length`` gives it, or None: unless it is ASCII digits,
    or when a ``Transfer-Encoding`` frames the body instead (hyper then reads by that and
    leaves the ``Content-Length`` a hostile server sent beside it, unchecked)."""
    length = response.get_header("content-length")
    if length is None or not (length.isascii() and length.isdigit()):
        return None
    if response.get_header("transfer-encoding") is not None:
        return None
    return int(length)


class NativeResponse:
    """pyreqwest's streamed ``Response`` as a :class:`~asynclookup_http.transport.Response`."""

    __slots__ = ("_response", "content_length", "status")

    def __init__(self, response: Any) -> None:
        self._response = response
        self.status: int = response.status
        self.content_length: int | None = declared_length(response)

    def header(self, name: str) -> str | None:
        value = self._response.get_header(name)
        return None if value is None else str(value)

    async def chunks(self) -> AsyncIterator[bytes]:
        reader = self._response.body_reader
        while (chunk := await reader.read_chunk()) is not None:
            yield bytes(chunk)

    async def read(self) -> bytes:
        return bytes(await self._response.body_reader.bytes())

    def abort(self) -> None:
        """Leaving the request's context unread drops its connection (hyper never reuses a
        connection whose body was not read to its end)."""


class NativeTransport:
    """A :class:`~asynclookup_http.transport.Transport` over pyreqwest."""

    name: ClassVar[str] = "pyreqwest"
    errors = NATIVE_ERRORS

    def __init__(
        self,
        capacity: int,
        headers: Mapping[str, str],
        tls: TlsSettings,
        *,
        verify: bool,
        timeout_s: float,
        read_ahead: int,
    ) -> None:
        self._capacity = max(1, capacity)
        self._headers = dict(headers)
        self._tls = tls
        self._verify = verify
        self._timeout = timedelta(seconds=max(0.001, timeout_s)) + BACKSTOP
        self._read_ahead = read_ahead
        self._client: Any = None

    def _builder(self) -> Any:
        from pyreqwest.client import ClientBuilder

        builder = (
            ClientBuilder()
            .default_headers(self._headers)
            .follow_redirects(False)
            .default_cookie_store(False)
            .gzip(False)
            .deflate(False)
            .brotli(False)
            .zstd(False)
            .referer(False)
            .pool_idle_timeout(IDLE)
            .pool_max_idle_per_host(self._capacity)
            .timeout(self._timeout)
            .tcp_nodelay(True)
            .no_proxy()
        )
        tls = self._tls
        if not self._verify:
            builder = builder.danger_accept_invalid_certs(True)
        if tls.ca_file:
            builder = builder.add_root_certificate_pem(_read(tls.ca_file, "http.tls.ca-file"))
        if tls.cert_file:
            identity = _read(tls.cert_file, "http.tls.cert-file")
            if tls.key_file:
                key = _read(tls.key_file, "http.tls.key-file")
                identity += b"\n" + _decrypted(key, tls.key_password())
            try:
                builder = builder.identity_pem(identity)
            except ValueError as exc:
                raise PermanentError(
                    "options 'http.tls.cert-file'/'http.tls.key-file': the certificate and key "
                    f"do not load ({exc}): a key that matches the certificate, in PEM"
                ) from None
        return builder

    async def open(self) -> None:
        self._client = self._builder().build()

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

    async def fetch(
        self,
        method: str,
        url: str,
        body: bytes | None,
        headers: Mapping[str, str] | None,
        max_bytes: int,
    ) -> Fetched:
        if self._client is None:
            raise RuntimeError("the HTTP transport is used before open()")
        request = self._client.request(method, url).streamed_read_buffer_limit(self._read_ahead)
        if headers:
            request = request.headers(dict(headers))
        if body is not None:
            request = request.body_bytes(body)
        async with request.build_streamed() as response:
            status = response.status
            # the common answer in one frame: a 2xx, not encoded, of a length within the limit
            if 200 <= status < 300 and response.get_header("content-encoding") is None:
                length = declared_length(response)
                if length is not None and length <= max_bytes:
                    answer = bytes(await response.body_reader.bytes())
                    if len(answer) > max_bytes:  # never: hyper reads Content-Length bytes
                        raise too_large(method, url, len(answer), max_bytes)
                    return Fetched(status, answer, None, None)
            return await fetched(NativeResponse(response), method, url, max_bytes)


def _decrypted(key: bytes, password: str | None) -> bytes:
    """A client key rustls can take: unencrypted PEM (decrypted here, in memory only, when a
    password is given)."""
    if password is None:
        return key
    from cryptography.hazmat.primitives import serialization

    try:
        loaded = serialization.load_pem_private_key(key, password.encode())
    except (ValueError, TypeError) as exc:
        raise PermanentError(
            "options 'http.tls.key-file'/'http.tls.key-password.env': the key does not "
            f"decrypt ({exc}): is http.tls.key-password.env the key's password?"
        ) from None
    return loaded.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _read(path: str, option: str) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError as exc:
        raise PermanentError(
            f"option '{option}': cannot read {path!r} on this executor: {exc.strerror or exc}"
        ) from None
