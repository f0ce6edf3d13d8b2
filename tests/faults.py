"""A fault-injecting TCP proxy the tests own: put it between a client and a real server.

proxy = FaultProxy("127.0.0.1", redis_port)   # clients connect to proxy.port
proxy.cut()          # drop every open connection now (the server stays up)
proxy.down()         # refuse new connections and drop the open ones
proxy.up()           # accept again
proxy.delay_s = 0.5  # hold every answer back
proxy.fail_rate = 0.1  # drop the connection instead of forwarding 10% of requests
proxy.hold_replies(lambda data: data[:1] == b"*", count=3, seconds=3.0)  # on 3 connections
proxy.connections    # connections accepted so far; proxy.open_connections: open now
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
from typing import Any

from tests.servers import free_port


class FaultProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.host = "127.0.0.1"
        self.port = free_port()
        self.delay_s = 0.0
        self.fail_rate = 0.0
        self._hold: tuple[Any, int, float] | None = None
        self.held = 0
        """Answers held back so far (:meth:`hold_replies`)."""
        self._random = random.Random(42)
        self.requests = 0
        self.dropped = 0
        self.connections = 0
        """Client connections accepted so far."""
        self.open_connections = 0
        """Client connections open now."""
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.AbstractServer | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.up()

    def _call(self, coroutine: object) -> object:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(10)  # type: ignore[arg-type]

    def hold_replies(self, matching: Any, *, count: int, seconds: float) -> None:
        """On each of the next ``count`` connections, hold back ``seconds`` the first answer
        (a chunk the server sends) for which ``matching(data)`` is true: a job's first
        requests, the likeliest to be slow (a query's rows, not a connection's handshake);
        a hedge sent on another connection is not held."""
        self._hold = (matching, self.connections + count, seconds)
        self.held = 0

    def up(self) -> None:
        async def start() -> None:
            self._server = await asyncio.start_server(
                self._handle, self.host, self.port, reuse_address=True
            )

        self._call(start())

    def down(self) -> None:
        async def stop() -> None:
            if self._server is not None:
                self._server.close()
                self._server = None
            self._close_all()

        self._call(stop())

    def cut(self) -> None:
        async def cut() -> None:
            self._close_all()

        self._call(cut())

    def close(self) -> None:
        self.down()

        async def settle() -> None:  # the connections' handlers end after their transports
            pending = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            if pending:
                await asyncio.wait(pending, timeout=5)

        self._call(settle())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def _close_all(self) -> None:
        for writer in list(self._writers):
            with contextlib.suppress(Exception):
                writer.transport.abort()
        self._writers.clear()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number = self.connections
        to_hold = self._hold is not None and number <= self._hold[1]
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))
        self.open_connections += 1

        # when either side closes, the other is closed too, as a real proxy does: a client
        # waiting for the server to close after its goodbye does not wait forever
        async def client_to_server() -> None:
            try:
                while data := await reader.read(65536):
                    self.requests += 1
                    if self.fail_rate and self._random.random() < self.fail_rate:
                        self.dropped += 1
                        writer.transport.abort()
                        return
                    up_writer.write(data)
                    await up_writer.drain()
            finally:
                up_writer.transport.abort()

        async def server_to_client() -> None:
            try:
                nonlocal to_hold
                while data := await up_reader.read(65536):
                    if to_hold and self._hold is not None and self._hold[0](data):
                        to_hold = False
                        self.held += 1
                        await asyncio.sleep(self._hold[2])
                    if self.delay_s:
                        await asyncio.sleep(self.delay_s)
                    writer.write(data)
                    await writer.drain()
            finally:
                writer.transport.abort()

        try:
            await asyncio.gather(client_to_server(), server_to_client(), return_exceptions=True)
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self.open_connections -= 1
            for w in (writer, up_writer):
                self._writers.discard(w)
                with contextlib.suppress(Exception):
                    w.transport.abort()
