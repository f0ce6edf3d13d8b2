"""The connector contract, run by the Redis connector against a real redis-server."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from lookup_source.testing.contract import ConnectorContract, ContractStore, Record, json_ready
from tests.servers import RedisServer


class RedisStore(ContractStore):
    """JSON values under ``<prefix>{id}`` (``<prefix>{tenant}:{id}`` for composite keys); a
    key with several records holds a JSON array of them."""

    supports_one_to_many = True

    def __init__(self, server: RedisServer, client: Any, prefix: str) -> None:
        self.server = server
        self.client = client
        self.prefix = prefix

    def options(self, *, composite: bool = False) -> dict[str, str]:
        pattern = f"{self.prefix}{{tenant}}:{{id}}" if composite else f"{self.prefix}{{key}}"
        return {"connector": "redis", "url": self.server.url, "redis.key.pattern": pattern}

    def options_at(self, host: str, port: int) -> dict[str, str]:
        return {**self.options(), "url": f"redis://{host}:{port}/0"}

    def put(self, records: Mapping[Any, Sequence[Record]]) -> None:
        values = {}
        for key, many in records.items():
            name = ":".join(map(str, key)) if isinstance(key, tuple) else str(key)
            value: Any = [json_ready(r) for r in many]
            values[f"{self.prefix}{name}"] = json.dumps(value[0] if len(value) == 1 else value)
        self.client.mset(values)

    def refused_options(self) -> dict[str, str]:
        server = self.server
        url = f"redis://nosuchuser:wrong@{server.host}:{server.port}/{server.db}"
        return {**self.options(), "url": url}

    def server_address(self) -> tuple[str, int]:
        return self.server.host, self.server.port


class TestRedisContract(ConnectorContract):
    @pytest.fixture
    def contract_store(self, redis_srv: RedisServer, redis_db: Any, prefix: str) -> RedisStore:
        return RedisStore(redis_srv, redis_db, prefix)
