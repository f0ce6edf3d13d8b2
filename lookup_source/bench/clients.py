"""The clients the benchmark's methods use, besides asynclookup: what a user writes by hand.

- :func:`blocking_fetcher`: one blocking call per row (a per-row UDF, a thread pool);
- :func:`batched_fetcher`: the strongest synchronous code a skilled user writes: distinct keys
  of each batch, ``batch.size`` keys per request (MGET, ``= ANY($1)``, a batch POST), values
  decoded into columns;
- :class:`RawClient`: the plain async client alone, outside Spark: the ceiling.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from lookup_source.bench.stores import PREFIX, TABLE, VALUE_COLUMNS, Store

_decode = msgspec.json.decode
"""What the raw client decodes each answer with (a record, a value, a batch's list)."""

Fetch = Callable[[int], "str | None"]
BatchFetch = Callable[[Sequence[int]], "dict[int, tuple[Any, ...]]"]

BATCH_QUERY = f"SELECT user_id, name, tier FROM {TABLE} WHERE user_id = ANY($1::bigint[])"
"""The users of a batch of keys, as the hand-written loop and the raw client ask Postgres."""


def blocking_fetcher(kind: str, target: str) -> Fetch:
    """A function fetching one user's name with the store's blocking API. Built on the
    executor; it keeps its connection between calls, as a careful user would."""
    if kind == "http":
        import http.client
        from urllib.parse import urlsplit

        parts = urlsplit(target)
        local = threading.local()

        def fetch_http(user_id: int) -> str | None:
            connection = getattr(local, "connection", None)
            if connection is None:
                connection = local.connection = http.client.HTTPConnection(
                    parts.hostname or "127.0.0.1", parts.port, timeout=60
                )
            path = urlsplit(target.replace("{key}", str(user_id))).path
            connection.request("GET", path)
            response = connection.getresponse()
            body = response.read()
            return None if response.status == 404 else json.loads(body).get("name")

        return fetch_http
    if kind == "redis":
        import redis

        client = redis.Redis.from_url(target, max_connections=4096)

        def fetch_redis(user_id: int) -> str | None:
            raw = client.get(f"{PREFIX}{user_id}")
            return None if raw is None else json.loads(raw).get("name")

        return fetch_redis
    import asyncpg

    local = threading.local()

    def fetch_postgres(user_id: int) -> str | None:
        loop = getattr(local, "loop", None)
        if loop is None:
            loop = local.loop = asyncio.new_event_loop()
            local.connection = loop.run_until_complete(asyncpg.connect(target))
        row = loop.run_until_complete(
            local.connection.fetchrow(f"SELECT name FROM {TABLE} WHERE user_id = $1", user_id)
        )
        return None if row is None else row[0]

    return fetch_postgres


def batched_fetcher(kind: str, target: str) -> BatchFetch:
    """Fetch a list of distinct keys (at most ``batch.size``) in one blocking request; return
    key -> values of ``VALUE_COLUMNS``. Built on the executor."""
    if kind == "redis":
        import redis

        client = redis.Redis.from_url(target)

        def fetch_redis(keys: Sequence[int]) -> dict[int, tuple[Any, ...]]:
            out = {}
            for key, raw in zip(keys, client.mget([f"{PREFIX}{k}" for k in keys])):
                if raw is not None:
                    record = json.loads(raw)
                    out[key] = tuple(record.get(c) for c in VALUE_COLUMNS)
            return out

        return fetch_redis
    if kind == "postgres":
        import asyncpg

        loop = asyncio.new_event_loop()
        connection = loop.run_until_complete(asyncpg.connect(target))

        def fetch_postgres(keys: Sequence[int]) -> dict[int, tuple[Any, ...]]:
            rows = loop.run_until_complete(connection.fetch(BATCH_QUERY, list(keys)))
            return {row[0]: (row[1], row[2]) for row in rows}

        return fetch_postgres
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(target)
    connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=60)

    def fetch_http(keys: Sequence[int]) -> dict[int, tuple[Any, ...]]:
        body = json.dumps({"keys": list(keys)})
        connection.request("POST", parts.path, body, {"Content-Type": "application/json"})
        answer = json.loads(connection.getresponse().read())
        return {int(k): tuple(r.get(c) for c in VALUE_COLUMNS) for k, r in answer.items()}

    return fetch_http


class RawClient:
    """The plain async client alone, outside Spark, decoding what a lookup must (each JSON
    value or record, by msgspec, the fastest decoder at hand and the one asynclookup's
    connectors use; Postgres rows come decoded), ``capacity`` requests at once, ``batch.size``
    keys a request; as a long-lived service holds it, so its connections are open before it
    is measured, as asynclookup's are (they live as long as the worker)::

        client = RawClient(store, capacity)
        await client.open()         # the pool, every connection opened
        found = await client.lookup(keys)
        await client.close()
    """

    def __init__(self, store: Store, capacity: int, http_client: str = "aiohttp") -> None:
        self.store = store
        self.capacity = capacity
        self.http_client = http_client
        """aiohttp, or pyreqwest (a per-key GET)."""
        self._semaphore = asyncio.Semaphore(capacity)
        self._size = int(store.options.get("batch.size", "1"))
        self._client: Any = None

    async def open(self) -> None:
        """Open the client and as many connections as it will use."""
        store = self.store
        if store.kind == "http" and self.http_client == "pyreqwest":
            from pyreqwest.client import ClientBuilder

            self._client = ClientBuilder().follow_redirects(False).build()
        elif store.kind == "http":
            import aiohttp

            connector = aiohttp.TCPConnector(limit=self.capacity)
            self._client = aiohttp.ClientSession(connector=connector)
        elif store.kind == "redis":
            from redis.asyncio import BlockingConnectionPool, Redis

            pool = BlockingConnectionPool.from_url(store.target, max_connections=self.capacity)
            self._client = Redis(connection_pool=pool)
        else:
            import asyncpg

            # as many connections as the Postgres connector opens (postgres.pool-size, 10 by
            # default): 40 a process made the server spend twice the CPU per row, contending
            size = min(self.capacity, int(store.options.get("postgres.pool-size", "10")))
            self._client = await asyncpg.create_pool(store.target, min_size=size, max_size=size)
        await self.lookup([0] * self.capacity * self._size)  # every connection opened, and used

    async def lookup(self, keys: Sequence[int]) -> int:
        """Look ``keys`` up, ``batch.size`` a request; how many were found."""
        size = self._size
        chunks = [keys[i : i + size] for i in range(0, len(keys), size)]
        return sum(await asyncio.gather(*(self._one(c) for c in chunks)))

    async def _one(self, chunk: Sequence[int]) -> int:
        store = self.store
        async with self._semaphore:
            if store.kind == "http":
                session = self._client
                if store.batch:
                    async with session.post(store.target, json={"keys": list(chunk)}) as r:
                        return len(_decode(await r.read()))
                url = store.target.replace("{key}", str(chunk[0]))
                if self.http_client == "pyreqwest":
                    answer = await session.get(url).build().send()
                    body = await answer.bytes()
                    return int(answer.status == 200 and bool(_decode(body)))
                async with session.get(url) as r:
                    body = await r.read()
                    return int(r.status == 200 and bool(_decode(body)))
            if store.kind == "redis":
                values = await self._client.mget([f"{PREFIX}{k}" for k in chunk])
                return sum(1 for v in values if v is not None and _decode(v))
            return len(await self._client.fetch(BATCH_QUERY, list(chunk)))

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is None:
            return
        await (client.aclose() if self.store.kind == "redis" else client.close())
