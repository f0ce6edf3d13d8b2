"""The clients the benchmark's methods use, besides asynclookup: what a user writes by hand.

- :func:`blocking_fetcher`: one blocking call per row (a per-row UDF, a thread pool);
- :func:`batched_fetcher`: the strongest synchronous code a skilled user writes: distinct keys
  of each batch, ``batch.size`` keys per request (MGET, ``= ANY($1)``, a batch POST), values
  decoded into columns;
- :func:`raw_client`: the plain async client alone, outside Spark: the ceiling.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Sequence
from typing import Any

from lookup_source.bench.stores import PREFIX, TABLE, VALUE_COLUMNS, Store

Fetch = Callable[[int], "str | None"]
BatchFetch = Callable[[Sequence[int]], "dict[int, tuple[Any, ...]]"]


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
        query = f"SELECT user_id, name, tier FROM {TABLE} WHERE user_id = ANY($1::bigint[])"

        def fetch_postgres(keys: Sequence[int]) -> dict[int, tuple[Any, ...]]:
            rows = loop.run_until_complete(connection.fetch(query, list(keys)))
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


async def raw_client(store: Store, keys: Sequence[int], capacity: int) -> int:
    """Look ``keys`` up with the plain async client, ``capacity`` at once, decoding what a
    lookup must (JSON values); return how many were found."""
    semaphore = asyncio.Semaphore(capacity)
    size = int(store.options.get("batch.size", "1"))
    chunks = [keys[i : i + size] for i in range(0, len(keys), size)]
    if store.kind == "http":
        import aiohttp

        connector = aiohttp.TCPConnector(limit=capacity)
        async with aiohttp.ClientSession(connector=connector) as session:

            async def one(chunk: Sequence[int]) -> int:
                async with semaphore:
                    if store.batch:
                        async with session.post(store.target, json={"keys": list(chunk)}) as r:
                            return len(await r.json())
                    async with session.get(store.target.replace("{key}", str(chunk[0]))) as r:
                        await r.read()
                        return int(r.status == 200)

            return sum(await asyncio.gather(*(one(c) for c in chunks)))
    if store.kind == "redis":
        from redis.asyncio import BlockingConnectionPool, Redis

        client = Redis(
            connection_pool=BlockingConnectionPool.from_url(store.target, max_connections=capacity)
        )

        async def mget(chunk: Sequence[int]) -> int:
            async with semaphore:
                values = await client.mget([f"{PREFIX}{k}" for k in chunk])
                return sum(1 for v in values if v is not None and json.loads(v))

        found = sum(await asyncio.gather(*(mget(c) for c in chunks)))
        await client.aclose()
        return found
    import asyncpg

    pool = await asyncpg.create_pool(store.target, min_size=1, max_size=min(capacity, 40))
    query = f"SELECT user_id, name, tier FROM {TABLE} WHERE user_id = ANY($1::bigint[])"

    async def fetch(chunk: Sequence[int]) -> int:
        async with semaphore:
            return len(await pool.fetch(query, list(chunk)))

    found = sum(await asyncio.gather(*(fetch(c) for c in chunks)))
    await pool.close()
    return found
