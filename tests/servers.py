"""Real servers for the connector tests.

Order of preference, for each store:

1. a URL from the environment (``ASYNCLOOKUP_TEST_REDIS_URL``), e.g. a server you run yourself;
2. a container through testcontainers, when a Docker engine answers;
3. the server binary (``redis-server``) started on a free loopback port in a temp directory.

The binary route lets the tests stop and restart the server (fault tests).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(host: str, port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing answers on {host}:{port} after {timeout}s")


def docker_available() -> bool:
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env(timeout=3).ping()
    except Exception:
        return False
    return True


@dataclass
class RedisServer:
    """A Redis server the tests can use; ``restartable`` when the tests own the process."""

    host: str
    port: int
    password: str | None = None
    db: int = 0
    process: subprocess.Popen[bytes] | None = None
    directory: str | None = None
    command: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}{self.host}:{self.port}/{self.db}"

    @property
    def restartable(self) -> bool:
        return bool(self.command)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None

    def start(self) -> None:
        assert self.command, "only a server started from the binary can be restarted"
        self.process = subprocess.Popen(
            self.command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_for_port(self.host, self.port)


@contextlib.contextmanager
def redis_server() -> Iterator[RedisServer]:
    url = os.environ.get("ASYNCLOOKUP_TEST_REDIS_URL")
    if url:
        from redis.connection import parse_url

        parts = parse_url(url)
        yield RedisServer(
            parts.get("host", "localhost"),
            int(parts.get("port", 6379)),
            parts.get("password"),
            int(parts.get("db", 0)),
        )
        return
    if docker_available():
        from testcontainers.redis import RedisContainer  # type: ignore[import-untyped]

        with RedisContainer("redis:7-alpine") as container:
            yield RedisServer(
                container.get_container_host_ip(), int(container.get_exposed_port(6379))
            )
        return
    binary = shutil.which("redis-server")
    if binary is None:
        import pytest

        pytest.skip("no Redis: set ASYNCLOOKUP_TEST_REDIS_URL, start Docker or install redis")
    port = free_port()
    directory = tempfile.mkdtemp(prefix="asynclookup-redis-")
    command = [
        binary,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        directory,
    ]
    server = RedisServer("127.0.0.1", port, directory=directory, command=command)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)
