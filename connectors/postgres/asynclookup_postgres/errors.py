"""What asyncpg's exceptions mean to the engine: :func:`classify` and :data:`ASYNCPG_ERRORS`,
the boundary every call to Postgres runs within."""

from __future__ import annotations

from lookup_source.connector_api import (
    ConnectorError,
    OverloadedError,
    PermanentError,
    TransientError,
    translated_errors,
)


def classify(error: Exception) -> type[ConnectorError] | ConnectorError | None:
    """What an asyncpg exception means to the engine (see ``translated_errors``)."""
    import asyncpg
    from asyncpg import exceptions as pgx

    if isinstance(
        error, (asyncpg.InvalidPasswordError, pgx.InvalidAuthorizationSpecificationError)
    ):
        return PermanentError  # a wrong password or role does not get better by retrying
    if isinstance(error, asyncpg.TooManyConnectionsError):
        return OverloadedError  # the server is out of connections
    if isinstance(
        error,
        (
            asyncpg.ConnectionDoesNotExistError,
            asyncpg.CannotConnectNowError,
            pgx.ConnectionFailureError,
            pgx.SerializationError,
            pgx.DeadlockDetectedError,
            pgx.AdminShutdownError,
            asyncpg.InterfaceError,  # "connection is closed", "another operation in progress"
            pgx.InternalClientError,  # a connection left mid-protocol by a server restart
        ),
    ):
        return TransientError
    if isinstance(error, asyncpg.PostgresError):
        return PermanentError  # the server refused the query: a type, a permission, a syntax
    return None


ASYNCPG_ERRORS = translated_errors("asyncpg", classify, tls="postgres")
"""asyncpg's exceptions, raised within it, translated by :func:`classify`."""
