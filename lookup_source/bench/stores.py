"""The stores a benchmark runs against: each loaded with the same users, optionally behind a
latency proxy (:mod:`lookup_source.bench.proxy`), so that every method of a scenario looks the
same keys up in the same store; only the way of calling it changes.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from lookup_source.bench.native_service import NativeUserService
from lookup_source.bench.native_site import NativeServiceUnavailable, native_service_available
from lookup_source.bench.proxy import LatencyProxy
from lookup_source.service import UserService, user_record

PREFIX = "asynclookup:bench:user:"
TABLE = "asynclookup_bench_users"
SCHEMA = "user_id long, name string, tier string"
VALUE_COLUMNS = ("name", "tier")


@dataclass
class Store:
    """One scenario's store: how asynclookup reaches it, and how the alternatives do."""

    name: str
    kind: str  # http | redis | postgres
    options: dict[str, str]
    latency_ms: float = 0.0  # the service's own latency (http)
    target: str = ""  # URL template (http), URL (redis, postgres): through the proxy if any
    batch: bool = False
    can_scan: bool = False
    round_trip_ms: float = 0.0  # measured, through the proxy if any
    requests: Callable[[], int] = lambda: -1
    extra: dict[str, Any] = field(default_factory=dict)
    server_port: int | None = None  # the store's own server (not a proxy): its CPU is measured


def _through(url: str, port: int) -> str:
    """``url`` with its host and port replaced by the proxy's."""
    parts = urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = (userinfo + "@" if userinfo else "") + f"127.0.0.1:{port}"
    return urlunsplit(parts._replace(netloc=netloc))


@contextmanager
def _maybe_proxied(url: str, default_port: int, delay_ms: float) -> Iterator[str]:
    if delay_ms <= 0:
        yield url
        return
    parts = urlsplit(url)
    with LatencyProxy(parts.hostname or "127.0.0.1", parts.port or default_port, delay_ms) as p:
        yield _through(url, p.port)


SERVICES = ("python", "native", "auto")
"""The HTTP services :func:`http_store` starts: ``python`` (:class:`UserService`, aiohttp in
this process), ``native`` (:class:`~lookup_source.bench.native_service.NativeUserService`,
nginx: GETs by its own directives with its echo module, else by njs; batches by njs), ``auto``
(native where nginx and njs are installed, else python)."""

NATIVE_SUFFIX = ", nginx"
"""Ends the name of a store the native service answers (its GETs by nginx's directives)."""
NJS_SUFFIX = ", nginx (njs)"
"""Ends it instead where njs answered the GETs."""


def native_suffix(gets_by: str) -> str:
    """The end of a store's name for the native service whose GETs ``gets_by`` answered."""
    return NJS_SUFFIX if gets_by == "njs" else NATIVE_SUFFIX


def service_of(store_name: str) -> str:
    """Which service answered a store (from its name): ``nginx`` or ``python``."""
    return "nginx" if store_name.endswith((NATIVE_SUFFIX, NJS_SUFFIX)) else "python"


def gets_of(store_name: str) -> str:
    """What answered the native service's GETs (from the store's name): ``directives`` or
    ``njs``."""
    return "njs" if store_name.endswith(NJS_SUFFIX) else "directives"


def _native(service: str) -> bool:
    """Whether ``service`` (one of :data:`SERVICES`) means the native service here."""
    if service not in SERVICES:
        raise ValueError(f"service must be one of {', '.join(SERVICES)}, not {service!r}")
    if service == "python":
        return False
    why = native_service_available()
    if why is None:
        return True
    if service == "native":
        raise NativeServiceUnavailable(f"the native HTTP service (nginx) cannot run: {why}")
    print(
        f"  http service: the native one is not available ({why}); the Python one answers",
        flush=True,
    )
    return False


@contextmanager
def http_store(
    users: int, latency_ms: float, *, batch: bool, service: str = "python"
) -> Iterator[Store]:
    """A user service (``service``: one of :data:`SERVICES`) and the store reaching it."""
    native = _native(service)
    with ExitStack() as stack:
        if native:
            nginx = stack.enter_context(NativeUserService(users=users, latency_ms=latency_ms))
            url, batch_url, count = nginx.url, nginx.batch_url, nginx.request_count
            server_port: int | None = nginx.port  # its CPU: the store's
            suffix = native_suffix(nginx.gets_by)
        else:
            python = stack.enter_context(UserService(users=users, latency_ms=latency_ms))
            url, batch_url, count = python.url, python.batch_url, python.request_count
            server_port = None  # its CPU: the bench process's
            suffix = ""
        options = (
            {"connector": "http", "http.batch.url": batch_url, "batch.size": "100"}
            if batch
            else {"connector": "http", "url": url}
        )
        yield Store(
            f"http-{'batch' if batch else 'get'}-{latency_ms:g}ms{suffix}",
            "http",
            options,
            latency_ms,
            target=batch_url if batch else url,
            batch=batch,
            requests=count,
            extra={"service": "nginx" if native else "python"},
            server_port=server_port,
        )


