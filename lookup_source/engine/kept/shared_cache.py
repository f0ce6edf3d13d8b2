"""The shared cache tier (``cache.shared.url``): answers kept in a store every worker and every
job reads (a Redis), after the per-worker cache and before the store of the lookup.

The tier crosses jobs, users and tenants, so it trusts nothing it did not prove:

- **Keys** are namespaced by the lookup's identity (:mod:`.identity`): everything that decides
  the answers — the connector, the URL with its credentials and parameters, every option and
  header, the values of ``*.env`` options and the content of certificate files as the executor
  sees them, the key and value schema, a ``fetch=`` function's code and state, the secret of
  ``cache.shared.secret.env`` — secrets entering only through a keyed one-way digest, and
  ``cache.shared.namespace``, which only narrows it. Two lookups whose answers could differ
  never read each other's; a key shows no secret.
- **Values** (:class:`ValueCodec`) are a key's rows as an Arrow IPC message (no schema: it is
  in the namespace) compressed with zstd, or a mark for a key the store does not have, with
  the time they expire, sealed by a tag (HMAC-SHA-256 of the key and the value, keyed by the
  identity's secret material): a value written by anyone without that material, or moved from
  another key, is a miss. A value is read defensively: its size is bounded
  (``cache.shared.max-value-bytes``) before anything is decompressed, and its Arrow data fully
  validated before use; what fails is a miss, counted in ``shared_rejected``, never a crash.
  A value is believed for the time it has left, never longer than the reading lookup's own
  ``cache.shared.ttl.ms`` (a writer's clock or settings do not decide a reader's freshness),
  and a lookup that keeps no misses (``cache.shared.missing-keys=false``) believes none
  another wrote; a hit is kept by the worker's cache for that time, no longer. Arrow's own
  body compression is refused before Arrow reads a buffer (it would inflate past any bound).
- **Never in the way**: a read that fails or takes longer than ``cache.shared.timeout.ms`` (a
  write: ten times that, as no answer waits for it) is counted (``shared_errors``) and its
  keys go to the store; the tier is then left alone for :data:`COOL_OFF_S` on this worker.
  Writes run beside the lookups, after the store answered; a task waits for its last writes
  (each within its time limit) when it closes.
"""

from __future__ import annotations

import asyncio
import datetime
import decimal
import json
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from lookup_source.connector_api import Key
from lookup_source.connector_api.shared_cache import SharedCacheStore
from lookup_source.engine.clock import SYSTEM_CLOCKS, Clocks
from lookup_source.engine.kept.cache_layer import CacheAnswer, known_answer
from lookup_source.engine.kept.identity import LookupIdentity
from lookup_source.engine.kept.shared_values import FORMAT, TAG_BYTES, RejectedValue, ValueCodec
from lookup_source.engine.metrics import LookupMetrics
from lookup_source.engine.request.answers import (
    MISSING,
    Answer,
    CachedRows,
    cache_rows,
)

WRITE_TIMEOUTS = 10
"""A write, which no answer waits for, may take this many ``cache.shared.timeout.ms``."""

COOL_OFF_S = 5.0
"""After a failed or slow read or write, the worker leaves the tier alone this long."""

log = logging.getLogger("lookup_source")


# ---------------------------------------------------------------------------------------------
# The lookup's keys
# ---------------------------------------------------------------------------------------------


def namespace(identity: LookupIdentity) -> bytes:
    """The prefix of every key of this lookup in the tier: ``asynclookup:2:<digest>:``."""
    return f"asynclookup:{FORMAT}:{identity.digest('tier')[:32]}:".encode()


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
# The tier
# ---------------------------------------------------------------------------------------------


class StoreHealth:
    """Whether a shared tier's store may be asked: one per kept store client, kept beside it by
    the worker (never written onto the client it borrowed) and shared by every lookup that uses
    that store, so a store that failed is left alone by all of them for :data:`COOL_OFF_S`."""

    def __init__(self) -> None:
        self.unavailable_until = 0.0
        """Until when (the worker's clock) the store is left alone."""


