"""A lookup's identity: everything that decides what the store answers it, computed on the
executor and used by all that outlives a task and may serve several jobs, users or tenants —
the worker's kept clients (:mod:`.clients`), its caches (:mod:`.cache`) and the shared cache
tier (:mod:`.shared_cache`). Two lookups whose answers could differ never share any of them.

What goes in:

- **public**: the connector, the URL with its credentials redacted, the options' names and the
  values of those whose name is not a secret's, the key and value columns with their types;
- **secret material**, which enters only through a keyed one-way digest, never in clear: the
  URL whole (user, password, query parameters), every option's value (every header), the
  values the ``*.env`` options name, read from this process's environment (a secret rotated on
  the executors is a new identity), the content of every file an option or a URL parameter
  names (``*-file``, ``sslkey=``: certificates, keys, CA bundles; a renewed certificate is a new
  identity), what the connector's library reads on its own (``LookupClient.implicit_inputs``:
  libpq's ``PGPASSWORD``, ``PGDATABASE``, ``~/.pgpass``...), the extra
  ``secret`` given (``cache.shared.secret.env``), and a ``fetch=`` function's state
  (:func:`function_state`: its code, defaults, closure, bound object, partial arguments and
  the plain globals it reads).

From them, one key ``K = PBKDF2-HMAC-SHA256(material, salt = SHA-256(public))`` — slow on
purpose, so that a digest seen by whoever reads the shared tier's Redis cannot be turned back
into a short secret by trying them; it is computed once per process and configuration — and
every digest of the identity is ``HMAC-SHA256(K, purpose)`` (:meth:`LookupIdentity.digest`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from lookup_source.connector_api import ConnectorConfig, OptionSpec
from lookup_source.connector_api.options import find_spec
from lookup_source.engine.clock import SYSTEM_CLOCKS, Clock
from lookup_source.engine.kept.function_state import function_state
from lookup_source.engine.kept.keeper import Keeper
from lookup_source.redaction import redact_text, redact_url, secret_name

KDF_ITERATIONS = 100_000
"""PBKDF2 rounds of the identity's key (about 30 ms here, once per worker and
configuration: :class:`IdentityKeys`)."""


class IdentityKeys:
    """The identity keys a worker has derived (PBKDF2 is slow on purpose), so that task after
    task of one configuration derives its key once: at most ``kept``, the least recently used
    forgotten first. Kept by the worker (:attr:`Worker.identity_keys`); without one, each
    identity derives its key anew."""

    def __init__(self, kept: int = 256, *, clock: Clock = SYSTEM_CLOCKS.monotonic) -> None:
        self._keys: Keeper[bytes] = Keeper(max_entries=kept, clock=clock)
        self._lock = threading.Lock()

    def derive(self, material: bytes, salt: bytes) -> bytes:
        memo = hashlib.sha256(material + salt).hexdigest()
        with self._lock:
            if self._keys.get(memo) is not None:
                return self._keys.use(memo).value
        key = _pbkdf2(material, salt)
        with self._lock:
            self._keys.put(memo, key)
            self._keys.evict()
        return key

    def __len__(self) -> int:
        return len(self._keys)


def _is_env_option(name: str) -> bool:
    return name.lower().endswith(".env")


def _is_file_option(name: str) -> bool:
    lowered = name.lower()
    return lowered.endswith("-file") or lowered.endswith(".file")


def _env_value(variable: Any) -> bytes:
    value = os.environ.get(str(variable))
    return b"unset" if value is None else b"set:" + value.encode("utf-8", "surrogateescape")


def _file_fingerprint(path: Any) -> bytes:
    """The digest of a file's content (a certificate, a key), or why it could not be read
    (the client that uses it says so in its own words)."""
    try:
        with open(str(path), "rb") as file:
            return b"sha256:" + hashlib.sha256(file.read()).digest()
    except OSError as exc:
        return f"unreadable:{exc.errno}".encode()


def declared_options(factory: Any) -> tuple[OptionSpec[Any], ...]:
    """The options a client ``factory`` (a connector class) declares (``option_specs``): which
    of them are secrets and which hold URLs is theirs to say; nothing for a user's function."""
    declared = getattr(factory, "option_specs", ()) if isinstance(factory, type) else ()
    return tuple(spec for spec in declared if isinstance(spec, OptionSpec))


