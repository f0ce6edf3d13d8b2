"""Keep credentials out of every text the project writes: messages, the error column, logs,
metrics, plans — including texts copied from a library (its exception's message).

One rule for a URL (:func:`redact_url`), applied to each URL found in any text
(:func:`redact_text`):

- its userinfo, in any form: ``user:password@`` keeps the user (``user:***@``), a lone
  ``token@`` is hidden whole (``***@``), and a password holding ``@`` is hidden up to the last
  ``@`` of the authority (which ends at the first ``/``, ``?`` or ``#``, as RFC 3986 says);
- the values of query and fragment parameters whose name is a usual secret name (``password``,
  ``token``, ``access_token``, ``client_secret``, ``api_key``, ``key``, ``sig``,
  ``signature``, ``X-Amz-Signature``, ``auth``, ``session``...; in any case, and as the last
  part of a longer name such as ``my_api_key``).

>>> redact_url("https://user:p@ss@host/x?access_token=abc&id=7")
'https://user:***@host/x?access_token=***&id=7'
>>> redact_text("GET https://TOKEN@api.example.com/users/1 failed: url='http://h/?sig=XYZ'")
"GET https://***@api.example.com/users/1 failed: url='http://h/?sig=***'"
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from urllib.parse import unquote

MASK = "***"

SECRET_NAMES = (
    "password",
    "passwd",
    "pwd",
    "pass",
    "secret",
    "token",
    "auth",
    "authorization",
    "credential",
    "credentials",
    "key",
    "apikey",
    "sig",
    "signature",
    "session",
    "sessionid",
    "sid",
    "code",
    "cookie",
    "jwt",
    "bearer",
    "assertion",
    "pw",
    "passphrase",
    "sign",
    "hmac",
    "otp",
    "ticket",
    "jsessionid",
)
"""Names (or ends of names, in any case and with any separators: ``api_key``,
``AccessToken``, ``client_secret``, ``X-Amz-Signature``, ``x-goog-credential``) of parameters,
headers and options whose values are secrets."""

SECRET_WORDS = ("password", "secret", "token", "apikey", "credential", "signature", "privatekey")
"""Words that make any name a secret's, wherever they appear in it (``token_hint``)."""

_URL = re.compile(r"(?i)\b[a-z][a-z0-9+.\-]*://[^\s'\"<>`]+")
"""A URL inside a text: a scheme, ``://``, then anything up to a space or a quote."""

_AUTHORITY_END = re.compile(r"[/?#]")
_PORT_THEN_PATH = re.compile(r"\d+(?:[/?#]|$)")
_NOT_ALNUM = re.compile(r"[^a-z0-9]")
_AUTHORIZATION = re.compile(
    r"(?i)\b(bearer|basic|digest|token|negotiate)(\s+)([A-Za-z0-9._~+/=:-]{6,})"
)
"""A credential as an ``Authorization`` header carries it, quoted anywhere in a text."""

_SECRET_HEADER = re.compile(
    r"(?i)([\"']?(?:proxy-authorization|authorization|x-api-key|api-key|apikey|cookie|"
    r"set-cookie|x-auth-token|x-access-token)[\"']?\s*[:=]\s*[\"']?)([^\"'\r\n,}]+)"
)
"""A secret header written out (``Authorization: ...``, ``'x-api-key': '...'``)."""

_PATH_PARAMETER = re.compile(r"(?i)(;jsessionid=|;sessionid=|;sid=)[^/?#&\s'\"]*")

_QUERY_PARAMETER = re.compile(r"(?P<lead>[?&;])(?P<name>[\w.\-%\[\]]+)=(?P<value>[^&;#\s'\"<>`]*)")
_PARAMETER = re.compile(r"(?P<name>[^&;=?#]*)=(?P<value>[^&;#]*)")


def secret_name(name: str) -> bool:
    """Whether a parameter, header or option named ``name`` holds a secret by its name.

    >>> secret_name("X-Api-Key"), secret_name("AccessToken"), secret_name("page")
    (True, True, False)
    """
    folded = _NOT_ALNUM.sub("", unquote(name).lower())
    return folded.endswith(SECRET_NAMES) or any(word in folded for word in SECRET_WORDS)


def _userinfo(authority: str) -> str:
    """``authority`` with its userinfo (up to the last ``@``) redacted."""
    at = authority.rfind("@")
    if at < 0:
        return authority
    userinfo, host = authority[:at], authority[at + 1 :]
    if ":" in userinfo:
        user = userinfo.split(":", 1)[0]
        return f"{user}:{MASK}@{host}"
    return f"{MASK}@{host}" if userinfo else authority


def _parameters(text: str) -> str:
    """``a=1&token=x`` -> ``a=1&token=***`` (values of secret names hidden)."""

    def one(match: re.Match[str]) -> str:
        name, value = match.group("name"), match.group("value")
        if value and secret_name(name):
            return f"{name}={MASK}"
        if "://" in value or "%3A%2F%2F" in value.upper():  # a URL inside: its own secrets
            return f"{name}={redact_url(unquote(value))}"
        return match.group(0)

    return _PARAMETER.sub(one, text)


