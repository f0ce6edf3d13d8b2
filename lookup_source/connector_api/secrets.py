"""Secrets read where they are used: from the executor's environment.

The driver reads one only when it must talk to the store itself (to infer a schema): the Spark
layer says so with :func:`read_on_driver`, and a missing variable's message then names the
driver.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Iterator
from contextlib import contextmanager

from lookup_source.errors import MissingSecretError

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