def _declared_secret(name: str, declared: Sequence[OptionSpec[Any]]) -> bool:
    spec = find_spec(name, declared)
    return spec is not None and spec.secret


def _public_option(name: str, value: Any, declared: Sequence[OptionSpec[Any]]) -> str:
    if secret_name(name) or _is_env_option(name) or _declared_secret(name, declared):
        return f"{name}=(secret)"
    if name == "function.id":  # made anew for each job: the function's state stands for it
        return ""
    return f"{name}={redact_text(repr(value))}"


_URL_FILE_PARAMETERS = re.compile(r"(?i)(file|cert|key|crl)$")


def _url_files(url: str | None) -> list[tuple[str, str]]:
    """The URL's query parameters that name files (``sslkey``, ``sslrootcert``,
    ``passfile``...), whose content decides what the client presents or trusts."""
    if not url or "?" not in url:
        return []
    query = urlsplit(url).query
    return [(n, v) for n, v in parse_qsl(query) if v and _URL_FILE_PARAMETERS.search(n)]


@dataclass(frozen=True)
class LookupIdentity:
    """What tells a lookup's answers apart from another's; see the module's docstring."""

    public: str
    """The part that holds no secret (for messages and tests)."""
    _key: bytes = dataclasses.field(repr=False)

    @classmethod
    def of(
        cls,
        config: ConnectorConfig,
        *,
        function: Any = None,
        secret: str | None = None,
        scope: str = "",
        implicit: Sequence[str] = (),
        declared: Sequence[OptionSpec[Any]] = (),
        keys: IdentityKeys | None = None,
    ) -> LookupIdentity:
        """The identity of the lookup ``config`` (with ``function``, a ``fetch=`` function;
        ``secret``, more secret material; ``scope``, a text that narrows it, such as
        ``cache.shared.namespace``; ``implicit``, what the connector's library reads on its own:
        ``env:NAME`` and ``file:PATH``, from ``LookupClient.implicit_inputs``; ``declared``, the
        connector's option specs, which say which options are secrets:
        :func:`declared_options`; ``keys``, the worker's derived keys)."""
        options = sorted(config.options.items(), key=lambda item: str(item[0]))
        shown = (_public_option(name, value, declared) for name, value in options)
        public = "\n".join(
            [
                f"connector={config.connector}",
                f"url={redact_url(config.url) if config.url else ''}",
                "options=" + ",".join(text for text in shown if text),
                f"keys={list(config.key_columns)}:{[str(t) for t in config.key_types]}",
                f"values={list(zip(config.value_columns, map(str, config.value_types)))}",
                f"function={'yes' if function is not None else 'no'}",
                f"scope={scope}",
            ]
        )
        material = hashlib.sha256()
        material.update(f"url={config.url or ''}\x00".encode("utf-8", "surrogateescape"))
        for name, value in options:
            if str(name) == "function.id" and function is not None:
                continue
            material.update(f"{name}={value!r}\x00".encode("utf-8", "surrogateescape"))
            if _is_env_option(str(name)) and value:
                material.update(b"env\x00" + _env_value(value) + b"\x00")
            if _is_file_option(str(name)) and value:
                material.update(b"file\x00" + _file_fingerprint(value) + b"\x00")
        for name, value in _url_files(config.url):  # sslkey=, sslrootcert=, passfile=...
            material.update(f"url file {name}\x00".encode() + _file_fingerprint(value) + b"\x00")
        for source in implicit:
            kind, _, name = source.partition(":")
            read = (
                _env_value(name) if kind == "env" else _file_fingerprint(os.path.expanduser(name))
            )
            material.update(source.encode("utf-8", "surrogateescape") + b"\x00" + read + b"\x00")
        if function is not None:
            material.update(b"function\x00" + function_state(function) + b"\x00")
        if secret is not None:
            material.update(b"secret\x00" + secret.encode("utf-8", "surrogateescape") + b"\x00")
        salt = hashlib.sha256(b"asynclookup identity\x00" + public.encode("utf-8", "replace"))
        derive = keys.derive if keys is not None else _pbkdf2
        return cls(public, derive(material.digest(), salt.digest()))

    def digest(self, purpose: str, *parts: Any) -> str:
        """A hex digest of the identity for one use (``purpose``: ``client``, ``cache``,
        ``tier``...), with ``parts`` that narrow it further (a factory, a cache's settings)."""
        text = "\x00".join([purpose, *map(repr, parts)])
        return hmac.new(self._key, text.encode("utf-8", "surrogateescape"), "sha256").hexdigest()

    def subkey(self, purpose: str) -> bytes:
        """A key of its own for ``purpose`` (the shared tier's value tags), derived from the
        identity's key: whoever lacks the lookup's secret material cannot compute it."""
        return hmac.new(self._key, b"key\x00" + purpose.encode(), "sha256").digest()


