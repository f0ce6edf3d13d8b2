"""The stores a benchmark runs against, and the blocking / async clients each method uses.

Every method of a scenario looks the same keys up in the same store; only the way of calling
it changes.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from lookup_source.demo.service import UserService, user_record

PREFIX = "asynclookup:bench:user:"
TABLE = "asynclookup_bench_users"
SCHEMA = "user_id long, name string, tier string"


@dataclass
class Store:
    """One scenario's store: how asynclookup reaches it, and how the alternatives do."""

    name: str
    kind: str  # http | redis | postgres
    options: dict[str, str]
    latency_ms: float = 0.0
    target: str = ""  # URL template (http), URL (redis, postgres)
    batch: bool = False
    can_scan: bool = False
    requests: Callable[[], int] = lambda: -1
    extra: dict[str, Any] = field(default_factory=dict)


@contextmanager
def http_store(users: int, latency_ms: float, *, batch: bool) -> Iterator[Store]:
    with UserService(users=users, latency_ms=latency_ms) as service:
        options = (
            {"connector": "http", "http.batch.url": service.batch_url, "batch.size": "100"}
            if batch
            else {"connector": "http", "url": service.url}
        )
        yield Store(
            f"http-{'batch' if batch else 'get'}-{latency_ms:g}ms",
            "http",
            options,
            latency_ms,
            target=service.batch_url if batch else service.url,
            batch=batch,
            requests=service.request_count,
        )


@contextmanager
def redis_store(url: str, users: int) -> Iterator[Store]:
    import redis

    client = redis.Redis.from_url(url)
    pipe = client.pipeline(transaction=False)
    for user_id in range(users):
        pipe.set(f"{PREFIX}{user_id}", json.dumps(user_record(user_id)))
    pipe.execute()
    before = int(client.info("stats")["total_commands_processed"])
    try:
        yield Store(
            "redis",
            "redis",
            {
                "connector": "redis",
                "url": url,
                "redis.key.pattern": f"{PREFIX}{{key}}",
                "batch.size": "500",
            },
            target=url,
            batch=True,
            can_scan=True,
            requests=lambda: int(client.info("stats")["total_commands_processed"]) - before,
        )
    finally:
        for start in range(0, users, 10_000):
            client.delete(*[f"{PREFIX}{u}" for u in range(start, min(users, start + 10_000))])
        client.close()


@contextmanager
def postgres_store(url: str, users: int) -> Iterator[Store]:
    import asyncpg

    async def setup() -> None:
        connection = await asyncpg.connect(url)
        try:
            await connection.execute(
                f"DROP TABLE IF EXISTS {TABLE}; CREATE TABLE {TABLE} "
                "(user_id bigint PRIMARY KEY, name text, tier text)"
            )
            await connection.copy_records_to_table(
                TABLE, records=[(u, f"user-{u}", user_record(u)["tier"]) for u in range(users)]
            )
        finally:
            await connection.close()

    async def drop() -> None:
        connection = await asyncpg.connect(url)
        try:
            await connection.execute(f"DROP TABLE IF EXISTS {TABLE}")
        finally:
            await connection.close()

    asyncio.run(setup())
    try:
        yield Store(
            "postgres",
            "postgres",
            {"connector": "postgres", "url": url, "postgres.table": TABLE, "batch.size": "500"},
            target=url,
            batch=True,
            can_scan=True,
        )
    finally:
        asyncio.run(drop())


# -- blocking, one call per row: what a synchronous UDF does ---------------------------------


def blocking_fetcher(kind: str, target: str) -> Callable[[int], str | None]:
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
                    parts.hostname or "127.0.0.1", parts.port, timeout=30
                )
            path = urlsplit(target.replace("{key}", str(user_id))).path
            connection.request("GET", path)
            response = connection.getresponse()
            body = response.read()
            return None if response.status == 404 else json.loads(body).get("name")

        return fetch_http
    if kind == "redis":
        import redis

        client = redis.Redis.from_url(target, max_connections=256)

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


# -- the raw async client alone: the ceiling -------------------------------------------------


async def raw_client(store: Store, keys: Sequence[int], capacity: int) -> int:
    """Look ``keys`` up with the plain async client, ``capacity`` at once; return found."""
    semaphore = asyncio.Semaphore(capacity)
    found = 0
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

            found = sum(await asyncio.gather(*(one(c) for c in chunks)))
    elif store.kind == "redis":
        from redis.asyncio import Redis

        client = Redis.from_url(store.target, max_connections=capacity)

        async def mget(chunk: Sequence[int]) -> int:
            async with semaphore:
                values = await client.mget([f"{PREFIX}{k}" for k in chunk])
                return sum(1 for v in values if v is not None and json.loads(v))

        found = sum(await asyncio.gather(*(mget(c) for c in chunks)))
        await client.aclose()
    else:
        import asyncpg

        pool = await asyncpg.create_pool(store.target, min_size=1, max_size=capacity)
        query = f"SELECT user_id, name, tier FROM {TABLE} WHERE user_id = ANY($1::bigint[])"

        async def fetch(chunk: Sequence[int]) -> int:
            async with semaphore:
                return len(await pool.fetch(query, list(chunk)))

        found = sum(await asyncio.gather(*(fetch(c) for c in chunks)))
        await pool.close()
    return found
