"""The exception hierarchy of asynclookup.

Every error raised on purpose by this package derives from :class:`AsyncLookupError`, so
``except AsyncLookupError`` catches all of them::

    AsyncLookupError
    ├── ConfigurationError (also ValueError)   bad options, schema or arguments: fix the job
    │   ├── OptionError                        names the option, suggests the nearest valid name
    │   ├── SchemaError                        names the column
    │   ├── ConnectorNotFoundError             the ``connector`` option names nothing we can load
    │   └── UnsupportedSparkError              this PySpark is too old for a surface: says which
    ├── ConnectorError                         raised by a connector while talking to its store
    │   ├── TransientError                     may succeed if tried again: retried with backoff
    │   │   ├── LookupTimeoutError             an attempt took longer than ``timeout.ms``
    │   │   └── OverloadedError                the store refused the request as too much (429, 503)
    │   └── PermanentError                     will not succeed if tried again: never retried
    │       └── MissingSecretError             a ``*.env`` option names an unset variable
    ├── RecordError (also ValueError)          a key's value is malformed or does not fit
    └── LookupFailedError                      ``on.error=fail``: lookups failed; the task fails
"""

from __future__ import annotations

from collections.abc import Iterable

from lookup_source.redaction import redact_text, redact_url


class AsyncLookupError(Exception):
    """Root of every error raised by asynclookup."""


class ConfigurationError(AsyncLookupError, ValueError):
    """The job is configured wrongly; retrying will not help."""


class OptionError(ConfigurationError):
    """An option is unknown, missing or malformed.

    ``option`` holds the option's name and ``suggestion`` the nearest valid name, if any.
    """

    def __init__(self, option: str, message: str, *, suggestion: str | None = None) -> None:
        self.option = option
        self.suggestion = suggestion
        text = f"option '{option}': {message}"
        if suggestion:
            text += f" (did you mean '{suggestion}'?)"
        super().__init__(text)


class SchemaError(ConfigurationError):
    """A column is missing, duplicated or of a type the lookup cannot use."""

    def __init__(self, message: str, *, column: str | None = None) -> None:
        self.column = column
        super().__init__(message)


class ConnectorNotFoundError(OptionError):
    """The ``connector`` option names no built-in connector, entry point or importable class."""

    def __init__(self, message: str, *, suggestion: str | None = None) -> None:
        super().__init__("connector", message, suggestion=suggestion)


class UnsupportedSparkError(ConfigurationError):
    """The running PySpark lacks what a surface needs; the message names the PySpark it needs
    and what to use instead (``lookup_join`` runs on every supported PySpark)."""


class ConnectorError(AsyncLookupError):
    """A connector could not complete a request to its store."""


class TransientError(ConnectorError):
    """A failure that may go away if the request is tried again (reset connection, 503...).

    ``retry_after`` (seconds), when set, is the store's own hint of when to try again.
    """

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        self.retry_after = retry_after
        super().__init__(message)


class LookupTimeoutError(TransientError, TimeoutError):
    """One attempt did not complete within ``timeout.ms``."""


class OverloadedError(TransientError):
    """The store refused the request because it has too much to do (HTTP 429 or 503, a
    server out of connections): retried with backoff, and ``capacity.adaptive`` lowers the
    concurrency limit."""


class PermanentError(ConnectorError):
    """A failure that retrying cannot fix (authentication, a bad query, a 400 answer)."""


class MissingSecretError(PermanentError):
    """A ``*.env`` option names an environment variable that is not set where it is read."""

    def __init__(self, message: str, *, option: str, variable: str) -> None:
        self.option = option
        self.variable = variable
        super().__init__(message)


class RecordError(AsyncLookupError, ValueError):
    """The value stored for one key is malformed or does not fit the declared column type.

    Connectors return an instance in place of a record; the engine treats it per ``on.error``.
    """


class LookupFailedError(AsyncLookupError):
    """Raised under ``on.error=fail`` when lookups could not be completed.

    Attributes say which connector and address failed, how many keys were affected, after how
    many attempts, and the underlying cause (also chained as ``__cause__``).
    """

    def __init__(
        self,
        *,
        connector: str,
        address: str | None,
        failed_keys: int,
        attempts: int,
        reason: str,
        sample_keys: Iterable[object] = (),
    ) -> None:
        self.connector = connector
        self.address = redact_url(address) if address else None
        self.failed_keys = failed_keys
        self.attempts = attempts
        self.reason = reason = redact_text(reason)
        self.sample_keys = list(sample_keys)[:3]
        where = f" at {self.address}" if self.address else ""
        tries = f" after {attempts} attempt{'s' if attempts != 1 else ''}" if attempts else ""
        sample = (
            f" (e.g. {', '.join(repr(k) for k in self.sample_keys)})" if self.sample_keys else ""
        )
        super().__init__(
            f"{connector} lookup{where} failed for {failed_keys} "
            f"key{'s' if failed_keys != 1 else ''}{sample}{tries}: {reason.rstrip('. ')}. "
            "Set on.error=null or on.error=column to keep going with nulls or an error column."
        )

    def with_more(self, failed_keys: int, sample_keys: Iterable[object]) -> LookupFailedError:
        """This failure, counting ``failed_keys`` more keys (failed meanwhile in the task)."""
        more = LookupFailedError(
            connector=self.connector,
            address=self.address,
            failed_keys=self.failed_keys + failed_keys,
            attempts=self.attempts,
            reason=self.reason,
            sample_keys=[*self.sample_keys, *list(sample_keys)[:3]],
        )
        more.__cause__ = self.__cause__
        return more

    def __reduce__(self):  # type: ignore[no-untyped-def]
        # Keyword-only constructor: make the error picklable so it crosses process boundaries.
        return (
            _rebuild_lookup_failed,
            (
                self.connector,
                self.address,
                self.failed_keys,
                self.attempts,
                self.reason,
                self.sample_keys,
            ),
        )


def _rebuild_lookup_failed(
    connector: str,
    address: str | None,
    failed_keys: int,
    attempts: int,
    reason: str,
    sample_keys: list[object],
) -> LookupFailedError:
    return LookupFailedError(
        connector=connector,
        address=address,
        failed_keys=failed_keys,
        attempts=attempts,
        reason=reason,
        sample_keys=sample_keys,
    )
