"""What each failure redis-py really raises means, by the connector's ``classify`` and the one
rule of what is retried (lookup_source.connector_api.retryable): produced against a real
redis-server, a closed port, a name that does not resolve and a server that never answers."""

from __future__ import annotations

from typing import Any

from asynclookup_redis.client import classify

from tests.helpers import assert_meanings
from tests.servers import RedisServer, free_port


def test_what_redis_raises_and_whether_it_is_retried(
    redis_srv: RedisServer, redis_db: Any, prefix: str, silent_port: int
) -> None:
    from redis import exceptions as rex
    from redis.asyncio import Redis

    redis_db.set(f"{prefix}text", "x")

    def client(**arguments: Any) -> Redis:
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        defaults = {
            "host": redis_srv.host,
            "port": redis_srv.port,
            "password": redis_srv.password,
            "retry": Retry(NoBackoff(), 0),  # as the connector makes its pool: one try
        }
        return Redis(**{**defaults, **arguments})

    async def wrong_type() -> Any:
        return await client().hget(f"{prefix}text", "name")

    cases = [
        ("refused", lambda: client(port=free_port()).ping(), rex.ConnectionError, True),
        (
            "no such host",
            lambda: client(host="no-such-host.invalid").ping(),
            rex.ConnectionError,
            True,
        ),
        (
            "never answers",
            lambda: client(port=silent_port, socket_timeout=0.2).ping(),
            rex.TimeoutError,
            True,
        ),
        (
            "bad command",
            lambda: client().execute_command("NO-SUCH-COMMAND"),
            rex.ResponseError,
            False,
        ),
        ("wrong type", wrong_type, rex.ResponseError, False),
        (
            "wrong password",
            lambda: client(password="wrong", username="nobody").ping(),
            rex.AuthenticationError,
            False,
        ),
    ]
    assert_meanings(cases, "redis", classify)
