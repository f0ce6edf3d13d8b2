"""The connector contract, run by the HTTP connector against a real aiohttp server: once per
key (GET) and once in batches (POST)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest
from aiohttp import web

from lookup_source.service import BackgroundHttpServer
from lookup_source.testing.contract import ConnectorContract, ContractStore, Record, json_ready


class RecordsService:
    """Serves what ``put`` stored: GET /u/{id}, GET /c/{tenant}/{id} (404 when absent, an
    array when a key has several records),
    POST /batch with {"keys": [...]} answered by an array of records carrying their key; any
    request with the header ``X-Refuse`` is refused with 403."""

    def __init__(self) -> None:
        self.records: dict[Any, list[dict[str, Any]]] = {}
        app = web.Application(middlewares=[self.refuse])
        app.router.add_get("/u/{id}", self.get_one)
        app.router.add_get("/c/{tenant}/{id}", self.get_composite)
        app.router.add_post("/batch", self.batch)
        self.server = BackgroundHttpServer(app)

    @web.middleware
    async def refuse(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if "X-Refuse" in request.headers:
            return web.json_response({"error": "forbidden"}, status=403)
        response: web.StreamResponse = await handler(request)
        return response

    def _answer(self, key: Any) -> web.Response:
        found = self.records.get(key)
        if not found:
            return web.json_response({"error": "not found"}, status=404)
        return web.json_response(found[0] if len(found) == 1 else found)  # several: an array

    async def get_one(self, request: web.Request) -> web.Response:
        return self._answer(int(request.match_info["id"]))

    async def get_composite(self, request: web.Request) -> web.Response:
        return self._answer((request.match_info["tenant"], int(request.match_info["id"])))

    async def batch(self, request: web.Request) -> web.Response:
        body = await request.json()
        out = []
        for key in body["keys"]:
            if isinstance(key, dict):
                for record in self.records.get((key["tenant"], key["id"]), []):
                    out.append({"tenant": key["tenant"], "id": key["id"], **record})
            else:
                out += [{"id": key, **record} for record in self.records.get(key, [])]
        return web.Response(body=json.dumps(out), content_type="application/json")


class HttpStore(ContractStore):
    def __init__(self, service: RecordsService, *, batch: bool) -> None:
        self.service = service
        self.batch = batch
        self.supports_one_to_many = True  # an array per key (GET), several records (POST)
        self.max_batch_size = None if batch else 1  # a GET carries one key

    @property
    def base(self) -> str:
        return self.service.server.base_url

    def options(self, *, composite: bool = False) -> dict[str, str]:
        return self._options(self.base, composite=composite)

    def _options(self, base: str, *, composite: bool = False) -> dict[str, str]:
        if self.batch:
            return {"connector": "http", "http.batch.url": f"{base}/batch", "batch.size": "100"}
        path = "/c/{tenant}/{id}" if composite else "/u/{key}"
        return {"connector": "http", "url": base + path}

    def options_at(self, host: str, port: int) -> dict[str, str]:
        return self._options(f"http://{host}:{port}")

    def put(self, records: Mapping[Any, Sequence[Record]]) -> None:
        for key, many in records.items():
            self.service.records[key] = [json_ready(r) for r in many]

    def refused_options(self) -> dict[str, str]:
        return {**self.options(), "http.header.X-Refuse": "yes"}

    def server_address(self) -> tuple[str, int]:
        return self.service.server.host, self.service.server.port


@pytest.fixture(scope="module")
def service() -> Iterator[RecordsService]:
    records = RecordsService()
    with records.server:
        yield records


class TestHttpPerKeyContract(ConnectorContract):
    @pytest.fixture
    def contract_store(self, service: RecordsService) -> HttpStore:
        service.records.clear()
        return HttpStore(service, batch=False)


class TestHttpBatchContract(ConnectorContract):
    @pytest.fixture
    def contract_store(self, service: RecordsService) -> HttpStore:
        service.records.clear()
        return HttpStore(service, batch=True)
