"""The connector contract: the behaviour every connector promises, as one pytest suite.

Every connector, built-in or third-party, runs it against its real server (LangChain's
``standard-tests`` is the model). Subclass :class:`ConnectorContract` in your connector's
tests and give it a ``contract_store`` fixture that returns a :class:`ContractStore` for your
server::

    import pytest

    from lookup_source.testing.contract import ConnectorContract, ContractStore


    class MyStore(ContractStore):
        def options(self, *, composite=False):
            return {"connector": "mystore", "url": self.url, "mystore.table": self.table}

        def options_at(self, host, port):
            return {**self.options(), "url": f"mystore://{host}:{port}"}

        def put(self, records):
            ...  # write each key's records where options() looks them up


    class TestMyStoreContract(ConnectorContract):
        @pytest.fixture
        def contract_store(self, my_server):
            return MyStore(...)

The suite looks keys up through the engine exactly as ``lookup_join`` does (one Spark task's
worth, no JVM) and checks values, not only counts: found, missing and null keys; every type of
:data:`VALUE_SCHEMA`; composite keys; batch limits; one-to-many matches; a store that is down is
a :class:`TransientError` (retried), a store that refuses is a :class:`PermanentError` (not
retried) and no library exception escapes; a store that never answers is abandoned within
``timeout.ms``; ``close`` releases every connection and task. A store that lacks a feature
says so (``supports_composite``, ``supports_one_to_many``, ``refused_options``) and its tests
are skipped with the reason. It needs pytest (the ``test`` extra).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import pyarrow as pa
import pytest

from lookup_source.connector_api import (
    ConnectorConfig,
    LookupClient,
    Matches,
    TransientError,
    python_keys,
    records_from_matches,
)
from lookup_source.engine.metrics import LookupMetrics
from lookup_source.engine.runner import run_lookups
from lookup_source.errors import AsyncLookupError, LookupFailedError
from lookup_source.spark.plan import LookupPlan

KEY_SCHEMA = "id long"
COMPOSITE_KEY_SCHEMA = "tenant string, id long"
VALUE_SCHEMA = (
    "name string, score double, visits long, active boolean, born date, tags array<string>"
)
"""The value columns of the contract's lookups; a store holds them in its own way."""

Record = Mapping[str, Any]


def json_ready(record: Record) -> dict[str, Any]:
    """A record with its dates as ISO text: what a JSON store (Redis, HTTP) holds."""
    return {k: v.isoformat() if isinstance(v, dt.date) else v for k, v in record.items()}


def user(i: int) -> dict[str, Any]:
    """The contract's record for key ``i``: every column set, values that differ per key."""
    return {
        "name": f"user {i} ✓",
        "score": i / 4,
        "visits": i * 1_000_000_007,
        "active": i % 2 == 0,
        "born": dt.date(1970, 1, 1) + dt.timedelta(days=i * 37),
        "tags": [f"t{i % 3}", f"u{i}"],
    }


class ContractStore:
    """What the contract needs from a connector's tests: a real server it can write to."""

    supports_composite: ClassVar[bool] = True
    """Whether ``options(composite=True)`` looks up (tenant, id) keys."""
    supports_one_to_many: ClassVar[bool] = False
    """Whether ``put`` may give a key several records, each a match."""
    max_batch_size: ClassVar[int | None] = None
    """The most keys one request of the connector may carry, if it has a limit."""

    def options(self, *, composite: bool = False) -> dict[str, str]:
        """Options (``connector``, ``url``, the connector's own) that look up what ``put``
        wrote, for the key columns ``id`` (or ``tenant, id`` when ``composite``)."""
        raise NotImplementedError

    def options_at(self, host: str, port: int) -> dict[str, str] | None:
        """The same lookup, pointed at another server address; None for a store that is not
        reached over the network (its hang test is skipped)."""
        return None

    def unreachable_options(self) -> dict[str, str] | None:
        """Options for a store that is down. By default ``options_at`` a closed port."""
        return self.options_at("127.0.0.1", _closed_port())

    def put(self, records: Mapping[Any, Sequence[Record]]) -> None:
        """Store ``records``: key (an int, or a (tenant, id) tuple) -> its records (one, or
        several when ``supports_one_to_many``), values typed as :func:`user` makes them."""
        raise NotImplementedError

    def refused_options(self) -> dict[str, str] | None:
        """Options the server refuses for good (a wrong password, an unknown table), or None."""
        return None

    def server_address(self) -> tuple[str, int] | None:
        """The server's (host, port), to count the connections left open; None to skip."""
        return None