def redact_url(url: str) -> str:
    """``url`` with its userinfo and secret-looking parameters replaced by ``***``.

    >>> redact_url("redis://user:s3cret@host:6379/0")
    'redis://user:***@host:6379/0'
    >>> redact_url("redis://:s3cret@host")
    'redis://:***@host'
    >>> redact_url("https://ghp_token@host/repo?ref=main&Signature=abc")
    'https://***@host/repo?ref=main&Signature=***'
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return _parameters(url) if "=" in url else url
    end = _AUTHORITY_END.search(rest)
    authority, tail = (rest, "") if end is None else (rest[: end.start()], rest[end.start() :])
    if "@" not in authority and "@" in tail:
        # a password holding "/", "?" or "#" (written unencoded, as people do): user:pass@
        at = rest.find("@")
        userinfo = rest[:at]
        user, colon, password = userinfo.partition(":")
        if colon and "/" not in user and not _PORT_THEN_PATH.match(password):
            authority, tail = rest[: at + 1 + len(_host(rest[at + 1 :]))], ""
            tail = rest[len(authority) :]
    redacted = f"{scheme}://{_userinfo(authority)}"
    if ";" in tail:
        tail = _PATH_PARAMETER.sub(lambda match: match.group(1) + MASK, tail)
    if "?" in tail or "#" in tail or "=" in tail:
        path, mark, query = tail.partition("?")
        if mark:
            tail = path + mark + _parameters(query)
        else:
            path, mark, fragment = tail.partition("#")
            tail = path + mark + _parameters(fragment) if mark else tail
    return redacted + tail


def _host(text: str) -> str:
    end = _AUTHORITY_END.search(text)
    return text if end is None else text[: end.start()]


def redact_text(text: str) -> str:
    """``text`` with every URL in it redacted (:func:`redact_url`), and every secret-named
    query parameter (``?api_key=...``, ``&token=...``) even without its URL: for messages
    copied from a library or a service, which may quote a request with its credentials.

    >>> redact_text("Cannot connect to redis://app:pw@db:6379/0 (refused)")
    'Cannot connect to redis://app:***@db:6379/0 (refused)'
    """
    if "://" in text:
        text = _URL.sub(lambda match: redact_url(match.group(0)), text)
    if "=" in text:  # a query without its URL (a path echoed back by a service)
        text = _QUERY_PARAMETER.sub(_query_parameter, text)
        text = _PATH_PARAMETER.sub(lambda match: match.group(1) + MASK, text)
    text = _SECRET_HEADER.sub(lambda match: match.group(1) + MASK, text)
    return _AUTHORIZATION.sub(lambda match: match.group(1) + match.group(2) + MASK, text)


def _query_parameter(match: re.Match[str]) -> str:
    if match.group("value") and match.group("value") != MASK and secret_name(match.group("name")):
        return f"{match.group('lead')}{match.group('name')}={MASK}"
    return match.group(0)


MIN_SECRET_CHARS = 4
"""Known secrets shorter than this are not looked for in texts (they would mask words)."""


class Redactor:
    """:func:`redact_text`, and the lookup's own secrets wherever they appear (a service that
    echoes the request's ``Authorization`` header in its error page): each value in
    ``secrets`` of at least :data:`MIN_SECRET_CHARS` characters becomes ``***``."""

    __slots__ = ("_secrets",)

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        found = {s for s in secrets if isinstance(s, str) and len(s) >= MIN_SECRET_CHARS}
        self._secrets = sorted(found, key=len, reverse=True)  # the longest first

    def __call__(self, text: str) -> str:
        text = redact_text(text)
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        if "..." in text:  # an excerpt cut in the middle of a secret: its start is hidden too
            for secret in self._secrets:
                for end in range(len(secret) - 1, MIN_SECRET_CHARS - 1, -1):
                    cut = secret[:end] + "..."
                    if cut in text:
                        text = text.replace(cut, MASK + "...")
                        break
        return text


class RedactingFilter(logging.Filter):
    """Redacts every record of the ``lookup_source`` logger (installed on it at import): its
    message, its arguments and its traceback, which may quote a library's error text."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = redact_text(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            redacted = redact_text(record.exc_text)
            if redacted != record.exc_text:
                record.exc_text = redacted
                record.exc_info = None  # a formatter of its own would read the exception
        return True


def install_log_redaction(logger: logging.Logger) -> None:
    """Redact what ``logger`` writes (once; installing again adds nothing)."""
    if not any(isinstance(f, RedactingFilter) for f in logger.filters):
        logger.addFilter(RedactingFilter())


__all__ = [
    "MASK",
    "SECRET_NAMES",
    "RedactingFilter",
    "Redactor",
    "install_log_redaction",
    "redact_text",
    "redact_url",
    "secret_name",
]