@contextmanager
def redis_store(url: str, users: int, *, delay_ms: float = 0.0) -> Iterator[Store]:
    import redis

    client = redis.Redis.from_url(url)
    pipe = client.pipeline(transaction=False)
    for user_id in range(users):
        pipe.set(f"{PREFIX}{user_id}", json.dumps(user_record(user_id)))
    pipe.execute()
    try:
        with _maybe_proxied(url, 6379, delay_ms) as target:
            before = int(client.info("stats")["total_commands_processed"])
            yield Store(
                "redis" if delay_ms <= 0 else f"redis, {delay_ms:g} ms each way",
                "redis",
                {
                    "connector": "redis",
                    "url": target,
                    "redis.key.pattern": f"{PREFIX}{{key}}",
                    "batch.size": "500",
                },
                target=target,
                batch=True,
                can_scan=True,
                round_trip_ms=_redis_round_trip(target),
                requests=lambda: int(client.info("stats")["total_commands_processed"]) - before,
                server_port=urlsplit(url).port or 6379,
            )
    finally:
        for start in range(0, users, 10_000):
            client.delete(*[f"{PREFIX}{u}" for u in range(start, min(users, start + 10_000))])
        client.close()


def _redis_round_trip(url: str) -> float:
    import redis

    client = redis.Redis.from_url(url)
    try:
        client.ping()
        started = time.perf_counter()
        for _ in range(200):
            client.ping()
        return (time.perf_counter() - started) / 200 * 1000
    finally:
        client.close()


@contextmanager
def postgres_store(url: str, users: int, *, delay_ms: float = 0.0) -> Iterator[Store]:
    import asyncpg

    async def setup() -> None:
        connection = await asyncpg.connect(url)
        try:
            await connection.execute(
                f"DROP TABLE IF EXISTS {TABLE}; CREATE TABLE {TABLE} "
                "(user_id bigint PRIMARY KEY, name text, tier text)"
            )
            await connection.copy_records_to_table(
                TABLE, records=[(u, f"user-{u}", user_record(u)["tier"]) for u in range(users)]
            )
            await connection.execute(f"ANALYZE {TABLE}")
        finally:
            await connection.close()

    async def drop() -> None:
        connection = await asyncpg.connect(url)
        try:
            await connection.execute(f"DROP TABLE IF EXISTS {TABLE}")
        finally:
            await connection.close()

    async def round_trip(target: str) -> float:
        connection = await asyncpg.connect(target)
        try:
            await connection.fetchval("SELECT 1")
            started = time.perf_counter()
            for _ in range(200):
                await connection.fetchval("SELECT 1")
            return (time.perf_counter() - started) / 200 * 1000
        finally:
            await connection.close()

    asyncio.run(setup())
    try:
        with ExitStack() as stack:
            target = stack.enter_context(_maybe_proxied(url, 5432, delay_ms))
            yield Store(
                "postgres" if delay_ms <= 0 else f"postgres, {delay_ms:g} ms each way",
                "postgres",
                {
                    "connector": "postgres",
                    "url": target,
                    "postgres.table": TABLE,
                    "batch.size": "500",
                },
                target=target,
                batch=True,
                can_scan=True,
                round_trip_ms=asyncio.run(round_trip(target)),
                server_port=urlsplit(url).port or 5432,
            )
    finally:
        asyncio.run(drop())


@contextmanager
def fanout_store(url: str, matches: int) -> Iterator[Store]:
    """A Postgres table where user 7 has ``matches`` rows (one-to-many), through postgres.query."""
    import asyncpg

    table = f"{TABLE}_fanout"

    async def run(sql: str, rows: list[tuple[Any, ...]] | None = None) -> None:
        connection = await asyncpg.connect(url)
        try:
            await connection.execute(sql)
            if rows:
                await connection.copy_records_to_table(table, records=rows)
                await connection.execute(f"CREATE INDEX ON {table} (user_id); ANALYZE {table}")
        finally:
            await connection.close()

    create = (
        f"DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (user_id bigint, name text, tier text)"
    )
    asyncio.run(run(create, [(7, f"order {n}", "pro") for n in range(matches)]))
    try:
        query = f"SELECT user_id, name, tier FROM {table} WHERE user_id = ANY($1)"
        yield Store(
            "postgres",
            "postgres",
            {"connector": "postgres", "url": url, "postgres.query": query},
            target=url,
        )
    finally:
        asyncio.run(run(f"DROP TABLE IF EXISTS {table}"))
