"""A user's own functions for ``lookup_join``'s ``fetch=`` and ``fetch_many=``: the HTTP
connector's lookups written by hand (:class:`HttpFetch`) and ``MGET`` over Redis
(:class:`RedisFetchMany`)."""

from __future__ import annotations

import json
from typing import Any


class HttpFetch:
    """The HTTP connector's lookups written as a user's own function (one aiohttp session per
    task, answers decoded by msgspec as the connector does): what the ``fetch=`` adapter
    costs, next to the connector."""

    honours_cancellation = True  # aiohttp's calls end at once when cancelled

    def __init__(self, target: str, batch: bool, capacity: int) -> None:
        self.target = target
        self.batch = batch
        self.capacity = capacity

    async def open(self) -> None:
        import aiohttp

        limit = max(1, self.capacity)
        connector = aiohttp.TCPConnector(limit=limit, limit_per_host=limit)
        self.session = aiohttp.ClientSession(connector=connector)

    async def __call__(self, key: Any) -> Any:
        import msgspec

        if self.batch:
            async with self.session.post(self.target, json={"keys": key}) as answer:
                found = msgspec.json.decode(await answer.read())
            return {int(k): v for k, v in found.items()}
        async with self.session.get(self.target.replace("{key}", str(key))) as answer:
            if answer.status == 404:
                return None
            return msgspec.json.decode(await answer.read())

    async def close(self) -> None:
        await self.session.close()


class RedisFetchMany:
    """A user's own ``fetch_many=`` over Redis: redis-py's asyncio client, one ``MGET`` per
    call, answered as records (``json.loads``) or in columns (pyarrow's JSON reader)."""

    honours_cancellation = True

    def __init__(self, url: str, prefix: str, capacity: int, columnar: bool) -> None:
        self.url, self.prefix, self.capacity, self.columnar = url, prefix, capacity, columnar

    async def open(self) -> None:
        from redis.asyncio import Redis

        self.redis = Redis.from_url(self.url, max_connections=max(1, self.capacity))

    async def __call__(self, keys: list[int]) -> Any:
        values: list[Any] = await self.redis.mget([f"{self.prefix}{k}" for k in keys])
        if not self.columnar:
            return {k: json.loads(v) for k, v in zip(keys, values) if v is not None}
        import io

        import pyarrow as pa
        import pyarrow.json as pa_json

        found = [i for i, v in enumerate(values) if v is not None]
        if not found:
            return None
        documents = b"\n".join(values[i] for i in found)
        table = pa_json.read_json(io.BytesIO(documents))
        asked = pa.array([keys[i] for i in found], pa.int64())
        if "user_id" in table.schema.names:  # the bench's records carry their key: replaced
            return table.set_column(table.schema.get_field_index("user_id"), "user_id", asked)
        return table.append_column("user_id", asked)

    async def close(self) -> None:
        await self.redis.aclose()
