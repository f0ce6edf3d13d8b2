"""Secrets read where they are used: from the executor's environment."""

from __future__ import annotations

import os

from lookup_source.errors import PermanentError


def secret_from_env(option: str, variable: str) -> str:
    """The value of environment variable ``variable`` on this executor, for option ``option``
    (``redis.password.env``, ``http.header.X.env``...), or a PermanentError naming both."""
    value = os.environ.get(variable)
    if value is None:
        raise PermanentError(
            f"option '{option}' names environment variable {variable!r}, which is not set on "
            "this executor (on a cluster: spark.executorEnv." + variable + ")"
        )
    return value
