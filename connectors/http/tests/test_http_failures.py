"""What each failure aiohttp really raises means, by the connector's ``classify`` and the one rule
of what is retried (lookup_source.connector_api.retryable): produced against a closed port, a
name that does not resolve, a server that hangs up, one that never answers and TLS spoken to a
plain HTTP server."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from asynclookup_http.client import classify

from lookup_source.service import UserService
from lookup_source.testing.contract_network import RawServer
from tests.helpers import assert_meanings
from tests.servers import free_port


@pytest.fixture
def rude_port() -> Iterator[tuple[int, int]]:
    """Two ports: one that hangs up on every connection (once it has read what came), one
    that never answers."""
    hang_up, silent = RawServer(lambda connection: connection.recv(65536)), RawServer()
    yield hang_up.port, silent.port
    hang_up.close()
    silent.close()


def test_what_aiohttp_raises_and_whether_it_is_retried(rude_port: tuple[int, int]) -> None:
    import aiohttp

    hang_up, silent = rude_port

    async def get(url: str, **arguments: Any) -> Any:
        async with aiohttp.ClientSession() as session, session.get(url, **arguments) as answer:
            return await answer.read()

    with UserService(users=10, latency_ms=0) as service:
        plain = f"127.0.0.1:{service.port}"
        cases = [
            (
                "refused",
                lambda: get(f"http://127.0.0.1:{free_port()}/"),
                aiohttp.ClientConnectorError,
                True,
            ),
            (
                "no such host",
                lambda: get("http://no-such-host.invalid/"),
                aiohttp.ClientConnectorError,
                True,
            ),
            (
                "hangs up",
                lambda: get(f"http://127.0.0.1:{hang_up}/"),
                aiohttp.ServerDisconnectedError,
                True,
            ),
            (
                "never answers",
                lambda: get(
                    f"http://127.0.0.1:{silent}/", timeout=aiohttp.ClientTimeout(sock_read=0.2)
                ),
                (asyncio.TimeoutError, aiohttp.ServerTimeoutError),
                True,
            ),
            (
                "TLS to plain HTTP",
                lambda: get(f"https://{plain}/users/1"),
                aiohttp.ClientSSLError,
                False,
            ),
        ]
        assert_meanings(cases, "aiohttp", classify)
