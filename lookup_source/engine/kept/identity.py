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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from lookup_source.connector_api import ConnectorConfig, OptionSpec
from lookup_source.connector_api.options import declared_options, declared_secret
from lookup_source.connector_api.secrets import is_env_option
from lookup_source.engine.clock import SYSTEM_CLOCKS, Clock
from lookup_source.engine.kept.function_state import function_state
from lookup_source.engine.kept.keeper import Memo
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
        self._keys: Memo[bytes] = Memo(max_entries=kept, clock=clock)

    def derive(self, material: bytes, salt: bytes) -> bytes:
        memo = hashlib.sha256(material + salt).hexdigest()
        return self._keys.get(memo, lambda: _pbkdf2(material, salt))

    def __len__(self) -> int:
        return len(self._keys)


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


def _public_option(name: str, value: Any, declared: Sequence[OptionSpec[Any]]) -> str:
    if secret_name(name) or is_env_option(name) or declared_secret(name, declared):
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
        :func:`~lookup_source.connector_api.options.declared_options`; ``keys``, the worker's
        derived keys)."""
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
            if is_env_option(str(name)) and value:
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


def client_identity(
    factory: Any,
    config: ConnectorConfig,
    *,
    keys: IdentityKeys | None = None,
    function: Any = None,
    secret: str | None = None,
    scope: str = "",
) -> LookupIdentity:
    """The identity of a client of ``factory`` for ``config``: its configuration, what the
    factory's library reads on its own (:func:`implicit_inputs`) and which of its options it
    declares secret, under ``keys`` (the worker's); ``function``, ``secret`` and ``scope`` as
    :meth:`LookupIdentity.of` takes them."""
    return LookupIdentity.of(
        config,
        function=function,
        secret=secret,
        scope=scope,
        implicit=implicit_inputs(factory, config),
        declared=declared_options(factory),
        keys=keys,
    )


def task_client_identities(
    factory: Any,
    config: ConnectorConfig,
    *,
    keys: IdentityKeys | None = None,
    scope: str = "",
    shared_scope: str | None = None,
    secret: str | None = None,
) -> tuple[LookupIdentity, LookupIdentity | None]:
    """A task's two identities of a client of ``factory`` for ``config``, its library's implicit
    inputs read once: the worker's (as :func:`client_identity` with ``scope``) and, when
    ``shared_scope`` is given, the shared tier's — a ``fetch=`` function known by its state,
    with the tier's ``secret`` — else None."""
    implicit = implicit_inputs(factory, config)
    declared = declared_options(factory)
    local = LookupIdentity.of(config, scope=scope, implicit=implicit, declared=declared, keys=keys)
    if shared_scope is None:
        return local, None
    shared = LookupIdentity.of(
        config,
        function=getattr(factory, "function", None),
        secret=secret,
        scope=shared_scope,
        implicit=implicit,
        declared=declared,
        keys=keys,
    )
    return local, shared


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
    "client_identity",
    "function_state",
    "implicit_inputs",
]
