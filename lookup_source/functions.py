"""Your own ``async def`` as the lookup (Flink's ``AsyncFunction``), adapted to the connector API.

Two forms, exactly one per lookup::

    async def fetch(key):                 # one key (a tuple for composite keys)
        return {"name": ..., "tier": ...}  # a record, a list of records (several matches),
                                           # or None (missing)

    async def fetch_many(keys):           # distinct, non-null keys, at most batch.size
        return {key: record_or_records}   # missing keys left out

An object may be passed instead of a function (Flink's ``RichAsyncFunction``): its async
``__call__`` is the lookup, and its ``async def open(self)`` / ``async def close(self)``, when it
has them, run on the executor: ``open`` once per Python worker, before its first lookup (Spark
reuses a worker for task after task, micro-batch after micro-batch: the object, its session and
its pool serve them all, as Flink opens a ``RichAsyncFunction`` once per parallel instance), and
``close`` when the worker lets the object go (idle past ``connection.max-idle.ms``, or after a
failed task) — not when Spark kills the worker, so keep nothing in it that must be flushed.
Without worker reuse, both run once per task. It is pickled on the driver and rebuilt on the
executors, so sessions and pools belong in ``open``::

    class Users:
        async def open(self):
            self.session = aiohttp.ClientSession()

        async def __call__(self, key):
            async with self.session.get(f"https://api/users/{key}") as answer:
                return None if answer.status == 404 else await answer.json()

        async def close(self):
            await self.session.close()

The function is a connector like any other (:class:`FunctionLookupClient`, ``connector`` =
``function``), so every engine feature applies. An object whose calls always end promptly once
cancelled (aiohttp, asyncpg, most asyncio code) may set ``honours_cancellation = True``: each
attempt's ``timeout.ms`` then costs a plain ``asyncio.timeout`` instead of a task of its own.
What it raises means what it means for a connector (the one rule of
:mod:`~lookup_source.connector_api.retryable`): :class:`TransientError` (with ``retry_after``)
is retried, :class:`PermanentError` is not; a timeout or an ``OSError`` (refused, reset
connections, a host that does not resolve) is transient, unless it is a TLS failure no retry
can fix; any other exception is permanent. Messages name the
function by its qualified name, and the key.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pyarrow as pa

from lookup_source.connector_api import (
    ConnectorConfig,
    Key,
    LookupClient,
    LookupResult,
    Matches,
    OptionError,
    OptionSpec,
    PermanentError,
    RecordError,
    choice,
    failure_kind,
    parse_text,
)
from lookup_source.connector_api.keys import python_keys
from lookup_source.connector_api.values import arrow_to_matches, records_to_matches
from lookup_source.errors import AsyncLookupError, ConfigurationError

FUNCTION_CONNECTOR = "function"
"""The ``connector`` of a lookup through a function: chosen by ``fetch=`` or ``fetch_many=``."""

FETCH_MANY_BATCH_SIZE = 100
"""Keys per ``fetch_many`` call unless ``batch.size`` says otherwise."""


def _is_async(function: Any) -> bool:
    """An ``async def`` (a partial of one too), or an object whose ``__call__`` is one."""
    if inspect.iscoroutinefunction(function):
        return True
    if inspect.isfunction(function) or inspect.ismethod(function):
        return False
    return inspect.iscoroutinefunction(getattr(type(function), "__call__", None))  # noqa: B004


def qualified_name(function: Any) -> str:
    """``module.qualname`` of a function (or of an object's class), for messages."""
    target: Any = getattr(function, "func", function)  # a functools.partial: its function
    if not (inspect.isfunction(target) or inspect.ismethod(target)):
        target = type(target)
    module = getattr(target, "__module__", None)
    name = str(getattr(target, "__qualname__", repr(target))).replace(".<locals>", "")
    return f"{module}.{name}" if module and module not in ("__main__", "builtins") else name


@dataclass(frozen=True)
class LookupFunction:
    """A user's lookup function and its form, checked on the driver; it travels to the
    executors inside the task's closure and makes each task's client (:meth:`client`)."""

    function: Any
    many: bool
    name: str
    token: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    @classmethod
    def of(cls, fetch: Any = None, fetch_many: Any = None) -> LookupFunction | None:
        """The function given as ``fetch=`` or ``fetch_many=`` (None if neither)."""
        if fetch is None and fetch_many is None:
            return None
        if fetch is not None and fetch_many is not None:
            raise ConfigurationError(
                "give fetch= (one key per call) or fetch_many= (a list of keys per call), not both"
            )
        argument, function = ("fetch", fetch) if fetch is not None else ("fetch_many", fetch_many)
        name = qualified_name(function)
        if not callable(function) or not _is_async(function):
            raise ConfigurationError(
                f"{argument}= must be an async function (async def) or an object with an async "
                f"__call__; {name} is not async (to call blocking code, await "
                "asyncio.to_thread(...) inside an async def)"
            )
        for hook in ("open", "close"):
            method = getattr(function, hook, None)
            if method is not None and not inspect.iscoroutinefunction(method):
                raise ConfigurationError(
                    f"{argument}={name}: its {hook}() must be async def {hook}(self), run on "
                    "the executor (once per Python worker)"
                )
        return cls(function, many=fetch_many is not None, name=name)

    @property
    def argument(self) -> str:
        return "fetch_many" if self.many else "fetch"

    def options(self, options: Mapping[str, Any] | None) -> dict[str, Any]:
        """The lookup's options with the function as its connector; ``options`` may be left
        out (every option keeps its default) and may not name another connector."""
        given = {str(k): v for k, v in (options or {}).items()}
        for key, value in given.items():
            if key.strip().lower() == "connector" and str(value).strip() != FUNCTION_CONNECTOR:
                raise OptionError(
                    "connector",
                    f"is {value!r}, but {self.argument}= is given: a lookup goes through one "
                    f"connector or one function; drop the connector option or {self.argument}=",
                )
        return {
            **given,
            "connector": FUNCTION_CONNECTOR,
            "function.form": self.argument,
            "function.name": self.name,
            "function.id": self.token,  # two functions never share a cache
        }

    @property
    def identity(self) -> str:
        """What tells this function apart from every other, in every task: a Python worker
        keeps one opened client per identity (and configuration), for task after task."""
        return f"function:{self.token}"

    def __call__(self, config: ConnectorConfig) -> FunctionLookupClient:
        """The client made of the function (the runner's client factory)."""
        return FunctionLookupClient(config, self)


FUNCTION_FORM: OptionSpec[str | None] = OptionSpec(
    "function.form",
    choice("fetch", "fetch_many"),
    None,
    "Set by lookup_join(fetch=... | fetch_many=...): which form the function has.",
)


class FunctionLookupClient(LookupClient):
    """A :class:`LookupFunction` as a connector: one ``fetch`` call per key, or one
    ``fetch_many`` call per request, their exceptions translated at this boundary."""

    name: ClassVar[str] = FUNCTION_CONNECTOR
    default_batch_size: ClassVar[int] = 1
    option_specs: ClassVar[tuple[OptionSpec, ...]] = (
        FUNCTION_FORM,
        OptionSpec("function.name", parse_text, None, "Set with function.form: its name."),
        OptionSpec("function.id", parse_text, None, "Set with function.form: its identity."),
    )

    def __init__(self, config: ConnectorConfig, function: LookupFunction | None = None) -> None:
        super().__init__(config)
        if function is None:
            raise OptionError("connector", _CHOSEN_BY_FUNCTION)
        self.function = function
        self.name = f"{function.argument}={function.name}"  # type: ignore[misc]
        self._call = function.function
        # a function that always ends promptly once cancelled may say so: timeout.ms is then
        # enforced with a plain asyncio.timeout, not a task per attempt (less CPU per call)
        self.honours_cancellation = bool(  # type: ignore[misc]
            getattr(function.function, "honours_cancellation", False)
        )

    @classmethod
    def batch_size_default(cls, connector_options: Mapping[str, Any]) -> int:
        return FETCH_MANY_BATCH_SIZE if FUNCTION_FORM.get(connector_options) == "fetch_many" else 1

    @classmethod
    def describe_batch_size_default(cls) -> str:
        return f"1 per fetch, {FETCH_MANY_BATCH_SIZE} per fetch_many"

    @classmethod
    def validate_options(cls, options: ConnectorConfig) -> None:
        form = FUNCTION_FORM.get(options)
        if form is None:
            raise OptionError("connector", _CHOSEN_BY_FUNCTION)
        if form == "fetch" and options.batch_size > 1:
            raise OptionError(
                "batch.size",
                f"is {options.batch_size}, but fetch= looks up one key per call; pass "
                "fetch_many= to receive keys in batches",
            )

    async def open(self) -> None:
        opener = getattr(self._call, "open", None)
        if opener is not None:
            await opener()

    async def close(self) -> None:
        closer = getattr(self._call, "close", None)
        if closer is not None:
            await closer()

    @property
    def columnar(self) -> bool:
        """``fetch_many``: asked with :meth:`lookup_arrow`, its answer converted once."""
        return self.function.many

    async def lookup_arrow(self, keys: pa.RecordBatch) -> Matches:
        """One ``fetch_many`` call for the keys of ``keys``; its answer — a mapping of records,
        or Arrow columns carrying the keys — as :class:`Matches`, in one conversion."""
        asked = python_keys(keys)
        call = f"{self.function.name}([{len(asked)} keys])"
        try:
            result = await self._call(asked)
        except Exception as error:
            raise self._translated(error, call) from error
        fields = self.value_fields
        if result is None:
            return Matches.none(fields)
        if isinstance(result, (pa.RecordBatch, pa.Table)):
            try:
                return arrow_to_matches(result, keys, fields, what=call)
            except ValueError as error:
                raise PermanentError(str(error)) from None
        if not isinstance(result, Mapping):
            raise PermanentError(
                f"{call} returned {type(result).__name__}; fetch_many must return a mapping "
                "key -> record (or list of records), leaving missing keys out, or an Arrow "
                "record batch or table with the key column(s) and the value columns"
            )
        return records_to_matches(asked, result, fields)

    async def lookup(self, keys: Sequence[Key]) -> LookupResult:
        if self.function.many:  # the engine asks lookup_arrow; a direct caller gets records
            return await super().lookup(keys)
        if len(keys) == 1:
            return {keys[0]: await self._fetch(keys[0])}
        answers = await asyncio.gather(*(self._fetch(key) for key in keys))
        return dict(zip(keys, answers))

    async def _fetch(self, key: Key) -> Any:
        try:
            value = await self._call(key)
        except Exception as error:
            raise self._translated(error, f"{self.function.name}({key!r})") from error
        return self._checked(value, f"{self.function.name}({key!r})")

    @staticmethod
    def _translated(error: Exception, call: str) -> Exception:
        """What the function raised, as the engine reads it: the one rule of
        :mod:`~lookup_source.connector_api.retryable` decides what is retried."""
        if isinstance(error, AsyncLookupError):
            return error
        text = f"{call} raised {type(error).__name__}: {error}".rstrip(": ")
        kind = failure_kind(error)
        return kind(text) if isinstance(kind, type) else kind

    @staticmethod
    def _checked(value: Any, call: str) -> Any:
        """A record, a list of records or None as they are (an Arrow batch or table: its rows,
        the key's matches); anything else an error of its key."""
        if value is None or isinstance(value, (Mapping, RecordError)):
            return value
        if isinstance(value, (pa.RecordBatch, pa.Table)):
            return value.to_pylist() or None
        if isinstance(value, (list, tuple)) and all(isinstance(v, Mapping) for v in value):
            return list(value)
        return RecordError(
            f"{call} returned {type(value).__name__}, not a record: return a mapping of value "
            "columns, a list of them (several matches) or None (missing)"
        )


_CHOSEN_BY_FUNCTION = (
    f"'{FUNCTION_CONNECTOR}' is chosen by passing your async function as fetch= or "
    "fetch_many= to lookup_join or register_lookup_table, which the data source cannot take"
)
