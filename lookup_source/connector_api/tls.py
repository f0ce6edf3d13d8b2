"""TLS to a store: the options every connector offers for it, the ``ssl.SSLContext`` they
describe, and TLS failures translated into errors that name the option to fix.

A connector adds ``tls_option_specs("redis", "the Redis server")`` to its option specs, reads
``TlsSettings.from_options("redis", config.options)`` on the executor, and gives the driver
library ``settings.context()`` (or the file names). In its error classifier,
``tls_failure(error, "redis")`` turns a certificate that does not verify, a host name that does
not match or a client certificate the server wants into a :class:`PermanentError` (retrying
cannot fix a certificate) whose message says which option to set::

    TLS: the server's certificate does not verify (unable to get local issuer certificate):
    set redis.tls.ca-file to the CA that signed it

Under TLS 1.3 a server that wants a client certificate refuses one only after the client's
side of the handshake has finished, so a client that sends its first request at once may see
a reset connection instead of the server's alert (the server closed with the request unread).
A connector wraps its requests in a :class:`HandshakeCheck` (made by :func:`handshake_check`):
when a connection fails before any request has succeeded, it connects once more, listens
without sending, and raises what the server's alert says instead of retrying a certificate
problem.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from lookup_source.connector_api.options import OptionSpec, parse_bool, parse_text
from lookup_source.connector_api.secrets import secret_from_env
from lookup_source.errors import OptionError, PermanentError, TransientError

_HOSTNAME_MISMATCH = 62  # X509_V_ERR_HOSTNAME_MISMATCH
_IP_MISMATCH = 64  # X509_V_ERR_IP_ADDRESS_MISMATCH
_EXPIRED = 10  # X509_V_ERR_CERT_HAS_EXPIRED


@dataclass(frozen=True)
class TlsOptions:
    """The TLS options of a connector (``<prefix>.tls.ca-file``, ``.cert-file``, ``.key-file``,
    ``.key-password.env``, ``.check-hostname``), each declared once and read through its own
    declaration (:meth:`read`)."""

    prefix: str
    ca_file: OptionSpec[str | None]
    cert_file: OptionSpec[str | None]
    key_file: OptionSpec[str | None]
    key_password_env: OptionSpec[str | None]
    check_hostname: OptionSpec[bool]

    @classmethod
    def of(cls, prefix: str, server: str = "the server") -> TlsOptions:
        """The TLS options of the connector ``prefix`` (``server``: how their docs name what
        the connector talks to)."""
        return cls(
            prefix,
            OptionSpec(
                f"{prefix}.tls.ca-file",
                parse_text,
                None,
                f"PEM file (on the executors) of the CA that signed {server}'s certificate, for "
                "a private CA.",
                default_doc="(the system's CAs)",
            ),
            OptionSpec(
                f"{prefix}.tls.cert-file",
                parse_text,
                None,
                f"Client certificate (PEM, on the executors), when {server} asks for one "
                "(mutual TLS).",
            ),
            OptionSpec(
                f"{prefix}.tls.key-file",
                parse_text,
                None,
                "Private key (PEM) of the client certificate.",
                default_doc="(inside tls.cert-file)",
            ),
            OptionSpec(
                f"{prefix}.tls.key-password.env",
                parse_text,
                None,
                "Environment variable on the executors holding the password of an encrypted "
                "client key.",
            ),
            OptionSpec(
                f"{prefix}.tls.check-hostname",
                parse_bool,
                True,
                f"Check that {server}'s certificate names the host of the URL.",
            ),
        )

    @property
    def specs(self) -> tuple[OptionSpec, ...]:
        return (
            self.ca_file,
            self.cert_file,
            self.key_file,
            self.key_password_env,
            self.check_hostname,
        )

    def read(self, options: Mapping[str, Any]) -> TlsSettings:
        """The settings these options give in ``options``, checked together."""
        settings = TlsSettings(
            self.prefix,
            ca_file=self.ca_file.get(options),
            cert_file=self.cert_file.get(options),
            key_file=self.key_file.get(options),
            key_password_env=self.key_password_env.get(options),
            check_hostname=self.check_hostname.get(options),
        )
        if settings.key_file and not settings.cert_file:
            raise OptionError(
                self.key_file.name, f"needs {self.cert_file.name}, the certificate it signs"
            )
        if settings.key_password_env and not settings.cert_file:
            raise OptionError(
                self.key_password_env.name,
                f"is the password of a client key: set {self.cert_file.name} too",
            )
        return settings


def tls_option_specs(prefix: str, server: str) -> tuple[OptionSpec, ...]:
    """The TLS options of a connector (:class:`TlsOptions`), for its ``option_specs``."""
    return TlsOptions.of(prefix, server).specs


@dataclass(frozen=True)
class TlsSettings:
    """The ``<prefix>.tls.*`` options of a connector."""

    prefix: str
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    key_password_env: str | None = None
    check_hostname: bool = True

    @classmethod
    def from_options(cls, prefix: str, options: Mapping[str, Any]) -> TlsSettings:
        """The ``<prefix>.tls.*`` settings in ``options``, read through their declarations."""
        return TlsOptions.of(prefix).read(options)

    @property
    def configured(self) -> bool:
        """Whether any TLS option was given."""
        return bool(self.ca_file or self.cert_file or not self.check_hostname)

    @property
    def first_option(self) -> str:
        """The name of a TLS option that was given (for messages)."""
        if self.ca_file:
            return f"{self.prefix}.tls.ca-file"
        if self.cert_file:
            return f"{self.prefix}.tls.cert-file"
        return f"{self.prefix}.tls.check-hostname"

    def key_password(self) -> str | None:
        """The client key's password, from the executor's environment."""
        if not self.key_password_env:
            return None
        return secret_from_env(f"{self.prefix}.tls.key-password.env", self.key_password_env)

    def context(self) -> ssl.SSLContext:
        """An ``SSLContext`` that verifies the server (by ``ca-file`` or the system's CAs) and
        presents the client certificate, if any. A file that is missing or does not hold what
        it should is a :class:`PermanentError` naming the option."""
        prefix = self.prefix
        try:
            context = ssl.create_default_context(cafile=self.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise PermanentError(
                f"option '{prefix}.tls.ca-file': cannot read a PEM CA certificate from "
                f"{self.ca_file!r} on this executor: {exc}"
            ) from exc
        context.check_hostname = self.check_hostname
        if self.cert_file:
            password = self.key_password()
            try:
                context.load_cert_chain(self.cert_file, self.key_file, password=password)
            except ssl.SSLError as exc:  # (an OSError too: first)
                hint = (
                    f"is {prefix}.tls.key-password.env the key's password?"
                    if password is not None
                    else f"an encrypted key needs {prefix}.tls.key-password.env"
                )
                raise PermanentError(
                    f"options '{prefix}.tls.cert-file'/'{prefix}.tls.key-file': the certificate "
                    f"and key do not load ({exc.reason or exc}): a key that matches the "
                    f"certificate, in PEM; {hint}"
                ) from exc
            except OSError as exc:
                raise PermanentError(
                    f"options '{prefix}.tls.cert-file'/'{prefix}.tls.key-file': cannot read "
                    f"{exc.filename or self.cert_file!r} on this executor: {exc.strerror or exc}"
                ) from exc
        return context


def _ssl_error_in(error: BaseException) -> BaseException | None:
    """``error`` or the first exception it was raised from that is an ``ssl.SSLError``."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, ssl.SSLError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def tls_failure(error: BaseException, prefix: str) -> PermanentError | None:
    """The :class:`PermanentError` that ``error`` means if it is a TLS failure retrying cannot
    fix (a certificate that does not verify, a host name that does not match, a client
    certificate the server wants or refuses); None otherwise."""
    found = _ssl_error_in(error)
    text = str(found if found is not None else error)
    upper = text.upper()
    if isinstance(found, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in upper:
        code = getattr(found, "verify_code", None)
        reason = getattr(found, "verify_message", None) or text
        if code in (_HOSTNAME_MISMATCH, _IP_MISMATCH) or "MISMATCH" in upper:
            hint = (
                "it is not for the host name of the URL: connect by a name the certificate "
                f"has, or set {prefix}.tls.check-hostname=false"
            )
        elif code == _EXPIRED or "EXPIRED" in upper:
            hint = "it has expired: the server needs a new certificate"
        else:
            hint = f"set {prefix}.tls.ca-file to the CA that signed it"
        return PermanentError(f"TLS: the server's certificate does not verify ({reason}): {hint}")
    if any(
        sign in upper
        for sign in ("CERTIFICATE_REQUIRED", "CERTIFICATE REQUIRED", "VALID CLIENT CERTIFICATE")
    ):
        return PermanentError(
            "TLS: the server requires a client certificate: set "
            f"{prefix}.tls.cert-file and {prefix}.tls.key-file"
        )
    if found is not None and any(
        alert in upper for alert in ("UNKNOWN_CA", "BAD_CERTIFICATE", "UNKNOWN CA")
    ):
        return PermanentError(
            f"TLS: the server refused the client certificate of {prefix}.tls.cert-file "
            f"({text}): it must be signed by a CA the server trusts"
        )
    if found is not None and "WRONG_VERSION_NUMBER" in upper:
        return PermanentError(
            f"TLS: the server does not speak TLS on this port ({text}): check the URL"
        )
    return None


async def handshake_refusal(
    host: str, port: int, context: ssl.SSLContext, prefix: str, *, wait: float = 1.0
) -> PermanentError | None:
    """How the TLS server at ``host:port`` refuses a client with ``context`` (its alert, as
    :func:`tls_failure` words it: a client certificate it wants or does not trust), found by
    connecting and listening for up to ``wait`` seconds without sending anything; None if it
    sends no alert or cannot be reached. A certificate of the server's that this client does
    not accept is not the server's refusal: the client's own handshake says that at once."""
    writer: asyncio.StreamWriter | None = None

    async def listen() -> None:
        nonlocal writer
        reader, writer = await asyncio.open_connection(
            host, port, ssl=context, server_hostname=host
        )
        await reader.read(1)  # a server sends nothing unasked, but an alert

    try:
        await asyncio.wait_for(listen(), wait)
    except Exception as error:  # a refusal, a timeout or an unreachable server
        found = _ssl_error_in(error)
        alert = found is not None and "ALERT" in str(found).upper()
        return tls_failure(found, prefix) if found is not None and alert else None
    finally:
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
    return None


class HandshakeCheck:
    """Explains a connection that fails before any request over it has succeeded: the first
    such failure connects once more (:func:`handshake_refusal`) and, if the server refuses the
    TLS handshake, raises that refusal (a :class:`PermanentError` naming the option to set)
    instead of the :class:`TransientError`. Once a request has succeeded, or the server was
    asked, it costs nothing: ``context`` (a function making the client's ``SSLContext``) is
    called only to ask. Wrap each request, outside the library's error translation::

        self._handshake = HandshakeCheck("redis", host, port, tls.context)

        async def lookup_arrow(self, keys):
            async with self._handshake:
                with REDIS_ERRORS:
                    return await self._fetch(keys)
    """

    __slots__ = ("_asked", "_context", "_host", "_port", "_prefix", "_settled")

    def __init__(
        self, prefix: str, host: str, port: int, context: Callable[[], ssl.SSLContext]
    ) -> None:
        self._prefix = prefix
        self._host = host
        self._port = port
        self._context = context
        self._settled = False  # a request succeeded, or the server has been asked
        self._asked: asyncio.Future[PermanentError | None] | None = None

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        if error is None:
            self._settled = True
        elif isinstance(error, TransientError) and not self._settled:
            refusal = await self._refusal()
            if refusal is not None:  # a copy: requests failing together share the answer
                raise PermanentError(*refusal.args) from error
        return False

    async def _refusal(self) -> PermanentError | None:
        """The server's refusal, asked once for all the requests failing together."""
        if self._asked is None:
            self._asked = asyncio.ensure_future(
                handshake_refusal(self._host, self._port, self._context(), self._prefix)
            )
        refusal = await asyncio.shield(self._asked)
        self._settled = True
        return refusal


def handshake_check(
    prefix: str,
    url: str,
    context: Callable[[], ssl.SSLContext],
    *,
    scheme: str,
    default_port: int,
) -> AbstractAsyncContextManager[None]:
    """A :class:`HandshakeCheck` of the server of ``url`` with the SSL context ``context()``
    when the URL's scheme is ``scheme`` (the connector's TLS scheme: ``rediss``, ``https``) and
    its host is fixed; else a check that does nothing."""
    parts = urlsplit(url)
    if parts.scheme != scheme or not parts.hostname or "{" in parts.netloc:
        return nullcontext()
    return HandshakeCheck(prefix, parts.hostname, parts.port or default_port, context)