def lookup_rows(
    options: Mapping[str, str],
    schema: str,
    keys: Sequence[Any],
    *,
    how: str = "left",
    key_type: pa.DataType | None = None,
    stats: list[LookupMetrics] | None = None,
    client_factory: Any = None,
) -> list[dict[str, Any]]:
    """Look ``keys`` up as one Spark task of ``lookup_join`` would (one batch, no JVM); return
    the output rows as dicts. Composite keys are tuples."""
    plan = LookupPlan.build(dict(options), schema)
    names = plan.key_names
    if len(names) == 1:
        arrays = [pa.array(list(keys), type=key_type or plan.key_arrow_types()[0])]
    else:
        types = plan.key_arrow_types()
        arrays = [
            pa.array([None if k is None else k[i] for k in keys], type=types[i])
            for i in range(len(names))
        ]
    batch = pa.RecordBatch.from_arrays(arrays, names=list(names))
    out = run_lookups(
        [batch],
        plan.engine_spec(names, how=how),
        plan.connector_config(),
        client_factory=client_factory,
        on_metrics=stats.append if stats is not None else None,
    )
    return [row for b in out for row in b.to_pylist()]


def _config(options: Mapping[str, str], schema: str) -> tuple[type[LookupClient], ConnectorConfig]:
    plan = LookupPlan.build(dict(options), schema)
    return plan.options.connector_class(), plan.connector_config()


async def _ask(client: LookupClient, keys: pa.RecordBatch) -> dict[Any, Any]:
    """The client's answer for ``keys`` in the record form, whichever form it gives."""
    if client.columnar:
        answer = await client.lookup_arrow(keys)
        assert isinstance(answer, Matches), f"lookup_arrow returned {type(answer).__name__}"
        return records_from_matches(python_keys(keys), answer)
    return dict(await client.lookup(python_keys(keys)))


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


class _SilentServer:
    """Accepts connections and never answers: a store that hangs."""

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.port = self.socket.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            self.accepted.append(connection)

    def close(self) -> None:
        self.socket.close()
        for connection in self.accepted:
            connection.close()


def _closed_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        return int(probe.getsockname()[1])


FAST_FAILURE = {
    "retry.initial-delay.ms": "5",
    "retry.max-delay.ms": "20",
    "timeout.ms": "2000",
}


