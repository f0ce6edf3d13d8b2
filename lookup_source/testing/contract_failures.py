"""The contract's failure tests, a mixin of :class:`.contract.ConnectorContract`: a store that
is down is transient and retried, one that refuses is permanent, one that never answers is
abandoned within ``timeout.ms``, and ``close`` releases every connection and task. Its fixtures
(``contract_store``, ``users``) are the contract's."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, ClassVar

import pyarrow as pa
import pytest

from lookup_source.connector_api import TransientError
from lookup_source.errors import AsyncLookupError, LookupFailedError
from lookup_source.testing.contract_harness import _ask, _config, lookup_rows
from lookup_source.testing.contract_network import _own_connections, _SilentServer
from lookup_source.testing.contract_store import ContractStore

FAST_FAILURE = {
    "retry.initial-delay.ms": "5",
    "retry.max-delay.ms": "20",
    "timeout.ms": "2000",
}


class FailuresContract:
    """The contract's checks of how a connector fails (not collected alone: no ``Test``)."""

    schema: ClassVar[str]

    def test_a_store_that_is_down_is_transient_and_retried(
        self, contract_store: ContractStore
    ) -> None:
        down = contract_store.unreachable_options()
        if down is None:
            pytest.skip("this store cannot be made unreachable")
        options = {**down, **FAST_FAILURE}
        client_class, config = _config(options, self.schema)
        keys = pa.RecordBatch.from_arrays([pa.array([1], pa.int64())], names=["id"])

        async def run() -> None:
            client = client_class(config)
            try:
                await client.open()
                await _ask(client, keys)
            finally:
                await client.close()

        with pytest.raises(TransientError) as info:
            asyncio.run(run())
        assert isinstance(info.value, AsyncLookupError)  # no library exception escapes
        with pytest.raises(LookupFailedError) as failed:
            lookup_rows({**options, "retry.max-attempts": "3"}, self.schema, [1])
        assert failed.value.attempts == 3
        # the engine saw one of ours, not the library's exception
        assert failed.value.reason.split(":")[0] in {"TransientError", "LookupTimeoutError"}

    def test_a_store_that_refuses_is_permanent_and_not_retried(
        self, contract_store: ContractStore
    ) -> None:
        refused = contract_store.refused_options()
        if refused is None:
            pytest.skip("this store has no refusal to provoke")
        options = {**refused, **FAST_FAILURE, "retry.max-attempts": "4"}
        with pytest.raises(LookupFailedError) as failed:
            lookup_rows(options, self.schema, [1, 2])
        assert failed.value.attempts == 1
        assert failed.value.reason.startswith("PermanentError"), failed.value.reason

    def test_a_store_that_never_answers_is_abandoned_within_the_timeout(
        self, contract_store: ContractStore
    ) -> None:
        silent = _SilentServer()
        hanging = contract_store.options_at("127.0.0.1", silent.port)
        if hanging is None:
            silent.close()
            pytest.skip("this store is not reached over the network")
        try:
            options = {
                **hanging,
                "timeout.ms": "300",
                "retry.max-attempts": "2",
                "retry.initial-delay.ms": "10",
                "on.error": "column",
            }
            started = time.monotonic()
            rows = lookup_rows(options, self.schema + ", _lookup_error string", [1, 2])
            elapsed = time.monotonic() - started
        finally:
            silent.close()
        # 2 attempts of 300 ms, and a client opened and closed: far below the clients' own
        # defaults it guards against (asyncpg's 60 s to connect, aiohttp's 300 s), with room
        # for a busy machine
        assert elapsed < 20, f"took {elapsed:.1f}s with timeout.ms=300 and 2 attempts"
        assert [r["name"] for r in rows] == [None, None]
        assert all(r["_lookup_error"] for r in rows), rows

    def test_close_releases_every_connection_and_task(
        self, contract_store: ContractStore, users: dict[int, dict[str, Any]]
    ) -> None:
        address = contract_store.server_address()
        client_class, config = _config(contract_store.options(), self.schema)
        keys = pa.RecordBatch.from_arrays([pa.array(list(users), pa.int64())], names=["id"])
        threads = threading.active_count()
        # the test's own connections (the one that wrote the data) stay; the client's must go
        baseline = _own_connections(address[1]) if address is not None else 0

        async def run() -> set[asyncio.Task[Any]]:
            client = client_class(config)
            await client.open()
            try:
                await asyncio.gather(*(_ask(client, keys.slice(i, 5)) for i in range(0, 40, 5)))
                if address is not None:
                    assert _own_connections(address[1]) > baseline
            finally:
                await client.close()
            await asyncio.sleep(0.05)
            return {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}

        left = asyncio.run(run())
        assert left == set(), f"tasks left running after close: {left}"
        if address is not None:
            deadline = time.monotonic() + 2
            while _own_connections(address[1]) > baseline and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _own_connections(address[1]) == baseline
        assert threading.active_count() <= threads
