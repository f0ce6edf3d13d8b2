"""The shared cache tier (``cache.shared.url``): answers kept in a store every worker and every
job reads (a Redis), after the per-worker cache and before the store of the lookup.

- **Keys** are namespaced by the lookup's identity (:func:`namespace`): connector, URL without
  its password, connector options except those that hold secrets, key and value schema, and
  ``cache.shared.namespace``; for your own ``fetch=`` / ``fetch_many=``, its name and code. Two
  lookups that differ in any of them never read each other's answers; a key shows no secret.
- **Values** (:class:`ValueCodec`) are a key's rows as an Arrow IPC message (no schema: it is
  in the namespace) compressed with zstd — every type the lookup supports round-trips exactly,
  about 100-200 bytes for a small row — or one byte for a key the store does not have.
- **Never in the way**: a read that fails or takes longer than ``cache.shared.timeout.ms`` (a
  write: ten times that, as no answer waits for it) is counted (``shared_errors``) and its
  keys go to the store; the tier is then left alone for :data:`COOL_OFF_S` on this worker.
  Writes run beside the lookups, after the store answered; a task waits for its last writes
  (each within its time limit) when it closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import decimal
import hashlib
import json
import logging
import re
import struct
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from lookup_source.connector_api import ConnectorConfig, Key, Matches
from lookup_source.connector_api.shared_cache import SharedCacheStore
from lookup_source.connector_api.values import conform_matches, records_to_matches
from lookup_source.engine.answers import (
    MISSING,
    Answer,
    CachedRows,
    cache_rows,
)
from lookup_source.engine.cache_layer import CacheAnswer, known_answer
from lookup_source.engine.metrics import LookupMetrics
from lookup_source.redaction import redact_url

FORMAT = 1
"""The version of keys and values; a change of form starts a new namespace."""

WRITE_TIMEOUTS = 10
"""A write, which no answer waits for, may take this many ``cache.shared.timeout.ms``."""

COOL_OFF_S = 5.0
"""After a failed or slow read or write, the worker leaves the tier alone this long."""

SECRET_OPTION = re.compile(
    r"password|passwd|secret|token|auth|cookie|credential|api[-_.]?key|private", re.IGNORECASE
)
"""Connector options (and HTTP headers) whose values are left out of the namespace."""

log = logging.getLogger("lookup_source")

_MISSING_VALUE = b"\x00"
_ROWS = b"\x01"
_LENGTH = struct.Struct("<I")


# ---------------------------------------------------------------------------------------------
# The lookup's identity, and its keys
# ---------------------------------------------------------------------------------------------


def _option_identity(name: str, value: Any) -> str:
    if SECRET_OPTION.search(name) or (
        name.lower().startswith("http.header.") and SECRET_OPTION.search(str(value))
    ):
        return f"{name}=(secret)"
    if name == "function.id":  # made anew for each job: the function's code stands for it
        return ""
    return f"{name}={value!r}"


def identity_text(config: ConnectorConfig, namespace: str = "", code: str = "") -> str:
    """What tells a lookup's answers apart from another's (no secret in it)."""
    url = redact_url(config.url) if config.url else ""
    options = sorted(
        text for name, value in config.options.items() if (text := _option_identity(name, value))
    )
    parts = [
        f"format={FORMAT}",
        f"connector={config.connector}",
        f"url={url}",
        f"options={options}",
        f"keys={list(config.key_columns)}:{[str(t) for t in config.key_types]}",
        f"values={list(zip(config.value_columns, map(str, config.value_types)))}",
        f"code={code}",
        f"namespace={namespace}",
    ]
    return "\n".join(parts)


def namespace(config: ConnectorConfig, namespace: str = "", code: str = "") -> bytes:
    """The prefix of every key of this lookup in the tier: ``asynclookup:<digest>:``."""
    digest = hashlib.sha256(identity_text(config, namespace, code).encode()).hexdigest()[:32]
    return f"asynclookup:{digest}:".encode()


def function_code(function: Any) -> str:
    """A digest of a user's function that is the same in every job: its qualified name, its
    code (and the code it nests), and the plain values its closure holds."""
    target = getattr(function, "__func__", function)
    code = getattr(target, "__code__", None)
    if code is None:  # a callable object: its class's __call__
        target = type(function).__call__
        code = getattr(target, "__code__", None)
    digest = hashlib.sha256(
        f"{getattr(target, '__module__', '')}.{getattr(target, '__qualname__', '')}".encode()
    )
    if code is not None:
        _hash_code(digest, code)
    for cell in getattr(target, "__closure__", None) or ():
        with contextlib.suppress(ValueError):
            value = cell.cell_contents
            if isinstance(value, (str, int, float, bool, bytes, type(None))):
                digest.update(repr(value).encode())
    return digest.hexdigest()[:32]


def _hash_code(digest: Any, code: Any) -> None:
    digest.update(code.co_code)
    digest.update(repr(code.co_names).encode())
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            _hash_code(digest, const)
        else:
            digest.update(repr(const).encode())


def _key_json(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"b": value.hex()}
    if isinstance(value, (datetime.date, datetime.datetime, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    raise TypeError(f"a key of type {type(value).__name__} cannot be named in the shared cache")


def key_bytes(prefix: bytes, key: Key) -> bytes:
    """The tier's key of one lookup key (its type is in the namespace, so ``1`` and ``"1"``
    of two lookups never meet)."""
    if isinstance(key, str):
        return prefix + key.encode("utf-8", "surrogateescape")
    if isinstance(key, int) and not isinstance(key, bool):
        return prefix + str(key).encode()
    text = json.dumps(key, default=_key_json, separators=(",", ":"), ensure_ascii=False)
    return prefix + text.encode("utf-8", "surrogateescape")


# ---------------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------------


class ValueCodec:
    """A key's rows to bytes and back, in the lookup's value schema."""

    def __init__(self, fields: Sequence[pa.Field]) -> None:
        self.schema = pa.schema(list(fields))
        self._codec = pa.Codec("zstd")

    def encode(self, rows: pa.RecordBatch) -> bytes:
        message = rows.serialize()
        packed = self._codec.compress(message, asbytes=True)
        return _ROWS + _LENGTH.pack(message.size) + packed

    def encode_missing(self) -> bytes:
        return _MISSING_VALUE

    def decode(self, data: bytes) -> pa.RecordBatch | Any:
        """The rows ``data`` holds, or :data:`MISSING`; ValueError for what is not a value."""
        if data == _MISSING_VALUE:
            return MISSING
        if data[:1] != _ROWS or len(data) < 1 + _LENGTH.size:
            raise ValueError("not a value of the shared cache")
        (size,) = _LENGTH.unpack_from(data, 1)
        raw = self._codec.decompress(data[1 + _LENGTH.size :], decompressed_size=size)
        rows = pa.ipc.read_record_batch(raw, self.schema)
        if not isinstance(rows, pa.RecordBatch):
            raise ValueError("not a record batch")
        return rows


# ---------------------------------------------------------------------------------------------
# The tier
# ---------------------------------------------------------------------------------------------


class SharedTier:
    """A task's view of the shared cache tier: :meth:`lookup` a batch's keys, :meth:`store`
    what the store answered, :meth:`aclose` when the task closes."""

    def __init__(
        self,
        store: SharedCacheStore,
        prefix: bytes,
        fields: Sequence[pa.Field],
        metrics: LookupMetrics,
        *,
        ttl_s: float,
        timeout_s: float,
        cache_missing: bool,
        clock: Any = time.monotonic,
    ) -> None:
        self.store_client = store
        self.prefix = prefix
        self.fields = list(fields)
        self.codec = ValueCodec(self.fields)
        self.metrics = metrics
        self.ttl_s = ttl_s
        self.timeout_s = timeout_s
        self.cache_missing = cache_missing
        self._clock = clock
        self._pending: list[tuple[bytes, bytes]] = []
        self._writer: asyncio.Future[None] | None = None

    # -- health ----------------------------------------------------------------------------------

    def _available(self) -> bool:
        return self._clock() >= self.store_client.unavailable_until

    def _failed(self, what: str, error: BaseException) -> None:
        self.metrics.shared_errors += 1
        self.store_client.unavailable_until = self._clock() + COOL_OFF_S
        log.warning(
            "asynclookup: the shared cache %s failed (%s: %s); its keys go to the store, and "
            "the shared cache is left alone for %.0f s",
            what,
            type(error).__name__,
            error,
            COOL_OFF_S,
        )

    # -- reads -----------------------------------------------------------------------------------

    async def lookup(self, keys: list[Key]) -> CacheAnswer:
        """What the tier knows of ``keys``; never raises (a failure: every key wanted)."""
        everything = np.arange(len(keys), dtype=np.int64)
        if not keys or not self._available():
            return CacheAnswer(everything)
        try:
            names = [key_bytes(self.prefix, key) for key in keys]
        except TypeError:
            return CacheAnswer(everything)  # a key the tier cannot name: asked of the store
        try:
            found = await asyncio.wait_for(self.store_client.lookup(names), self.timeout_s)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self._failed("read", exc)
            return CacheAnswer(everything)
        decoded: dict[Key, Any] = {}
        for key, name in zip(keys, names):
            data = found.get(name)
            if data is None:
                continue
            try:
                value = self.codec.decode(data)
            except Exception:  # a value written by something else: a miss
                continue
            decoded[key] = value if value is MISSING else CachedRows(value, 0, value.num_rows)
        answer = known_answer(keys, decoded, self.fields)
        self.metrics.shared_hits += answer.hits
        self.metrics.shared_misses += answer.misses
        return answer

    # -- writes ----------------------------------------------------------------------------------

    def store(self, answer: Answer) -> None:
        """Write what the store answered, beside the lookups (never waited for here): the
        answers that arrive while a write is under way go together in the next one."""
        if not self._available() or not answer.size:
            return
        try:
            items = self._items(answer)
        except Exception:  # what cannot be written is asked again next time
            return
        if not items:
            return
        self._pending.extend(items)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.ensure_future(self._write_pending())

    def _items(self, answer: Answer) -> list[tuple[bytes, bytes]]:
        keys = answer.asked()
        matches = matches_of(answer, self.fields)
        entries = cache_rows(keys, matches, answer.found(), cache_missing=self.cache_missing)
        items = []
        for key, entry in entries:
            try:
                name = key_bytes(self.prefix, key)
            except TypeError:
                continue
            if entry is MISSING:
                items.append((name, self.codec.encode_missing()))
            else:
                rows = entry.values.slice(entry.start, entry.count)
                items.append((name, self.codec.encode(rows)))
        return items

    async def _write_pending(self) -> None:
        """Write what is pending, in one round trip at a time, until nothing is."""
        while self._pending and self._available():
            items, self._pending = self._pending, []
            try:
                write = self.store_client.store(items, self.ttl_s)
                await asyncio.wait_for(write, self.timeout_s * WRITE_TIMEOUTS)
            except asyncio.CancelledError:
                raise
            except BaseException as exc:
                self._failed("write", exc)
        self._pending = []

    async def aclose(self, *, flush: bool) -> None:
        """Wait for the writes still under way (each ends within its time limit) when
        ``flush``; else (a failed task) drop them: nothing is left running on the loop."""
        if self._writer is None:
            return
        if not flush:
            self._pending = []
            self._writer.cancel()
        await asyncio.gather(self._writer, return_exceptions=True)


def matches_of(answer: Answer, fields: Sequence[pa.Field]) -> Matches:
    """``answer``'s matches in ``fields``' types (records converted)."""
    if answer.matches is not None:
        return conform_matches(answer.matches, fields)
    assert answer.values is not None
    return records_to_matches(range(answer.size), dict(enumerate(answer.values)), fields)


__all__ = [
    "COOL_OFF_S",
    "SharedTier",
    "ValueCodec",
    "function_code",
    "identity_text",
    "key_bytes",
    "namespace",
]
