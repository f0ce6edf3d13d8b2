"""The shared cache tier (lookup_source.engine.kept.shared_cache): an interrupt of its store is
never swallowed as the store's failure, and a store's health is kept with its client, never by
its address."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pytest

from lookup_source.engine.kept.identity import LookupIdentity
from lookup_source.engine.kept.shared_cache import SharedTier, StoreHealth
from lookup_source.engine.kept.worker import current_worker, forget_worker
from lookup_source.engine.metrics import LookupMetrics
from tests.fakes import FakeClient, FakeStore, make_config, make_options, make_spec


class Interrupted(BaseException):
    """Stands for KeyboardInterrupt or SystemExit: never a store's failure to swallow."""


class InterruptingStore:
    """A shared tier's store whose every call is interrupted."""

    async def lookup(self, keys: Sequence[Any]) -> Mapping[Any, Any]:
        raise Interrupted

    async def store(self, items: Sequence[tuple[bytes, bytes]], ttl_s: float) -> None:
        raise Interrupted


def shared_tier(store: Any) -> SharedTier:
    config = make_config(make_spec(make_options()))
    return SharedTier(
        store,
        LookupIdentity.of(config),
        [pa.field("name", pa.string())],
        LookupMetrics(),
        ttl_s=60.0,
        timeout_s=1.0,
        cache_missing=False,
        max_value_bytes=1 << 16,
    )


def test_the_shared_tier_never_swallows_an_interrupt() -> None:
    tier = shared_tier(InterruptingStore())
    with pytest.raises(Interrupted):
        asyncio.run(tier.lookup([1, 2]))
    assert tier.metrics.shared_errors == 0  # not counted as the store's failure

    tier._pending = [(b"k", b"v")]  # a write under way
    with pytest.raises(Interrupted):
        asyncio.run(tier._write_pending())
    assert tier.metrics.shared_errors == 0


class UnreferencedStore(FakeClient):
    """A store client that cannot be weak-referenced (as some extension types cannot)."""

    __slots__ = ("config", "store")


def test_a_stores_health_is_kept_with_its_client_never_by_its_address() -> None:
    forget_worker()
    worker = current_worker()
    backing = FakeStore({})
    config = make_config(make_spec(make_options()))

    def factory(config: Any) -> UnreferencedStore:
        return UnreferencedStore(config, backing)

    factory.identity = "unreferenced-store"  # type: ignore[attr-defined]  # kept by the worker

    def lease() -> Any:
        return worker.lease_client(
            factory,
            config,
            identity=LookupIdentity.of(config),
            max_idle_s=60.0,
            keep=True,
        )

    first = lease()
    health = first.beside.setdefault("health", StoreHealth())
    health.unavailable_until = float("inf")  # the store failed: left alone
    again = lease()
    assert again.beside["health"] is health  # the kept client's health, for every task
    again.release(reusable=True)
    first.release(reusable=False)  # the client is closed; a new one comes next
    del first, again, health
    fresh = lease()
    assert "health" not in fresh.beside  # whatever its address, a new client starts healthy
    fresh.release(reusable=True)
    forget_worker()
