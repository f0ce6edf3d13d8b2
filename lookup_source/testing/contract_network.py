"""The contract's network fixtures: a server on a raw socket (one that never answers, or
answers what no real server would), a closed port, and a count
of this process's open connections to a port (read from ``/proc``)."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Callable


def _own_connections(port: int) -> int:
    """TCP connections of this process to ``port`` that are still established."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as handle:
                lines = handle.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if remote_port == port and fields[3] == "01" and fields[9] in inodes:
                count += 1
    return count


class RawServer:
    """A server on a raw socket of a loopback port, for what no real server would do: each
    connection it accepts is given to ``answer`` (on the accepting thread), or, without one,
    kept open and never answered (a store that hangs). Close it with :meth:`close`::

        server = RawServer(lambda connection: connection.sendall(b"HTTP/1.1 200 OK\\r\\n..."))
        ... f"http://127.0.0.1:{server.port}/" ...
        server.close()
    """

    def __init__(self, answer: Callable[[socket.socket], None] | None = None) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.port = self.socket.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self._answer = answer
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            if self._answer is None:
                self.accepted.append(connection)
                continue
            with connection, contextlib.suppress(OSError):
                self._answer(connection)

    def close(self) -> None:
        self.socket.close()
        for connection in self.accepted:
            connection.close()


class _SilentServer(RawServer):
    """Accepts connections and never answers: a store that hangs."""

    def __init__(self) -> None:
        super().__init__()


def read_request(connection: socket.socket) -> bytes:
    """An HTTP request's head as a client sent it (up to its blank line, or the end)."""
    request = b""
    while b"\r\n\r\n" not in request:
        data = connection.recv(65536)
        if not data:
            break
        request += data
    return request


def _closed_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        return int(probe.getsockname()[1])
