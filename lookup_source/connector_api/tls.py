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
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lookup_source.connector_api.options import OptionSpec, parse_bool, parse_text
from lookup_source.connector_api.secrets import secret_from_env
from lookup_source.errors import OptionError, PermanentError

_HOSTNAME_MISMATCH = 62  # X509_V_ERR_HOSTNAME_MISMATCH
_IP_MISMATCH = 64  # X509_V_ERR_IP_ADDRESS_MISMATCH
_EXPIRED = 10  # X509_V_ERR_CERT_HAS_EXPIRED


def tls_option_specs(prefix: str, server: str) -> tuple[OptionSpec, ...]:
    """The TLS options of a connector: ``<prefix>.tls.ca-file``, ``.cert-file``, ``.key-file``,
    ``.key-password.env`` and ``.check-hostname``."""
    return (
        OptionSpec(
            f"{prefix}.tls.ca-file",
            parse_text,
            None,
            f"PEM file (on the executors) of the CA that signed {server}'s certificate, for a "
            "private CA.",
            default_doc="(the system's CAs)",
        ),
        OptionSpec(
            f"{prefix}.tls.cert-file",
            parse_text,
            None,
            f"Client certificate (PEM, on the executors), when {server} asks for one (mutual TLS).",
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
        settings = cls(
            prefix,
            ca_file=options.get(f"{prefix}.tls.ca-file"),
            cert_file=options.get(f"{prefix}.tls.cert-file"),
            key_file=options.get(f"{prefix}.tls.key-file"),
            key_password_env=options.get(f"{prefix}.tls.key-password.env"),
            check_hostname=options.get(f"{prefix}.tls.check-hostname", True),
        )
        if settings.key_file and not settings.cert_file:
            raise OptionError(
                f"{prefix}.tls.key-file", f"needs {prefix}.tls.cert-file, the certificate it signs"
            )
        if settings.key_password_env and not settings.cert_file:
            raise OptionError(
                f"{prefix}.tls.key-password.env",
                f"is the password of a client key: set {prefix}.tls.cert-file too",
            )
        return settings

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
