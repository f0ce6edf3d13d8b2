"""The shared cache tier on Redis (``cache.shared.url=redis://...``, ``rediss://`` for TLS).

A pool of at most 16 connections per Python worker; one ``MGET`` per read, one pipeline of
``SET key value PX ttl`` per write. Connection and command errors, and redis-py's own, are
raised as they are: the engine gives up on the tier for a while and goes to the store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lookup_source.connector_api import ConnectorConfig, SharedCacheStore

POOL_SIZE = 16
"""Most connections a worker opens to the shared tier."""


class RedisSharedCache(SharedCacheStore):
    """A shared cache tier on one Redis (database, user and password from the URL)."""

    name = "redis-shared-cache"

    def __init__(self, config: ConnectorConfig) -> None:
        super().__init__(config)
        self._redis: Any = None

    async def open(self) -> None:
        """Make the pool; no connection yet (a cache that is down never fails a task)."""
        from redis.asyncio import BlockingConnectionPool, Redis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        assert self.config.url is not None
        pool = BlockingConnectionPool.from_url(
            self.config.url,
            max_connections=POOL_SIZE,
            timeout=None,
            retry=Retry(NoBackoff(), 0),
        )
        self._redis = Redis(connection_pool=pool, decode_responses=False)

    async def close(self) -> None:
        if self._redis is not None:
            redis, self._redis = self._redis, None
            await redis.aclose(close_connection_pool=True)

    async def lookup(self, keys: Sequence[Any]) -> Mapping[Any, Any]:
        if not keys:
            return {}
        values = await self._redis.mget(list(keys))
        return {key: value for key, value in zip(keys, values) if value is not None}

    async def store(self, items: Sequence[tuple[bytes, bytes]], ttl_s: float) -> None:
        if not items:
            return
        ttl_ms = max(1, round(ttl_s * 1000))
        async with self._redis.pipeline(transaction=False) as pipe:
            for key, value in items:
                pipe.set(key, value, px=ttl_ms)
            await pipe.execute()