class ConnectorContract:
    """The contract suite; subclass it and give the ``contract_store`` fixture."""

    schema: ClassVar[str] = f"{KEY_SCHEMA}, {VALUE_SCHEMA}"
    composite_schema: ClassVar[str] = f"{COMPOSITE_KEY_SCHEMA}, {VALUE_SCHEMA}"

    @pytest.fixture
    def contract_store(self) -> ContractStore:
        raise NotImplementedError("give the contract a contract_store fixture")

    @pytest.fixture
    def users(self, contract_store: ContractStore) -> dict[int, dict[str, Any]]:
        records = {i: user(i) for i in range(1, 41)}
        contract_store.put({i: [r] for i, r in records.items()})
        return records

    # -- values --------------------------------------------------------------------------------

    def test_found_missing_and_null_keys(
        self, contract_store: ContractStore, users: dict[int, dict[str, Any]]
    ) -> None:
        keys = [3, 999_999, None, 3, 40, -1]
        rows = lookup_rows(contract_store.options(), self.schema, keys)
        nothing = dict.fromkeys(users[3])
        assert rows == [
            {"id": 3, **users[3]},
            {"id": 999_999, **nothing},
            {"id": None, **nothing},
            {"id": 3, **users[3]},
            {"id": 40, **users[40]},
            {"id": -1, **nothing},
        ]

    def test_every_type_and_null_values(self, contract_store: ContractStore) -> None:
        full = user(7)
        empty: dict[str, Any] = {"name": "", "score": 0.0, "visits": 0, "active": False}
        empty |= {"born": dt.date(1, 1, 1), "tags": []}
        extreme = {"name": "é\u00a0😀" * 50, "score": -1.5e300, "visits": -(2**63)}
        extreme |= {"active": True, "born": dt.date(9999, 12, 31), "tags": ["", "x" * 1000]}
        nulls = dict.fromkeys(full)
        records = {1: full, 2: empty, 3: extreme, 4: nulls, 5: {**full, "tags": None}}
        contract_store.put({k: [v] for k, v in records.items()})
        rows = lookup_rows(contract_store.options(), self.schema, list(records))
        assert rows == [{"id": k, **v} for k, v in records.items()]

    def test_composite_keys(self, contract_store: ContractStore) -> None:
        if not contract_store.supports_composite:
            pytest.skip("this store looks up single keys only")
        records = {("acme", 1): user(1), ("acme", 2): user(2), ("beta", 1): user(3)}
        contract_store.put({k: [v] for k, v in records.items()})
        options = {**contract_store.options(composite=True), "key.column": "tenant,id"}
        keys = [("beta", 1), ("acme", 1), ("acme", 3), ("gamma", 2), ("acme", 2)]
        rows = lookup_rows(options, self.composite_schema, keys)
        nothing = dict.fromkeys(user(1))
        expected = [records.get(k, nothing) for k in keys]
        assert rows == [{"tenant": k[0], "id": k[1], **v} for k, v in zip(keys, expected)]

    def test_batch_size_bounds_every_request(
        self, contract_store: ContractStore, users: dict[int, dict[str, Any]]
    ) -> None:
        sizes: list[int] = []
        client_class, _ = _config(contract_store.options(), self.schema)

        overrides_arrow = client_class.lookup_arrow is not LookupClient.lookup_arrow
        own_columnar = client_class.columnar is not LookupClient.columnar

        class Counting(client_class):  # type: ignore[valid-type, misc]
            """The connector, counting the keys of each request it is asked."""

            @property
            def columnar(self) -> bool:  # as the connector itself answers it
                if own_columnar:
                    return bool(client_class.columnar.fget(self))  # type: ignore[attr-defined]
                return overrides_arrow

            async def lookup(self, keys: Any) -> Any:
                if not self.columnar:
                    sizes.append(len(keys))
                return await super().lookup(keys)

            async def lookup_arrow(self, keys: pa.RecordBatch) -> Any:
                if self.columnar:
                    sizes.append(keys.num_rows)
                return await super().lookup_arrow(keys)

        keys = list(range(1, 41)) * 2 + list(range(1000, 1030))
        limit = min(7, contract_store.max_batch_size or 7)
        options = {**contract_store.options(), "batch.size": str(limit)}
        rows = lookup_rows(options, self.schema, keys, client_factory=Counting)
        assert [r["name"] for r in rows] == [users[k]["name"] if k in users else None for k in keys]
        assert sizes and max(sizes) <= limit
        assert sum(sizes) == 70, sizes  # every distinct key asked once

    def test_several_matches_for_one_key(self, contract_store: ContractStore) -> None:
        if not contract_store.supports_one_to_many:
            pytest.skip("this store holds one record per key")
        contract_store.put({1: [user(1), user(2), user(3)], 2: [user(4)]})
        keys = [2, 1, 77]
        left = lookup_rows(contract_store.options(), self.schema, keys)
        inner = lookup_rows(contract_store.options(), self.schema, keys, how="inner")
        many = sorted((r for r in left if r["id"] == 1), key=lambda r: r["name"])
        assert many == [{"id": 1, **user(i)} for i in (1, 2, 3)]
        assert [r["id"] for r in left] == [2, 1, 1, 1, 77]
        assert left[0] == {"id": 2, **user(4)} and left[-1] == {"id": 77, **dict.fromkeys(user(1))}
        assert [r["id"] for r in inner] == [2, 1, 1, 1]
        # the guard: a key with more matches than lookup.max-matches is an error naming it
        guarded = {**contract_store.options(), "lookup.max-matches": "2"}
        with pytest.raises(LookupFailedError, match=r"key 1: 3 matches, more than lookup\.max"):
            lookup_rows(guarded, self.schema, keys)
        kept = lookup_rows({**guarded, "on.error": "null"}, self.schema, keys)
        assert kept == [
            {"id": 2, **user(4)},
            *[{"id": k, **dict.fromkeys(user(1))} for k in (1, 77)],
        ]

    def test_the_client_answers_directly(
        self, contract_store: ContractStore, users: dict[int, dict[str, Any]]
    ) -> None:
        """The client alone (no engine): open, ask, close; the answer holds the found keys."""
        client_class, config = _config(contract_store.options(), self.schema)
        keys = pa.RecordBatch.from_arrays([pa.array([5, 6, 424_242], pa.int64())], names=["id"])

        async def run() -> dict[Any, Any]:
            client = client_class(config)
            await client.open()
            try:
                return await _ask(client, keys)
            finally:
                await client.close()

        answer = asyncio.run(run())
        assert set(answer) == {5, 6}
        found = answer[5]
        assert isinstance(found, (Mapping, list)), f"key 5 answered {found!r}"
        record = found[0] if isinstance(found, list) else found  # the record form may list
        assert record["name"] == users[5]["name"]

    # -- failures ------------------------------------------------------------------------------

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
        assert elapsed < 5, f"took {elapsed:.1f}s with timeout.ms=300 and 2 attempts"
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
