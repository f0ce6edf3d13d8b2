"""Secrets read where they are used: from the executor's environment; and the secrets a
connector's configuration holds, which every text of a task hides (:func:`secret_values`).

The driver reads one only when it must talk to the store itself (to infer a schema): the Spark
layer says so with :func:`read_on_driver`, and a missing variable's message then names the
driver.
"""

from __future__ import annotations

import contextvars
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlsplit

from lookup_source.connector_api.options import OptionSpec, declared_options, find_spec
from lookup_source.errors import MissingSecretError
from lookup_source.redaction import Redactor, secret_name


class Configured(Protocol):
    """What :func:`secret_values` reads of a ``ConnectorConfig``."""

    @property
    def url(self) -> str | None: ...

    @property
    def options(self) -> Mapping[str, Any]: ...


_ON_DRIVER: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "asynclookup_secret_on_driver", default=None
)


def secret_from_env(option: str, variable: str) -> str:
    """The value of environment variable ``variable`` on this executor, for option ``option``
    (``redis.password.env``, ``http.header.X.env``...), or a :class:`MissingSecretError`
    naming both and saying where to set it."""
    value = os.environ.get(variable)
    if value is not None:
        return value
    why = _ON_DRIVER.get()
    if why is not None:
        where = (
            f"which is not set on the driver, where {why}: set it in the driver's environment too"
        )
    else:
        where = f"which is not set on this executor (on a cluster: spark.executorEnv.{variable})"
    raise MissingSecretError(
        f"option '{option}' names environment variable {variable!r}, {where}",
        option=option,
        variable=variable,
    )


@contextmanager
def read_on_driver(why: str) -> Iterator[None]:
    """Secrets read inside are read on the driver, because ``why``."""
    token = _ON_DRIVER.set(why)
    try:
        yield
    finally:
        _ON_DRIVER.reset(token)


def is_env_option(name: str) -> bool:
    """Whether option ``name`` names an environment variable (``redis.password.env``)."""
    return name.lower().endswith(".env")


def secret_values(config: Configured, declared: Sequence[OptionSpec[Any]] = ()) -> list[str]:
    """The lookup's own secrets as texts might quote them: the values of options whose name is
    a secret's and of those the connector declares secret (``declared``; a header) when they
    read like a credential, the values ``*.env`` options name (as this process reads them),
    the password and secret parameters of the URL and of every option declared to hold one."""
    found: list[str] = []
    urls: list[Any] = [config.url]
    for name, value in config.options.items():
        name = str(name)
        if value is None:
            continue
        spec = find_spec(name, declared)
        if is_env_option(name):
            resolved = os.environ.get(str(value))
            if resolved:
                found += [resolved, resolved.split(" ", 1)[-1]]  # "Bearer x": x alone too
        elif secret_name(name) or (spec is not None and spec.secret and _looks_secret(str(value))):
            text = str(value)
            found += [text, text.split(" ", 1)[-1]]
        if spec is not None and spec.url:
            urls.append(value)
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


def client_redactor(client: Any) -> Redactor:
    """What hides ``client``'s secrets in a text: those of its configuration
    (:func:`secret_values`), as its connector class declares them, and every URL's
    credentials."""
    return Redactor(secret_values(client.config, declared_options(type(client))))


_TOKEN_LIKE = re.compile(r"^[A-Za-z0-9._~+/=:-]{16,}$")


def _looks_secret(value: str) -> bool:
    """A header value that reads like a credential whatever its header's name: a secret's
    word in it (``token-abc``), or one long unbroken token (``Bearer`` and the like aside)."""
    last = value.strip().split(" ")[-1]
    return secret_name(value) or bool(_TOKEN_LIKE.match(last))