class SharedTier:
    """A task's view of the shared cache tier: :meth:`lookup` a batch's keys, :meth:`store`
    what the store answered, :meth:`aclose` when the task closes. ``identity``: the lookup's,
    with the tier's secret and namespace (it names the keys and keys the values' tags)."""

    def __init__(
        self,
        store: SharedCacheStore,
        identity: LookupIdentity,
        fields: Sequence[pa.Field],
        metrics: LookupMetrics,
        *,
        ttl_s: float,
        timeout_s: float,
        cache_missing: bool,
        max_value_bytes: int,
        health: StoreHealth | None = None,
        clocks: Clocks = SYSTEM_CLOCKS,
    ) -> None:
        self.store_client = store
        self.health = health or StoreHealth()
        self.prefix = namespace(identity)
        self.fields = list(fields)
        self.codec = ValueCodec(self.fields, identity.subkey("tier values"), max_value_bytes)
        self.metrics = metrics
        self.ttl_s = ttl_s
        self.timeout_s = timeout_s
        self.cache_missing = cache_missing
        self._clock = clocks.monotonic
        self._wall_clock = clocks.wall
        self._pending: list[tuple[bytes, bytes]] = []
        self._writer: asyncio.Future[None] | None = None

    # -- health ----------------------------------------------------------------------------------

    def _available(self) -> bool:
        return self._clock() >= self.health.unavailable_until

    def _failed(self, what: str, error: Exception) -> None:
        self.metrics.shared_errors += 1
        self.health.unavailable_until = self._clock() + COOL_OFF_S
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
        """What the tier knows of ``keys``; never raises (a failure: every key wanted). The
        answer's ``ttl_s`` is the least time its hits had left in the tier."""
        everything = np.arange(len(keys), dtype=np.int64)
        if not keys or not self._available():
            return CacheAnswer(everything)
        try:
            names = [key_bytes(self.prefix, key) for key in keys]
        except TypeError:
            return CacheAnswer(everything)  # a key the tier cannot name: asked of the store
        try:
            found = await asyncio.wait_for(self.store_client.lookup(names), self.timeout_s)
        except Exception as exc:  # (never an interrupt or a cancellation)
            self._failed("read", exc)
            return CacheAnswer(everything)
        decoded: dict[Key, Any] = {}
        now_ms = int(self._wall_clock() * 1000)
        longest = now_ms + int(self.ttl_s * 1000)
        soonest = None
        for key, name in zip(keys, names):
            data = found.get(name)
            if data is None:
                continue
            try:
                value, expires_ms = self.codec.decode(name, bytes(data))
            except RejectedValue:  # forged, tampered with, out of bounds: a miss
                self.metrics.shared_rejected += 1
                continue
            if expires_ms <= now_ms:
                continue  # past its time (the writer's clock): a miss
            if value is MISSING and not self.cache_missing:
                continue  # this lookup keeps no miss: a miss another wrote is asked again
            expires_ms = min(expires_ms, longest)  # no longer than this lookup's own ttl
            soonest = expires_ms if soonest is None else min(soonest, expires_ms)
            decoded[key] = value if value is MISSING else CachedRows(value, 0, value.num_rows)
        answer = known_answer(keys, decoded, self.fields)
        if soonest is not None:
            answer.ttl_s = (soonest - now_ms) / 1000.0
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
        matches = answer.to_matches()
        entries = cache_rows(keys, matches, answer.found(), cache_missing=self.cache_missing)
        expires_ms = int((self._wall_clock() + self.ttl_s) * 1000)
        items = []
        for key, entry in entries:
            try:
                name = key_bytes(self.prefix, key)
            except TypeError:
                continue
            if entry is MISSING:
                items.append((name, self.codec.encode_missing(name, expires_ms)))
                continue
            rows = entry.values.slice(entry.start, entry.count)
            value = self.codec.encode(name, rows, expires_ms)
            if value is not None:  # too large for the tier: asked of the store next time
                items.append((name, value))
        return items

    async def _write_pending(self) -> None:
        """Write what is pending, in one round trip at a time, until nothing is."""
        while self._pending and self._available():
            items, self._pending = self._pending, []
            try:
                write = self.store_client.store(items, self.ttl_s)
                await asyncio.wait_for(write, self.timeout_s * WRITE_TIMEOUTS)
            except Exception as exc:  # (never an interrupt or a cancellation)
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


__all__ = [
    "COOL_OFF_S",
    "TAG_BYTES",
    "RejectedValue",
    "SharedTier",
    "ValueCodec",
    "key_bytes",
    "namespace",
]
