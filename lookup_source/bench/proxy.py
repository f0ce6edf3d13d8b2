"""A store across a network, on one machine: a TCP proxy that delays every byte.

These machines have no netem, so the benchmark puts this userspace proxy between every method
and the store: each chunk of data is forwarded ``delay_ms`` after it arrived, in each direction
(0.5 ms each way = a 1 ms round trip), without limiting how many requests are in flight. It
runs in a process of its own::

    with LatencyProxy("127.0.0.1", 6379, delay_ms=0.5) as proxy:
        url = f"redis://127.0.0.1:{proxy.port}/0"
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import itertools
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from types import TracebackType

from lookup_source.bench.children import ends_with_this_process

_HIGH_WATER = 4 * 1024 * 1024
"""Bytes waiting to be written to one side before reading from the other pauses."""


class _Clock(threading.Thread):
    """Runs callbacks on the event loop at precise times.

    asyncio's own timers wait on epoll, which counts whole milliseconds: a 0.5 ms delay would
    become 1 ms or more. This thread waits with microsecond precision and hands the callbacks
    that are due to the loop in one batch."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(name="latency-proxy-clock", daemon=True)
        self.loop = loop
        self.lead = 0.0  # how early to hand a callback over, for it to run on time
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._count = itertools.count()
        self._changed = threading.Condition()

    def at(self, due: float, callback: Callable[[], None]) -> None:
        with self._changed:
            heapq.heappush(self._heap, (due - self.lead, next(self._count), callback))
            if self._heap[0][2] is callback:
                self._changed.notify()

    def run(self) -> None:
        while True:
            with self._changed:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    wait = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._changed.wait(wait)
                due = []
                now = time.monotonic()
                while self._heap and self._heap[0][0] <= now:
                    due.append(heapq.heappop(self._heap)[2])
            self.loop.call_soon_threadsafe(_run_all, due)


def _run_all(callbacks: list[Callable[[], None]]) -> None:
    for callback in callbacks:
        callback()


class _Delayed:
    """Writes to a transport, each chunk ``delay_s`` after it was handed over, in order."""

    def __init__(self, delay_s: float, clock: _Clock) -> None:
        self.delay_s = delay_s
        self.clock = clock
        self.transport: asyncio.Transport | None = None
        self.waiting: deque[bytes | None] = deque()  # before the transport exists
        self.closed = False

    def send(self, data: bytes | None) -> None:
        if self.transport is None:
            self.waiting.append(data)
            return
        self.clock.at(time.monotonic() + self.delay_s, lambda: self._write(data))

    def attach(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        while self.waiting:
            self.send(self.waiting.popleft())

    def _write(self, data: bytes | None) -> None:
        if self.transport is None or self.closed:
            return
        if data is None:
            self.closed = True
            self.transport.close()
        else:
            self.transport.write(data)


class _Side(asyncio.Protocol):
    """One end of a proxied connection: what it receives goes to ``out`` (the other end)."""

    def __init__(self, out: _Delayed, inbound: _Delayed) -> None:
        self.out = out
        self.inbound = inbound  # the writer of this side
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.inbound.attach(transport)

    def data_received(self, data: bytes) -> None:
        self.out.send(data)
        peer = self.out.transport
        if peer is not None and peer.get_write_buffer_size() > _HIGH_WATER and self.transport:
            self.transport.pause_reading()
            asyncio.get_running_loop().call_later(0.001, self._resume)

    def _resume(self) -> None:
        peer = self.out.transport
        if self.transport is None or self.transport.is_closing():
            return
        if peer is not None and peer.get_write_buffer_size() > _HIGH_WATER:
            asyncio.get_running_loop().call_later(0.001, self._resume)
        else:
            self.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.out.send(None)


async def _serve(host: str, port: int, delay_s: float) -> None:
    loop = asyncio.get_running_loop()
    clock = _Clock(loop)
    clock.start()
    clock.lead = await _calibrate(clock)

    connecting: set[asyncio.Task[None]] = set()

    def accept() -> _Side:
        to_client, to_server = _Delayed(delay_s, clock), _Delayed(delay_s, clock)
        client = _Side(to_server, to_client)

        async def connect() -> None:
            try:
                await loop.create_connection(lambda: _Side(to_client, to_server), host, port)
            except OSError:
                to_client.send(None)

        task = loop.create_task(connect())
        connecting.add(task)
        task.add_done_callback(connecting.discard)
        return client

    server = await loop.create_server(accept, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()


def _set_now(future: asyncio.Future[float]) -> None:
    future.set_result(time.monotonic())


async def _calibrate(clock: _Clock, samples: int = 60) -> float:
    """The median time between a callback being due and it running on the loop."""
    late: list[float] = []
    for _ in range(samples):
        ran: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        due = time.monotonic() + 0.0005
        clock.at(due, functools.partial(_set_now, ran))
        late.append(await ran - due)
    late.sort()
    return max(0.0, late[len(late) // 2])


class LatencyProxy:
    """Forwards 127.0.0.1:``port`` to ``host:target_port``, ``delay_ms`` later each way."""

    def __init__(self, host: str, target_port: int, delay_ms: float) -> None:
        self.host = host
        self.target_port = target_port
        self.delay_ms = delay_ms
        self.port = 0
        self._process: subprocess.Popen[str] | None = None

    def __enter__(self) -> LatencyProxy:
        command = [sys.executable, "-m", "lookup_source.bench.proxy", self.host]
        command += [str(self.target_port), str(self.delay_ms)]
        self._process = subprocess.Popen(
            ends_with_this_process(command), stdout=subprocess.PIPE, text=True
        )
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line.strip().isdigit():
            self._process.kill()
            raise RuntimeError("the latency proxy did not start")
        self.port = int(line)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(10)


if __name__ == "__main__":  # python -m lookup_source.bench.proxy HOST PORT DELAY_MS
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]) / 1000.0))
