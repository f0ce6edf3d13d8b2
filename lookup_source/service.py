"""An embedded HTTP "user profile" service with a simulated latency: the service of the demo,
the bench, ``asynclookup serve`` (the docker image's), and the tests. It runs an aiohttp server
on a free loopback port in a background thread with its own event loop::

    with UserService(users=10_000, latency_ms=5) as service:
        service.url            # http://127.0.0.1:PORT/users/{key}
        service.batch_url      # http://127.0.0.1:PORT/users/batch
        service.requests       # how many lookups it has answered
        service.connections    # how many client connections it has seen
"""

from __future__ import annotations

import asyncio
import threading
from types import TracebackType
from typing import Any, TypeVar

from aiohttp import web

COUNTRIES = ("FR", "DE", "US", "JP", "BR", "IN", "NG", "CA")
TIERS = ("free", "plus", "pro", "enterprise")


def user_record(user_id: int) -> dict[str, Any]:
    """The profile the demo service holds for ``user_id`` (deterministic)."""
    return {
        "user_id": user_id,
        "name": f"user-{user_id}",
        "tier": TIERS[user_id % len(TIERS)],
        "country": COUNTRIES[(user_id * 7) % len(COUNTRIES)],
        "score": round((user_id % 1000) / 10, 1),
    }


ServerT = TypeVar("ServerT", bound="BackgroundHttpServer")


class BackgroundHttpServer:
    """Runs an aiohttp application on 127.0.0.1 in a daemon thread."""

    def __init__(self, app: web.Application, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.app = app
        self.host = host
        self.port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.ssl_context: Any = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> BackgroundHttpServer:
        self._thread = threading.Thread(target=self._run, name="asynclookup-http", daemon=True)
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise self._error
        return self

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # surface start-up failures to start()
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        loop.run_forever()
        loop.run_until_complete(self._shutdown())
        loop.close()

    async def _serve(self) -> None:
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(
            self._runner, self.host, self.port, backlog=1024, ssl_context=self.ssl_context
        )
        await site.start()
        server = getattr(site, "_server", None)
        if self.port == 0 and server is not None and server.sockets:
            self.port = int(server.sockets[0].getsockname()[1])

    async def _shutdown(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop = None

    def __enter__(self: ServerT) -> ServerT:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class UserService(BackgroundHttpServer):
    """User profiles ``0 .. users-1`` at ``GET /users/{id}`` and ``POST /users/batch``."""

    def __init__(
        self,
        *,
        users: int = 10_000,
        latency_ms: float = 5.0,
        port: int = 0,
        tail_share: float = 0.0,
        tail_ms: float = 0.0,
        slow_first_every: int = 0,
    ) -> None:
        self.users = users
        self.latency_s = latency_ms / 1000.0
        self.tail_share = tail_share
        """A share of the requests (every 1/share-th, spread evenly) takes ``tail_ms`` instead."""
        self.tail_s = tail_ms / 1000.0
        self.slow_first_every = slow_first_every
        """When set, the first request for every such key (user id a multiple of it) takes
        ``tail_ms``, later ones ``latency_ms``: a cold cache behind the service."""
        self._asked: set[str] = set()
        self.requests = 0
        self.keys_served = 0
        self._peers: set[Any] = set()
        app = web.Application()
        app.router.add_get("/users/{user_id}", self._get)
        app.router.add_post("/users/batch", self._batch)
        super().__init__(app, port=port)

    @property
    def url(self) -> str:
        return f"{self.base_url}/users/{{key}}"

    def request_count(self) -> int:
        return self.requests

    def forget_asked(self) -> None:
        """With ``slow_first_every``: every key's next request is its first again."""
        self._asked.clear()

    @property
    def connections(self) -> int:
        """The client connections that have sent a request so far (told apart by address)."""
        return len(self._peers)

    def _seen(self, request: web.Request) -> None:
        self.requests += 1
        transport = request.transport
        if transport is not None:
            self._peers.add(transport.get_extra_info("peername"))

    @property
    def batch_url(self) -> str:
        return f"{self.base_url}/users/batch"

    def _known(self, text: Any) -> int | None:
        try:
            user_id = int(text)
        except (TypeError, ValueError):
            return None
        return user_id if 0 <= user_id < self.users else None

    async def _pause(self, key: str | None = None) -> None:
        if self.slow_first_every and key is not None:
            first = key not in self._asked
            self._asked.add(key)
            user = self._known(key)
            if first and user is not None and user % self.slow_first_every == 0:
                await asyncio.sleep(self.tail_s)
                return
        elif self.tail_share and (self.requests * 7919) % round(1 / self.tail_share) == 0:
            await asyncio.sleep(self.tail_s)
        elif self.latency_s > 0:
            await asyncio.sleep(self.latency_s)

    async def _get(self, request: web.Request) -> web.Response:
        self._seen(request)
        self.keys_served += 1
        await self._pause(request.match_info["user_id"])
        user_id = self._known(request.match_info["user_id"])
        if user_id is None:
            return web.json_response({"error": "no such user"}, status=404)
        return web.json_response(user_record(user_id))

    async def _batch(self, request: web.Request) -> web.Response:
        self._seen(request)
        body = await request.json()
        keys = body.get("keys") if isinstance(body, dict) else None
        if not isinstance(keys, list):
            return web.json_response(
                {"error": 'expected a JSON object {"keys": [...]}'}, status=400
            )
        self.keys_served += len(keys)
        await self._pause()
        found = {str(k): user_record(u) for k in keys if (u := self._known(k)) is not None}
        return web.json_response(found)
