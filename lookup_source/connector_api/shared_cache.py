"""The store of a shared cache tier (``cache.shared.url``): what a plugin implements.

A shared cache store is a client of the connector API whose keys and values are bytes: its
:meth:`~SharedCacheStore.lookup` reads many keys in one round trip, its :meth:`~SharedCacheStore.
store` writes many with a time to live. The engine encodes keys and values
(:mod:`lookup_source.engine.kept.shared_cache`); the store only moves bytes. A distribution
registers its class under the ``asynclookup.shared_caches`` entry-point group, by URL scheme::

    [project.entry-points."asynclookup.shared_caches"]
    redis = "asynclookup_redis.shared:RedisSharedCache"
    rediss = "asynclookup_redis.shared:RedisSharedCache"

It is opened once per Python worker and kept, like a connector's client. :meth:`open` must not
fail for a store that is down (connect lazily): a dead cache must never fail a task.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from lookup_source.connector_api.client import ConnectorConfig, LookupClient

SHARED_CACHE_GROUP = "asynclookup.shared_caches"
"""The entry-point group of shared cache stores, by URL scheme."""


class SharedCacheStore(LookupClient):
    """Bytes in, bytes out, for many keys at once (see the module)."""

    name: ClassVar[str] = "shared-cache"
    honours_cancellation: ClassVar[bool] = True

    @staticmethod
    def config_for(url: str) -> ConnectorConfig:
        """The configuration a store of ``url`` is made with."""
        return ConnectorConfig(
            connector="shared-cache", url=url, key_columns=(), value_columns=(), value_types=()
        )

    async def lookup(self, keys: Sequence[Any]) -> Mapping[Any, Any]:
        """The values of the ``keys`` (bytes) the store holds."""
        raise NotImplementedError

    async def store(self, items: Sequence[tuple[bytes, bytes]], ttl_s: float) -> None:
        """Write ``items`` (key, value), each to expire after ``ttl_s`` seconds."""
        raise NotImplementedError


__all__ = ["SHARED_CACHE_GROUP", "SharedCacheStore"]