def secret_values(config: ConnectorConfig, declared: Sequence[OptionSpec[Any]] = ()) -> list[str]:
    """The lookup's own secrets as texts might quote them: the values of options whose name is
    a secret's and of those the connector declares secret (``declared``; a header) when they
    read like a credential, the values ``*.env`` options name (as this process reads them),
    the password and secret parameters of the URL and of every option declared to hold one."""
    found: list[str] = []
    for name, value in config.options.items():
        name = str(name)
        if value is None:
            continue
        if _is_env_option(name):
            resolved = os.environ.get(str(value))
            if resolved:
                found += [resolved, resolved.split(" ", 1)[-1]]  # "Bearer x": x alone too
        elif secret_name(name) or (_declared_secret(name, declared) and _looks_secret(str(value))):
            text = str(value)
            found += [text, text.split(" ", 1)[-1]]
    urls = [config.url] + [
        value
        for name, value in config.options.items()
        if (spec := find_spec(str(name), declared)) is not None and spec.url
    ]
    for url in urls:
        if not isinstance(url, str) or "://" not in url:
            continue
        parts = urlsplit(url)
        if parts.password:
            found.append(parts.password)
        if parts.username and not parts.password and parts.scheme in ("http", "https"):
            found.append(parts.username)  # a lone token as the user (a database's user is not)
        found += [v for n, v in parse_qsl(parts.query) if v and secret_name(n)]
    return found


_TOKEN_LIKE = re.compile(r"^[A-Za-z0-9._~+/=:-]{16,}$")


def _looks_secret(value: str) -> bool:
    """A header value that reads like a credential whatever its header's name: a secret's
    word in it (``token-abc``), or one long unbroken token (``Bearer`` and the like aside)."""
    last = value.strip().split(" ")[-1]
    return secret_name(value) or bool(_TOKEN_LIKE.match(last))


def implicit_inputs(factory: Any, config: ConnectorConfig) -> tuple[str, ...]:
    """What a client ``factory`` (a connector class) says its library reads on its own
    (``LookupClient.implicit_inputs``); nothing for a user's function."""
    declared = getattr(factory, "implicit_inputs", None) if isinstance(factory, type) else None
    return tuple(declared(config)) if callable(declared) else ()


def _pbkdf2(material: bytes, salt: bytes) -> bytes:
    """The identity's key: PBKDF2 of its material, salted by (a digest of) its public part."""
    return hashlib.pbkdf2_hmac("sha256", material, salt, KDF_ITERATIONS)


__all__ = [
    "KDF_ITERATIONS",
    "IdentityKeys",
    "LookupIdentity",
    "declared_options",
    "function_state",
    "implicit_inputs",
    "secret_values",
]
