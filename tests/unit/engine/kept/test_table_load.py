"""A full cache's table (lookup_source.engine.kept.table_load): loaded whole through the
connector's columnar scan, key -> its rows (several matches kept together, in one batch for
the whole table) or its malformed value's error, keys that cannot be asked left out; reloaded
by a client of its own, a failure keeping the old table."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pyarrow as pa
import pytest

from lookup_source.connector_api import ConnectorConfig, Matches
from lookup_source.engine.kept.cache import FullCache
from lookup_source.engine.kept.cached_rows import MISSING, CachedError, CachedRows
from lookup_source.engine.kept.table_load import load_table, reload_table
from lookup_source.engine.loop import TaskLoop
from tests.fakes import FakeClient, FakeStore, make_config, make_options, make_spec

KEY_FIELDS = [pa.field("k", pa.int64())]
VALUE_FIELDS = [pa.field("name", pa.string()), pa.field("n", pa.int64())]

Chunk = tuple[pa.RecordBatch, Matches]


def chunk(keys: list[Any], index: list[int], names: list[str], errors: Any = None) -> Chunk:
    """A scan's chunk: the keys it found, and their matches (``index`` into ``keys``)."""
    key_type = pa.int64() if all(isinstance(k, int) or k is None for k in keys) else pa.string()
    values = pa.record_batch(
        {"name": pa.array(names, pa.string()), "n": pa.array(range(len(names)), pa.int64())}
    )
    found = pa.record_batch({"k": pa.array(keys, key_type)})
    return found, Matches(index, values, None if errors is None else pa.array(errors, pa.string()))


class ArrowScanning(FakeClient):
    """A client whose columnar scan yields ``chunks`` (or fails with ``failure`` first)."""

    supports_scan = True

    def __init__(
        self,
        config: ConnectorConfig,
        store: FakeStore,
        chunks: list[Chunk],
        failure: BaseException | None = None,
    ) -> None:
        super().__init__(config, store)
        self.chunks = chunks
        self.failure = failure

    async def scan_arrow(  # type: ignore[override]
        self, partition: int = 0, partitions: int = 1, *, split: Any = None
    ) -> AsyncIterator[Chunk]:
        if self.failure is not None:
            raise self.failure
        for part in self.chunks:
            yield part


@pytest.fixture
def config() -> ConnectorConfig:
    return make_config(make_spec(make_options()))


@pytest.fixture
def loop() -> Iterator[TaskLoop]:
    with TaskLoop() as made:
        yield made


def load(loop: TaskLoop, config: ConnectorConfig, chunks: list[Chunk]) -> dict[Any, Any]:
    client = ArrowScanning(config, FakeStore(), chunks)
    return loop.run(load_table(client, KEY_FIELDS, VALUE_FIELDS))


def rows_of(entry: CachedRows) -> list[str]:
    return entry.values.slice(entry.start, entry.count).column("name").to_pylist()


def test_an_empty_scan_is_an_empty_table(loop: TaskLoop, config: ConnectorConfig) -> None:
    assert load(loop, config, []) == {}


def test_every_key_gets_all_its_rows_in_one_batch_for_the_table(
    loop: TaskLoop, config: ConnectorConfig
) -> None:
    table = load(
        loop,
        config,
        [
            chunk([3, 1], [0, 1, 0], ["three-a", "one", "three-b"]),
            chunk([2], [0], ["two"]),
        ],
    )
    assert sorted(table) == [1, 2, 3]
    assert all(isinstance(entry, CachedRows) for entry in table.values())
    assert rows_of(table[1]) == ["one"] and rows_of(table[2]) == ["two"]
    assert rows_of(table[3]) == ["three-a", "three-b"]  # its matches, in the scan's order
    assert len({id(entry.values) for entry in table.values()}) == 1  # one batch for the table
    assert table[1].values.schema.names == ["name", "n"]  # the value columns only


def test_a_malformed_value_is_its_keys_error_until_the_next_reload(
    loop: TaskLoop, config: ConnectorConfig
) -> None:
    table = load(
        loop,
        config,
        [chunk([1, 2], [0, 1, 1], ["one", "two", "two-bad"], [None, None, "not a number"])],
    )
    assert isinstance(table[1], CachedRows) and rows_of(table[1]) == ["one"]
    assert table[2] == CachedError("not a number")  # one bad row fails the key


def test_a_key_that_cannot_be_asked_is_left_out(loop: TaskLoop, config: ConnectorConfig) -> None:
    table = load(loop, config, [chunk(["7", "seven", None], [0, 1, 2], ["a", "b", "c"])])
    assert sorted(table) == [7]  # text that converts is kept in the key's type
    assert rows_of(table[7]) == ["a"]


def old_table() -> dict[Any, Any]:
    return {1: CachedRows(pa.record_batch({"name": ["old"], "n": [1]}), 0, 1)}


def test_a_reload_installs_the_new_table_with_a_client_of_its_own(config: ConnectorConfig) -> None:
    store = FakeStore()
    cache = FullCache(60.0)
    cache.install(old_table())
    made: list[ArrowScanning] = []

    def factory() -> ArrowScanning:
        made.append(ArrowScanning(config, store, [chunk([2], [0], ["two"])]))
        return made[-1]

    reload_table(cache, factory, KEY_FIELDS, VALUE_FIELDS)
    assert len(made) == 1 and store.opened == 1 and store.closed == 1
    assert cache.loads == 2 and rows_of(cache.get_many([2])[2]) == ["two"]
    assert cache.get_many([1])[1] is MISSING  # the old table is gone


@pytest.mark.parametrize("where", ["factory", "scan"])
def test_a_failed_reload_keeps_the_old_table_and_never_raises(
    where: str, config: ConnectorConfig
) -> None:
    now = [0.0]
    store = FakeStore()
    cache = FullCache(10.0, clock=lambda: now[0])
    cache.install(old_table())
    now[0] = 10.0
    assert cache.claim_reload()

    def factory() -> ArrowScanning:
        if where == "factory":
            raise RuntimeError("cannot make a client")
        return ArrowScanning(config, store, [], failure=ConnectionResetError("gone"))

    reload_table(cache, factory, KEY_FIELDS, VALUE_FIELDS)
    assert cache.loads == 1 and rows_of(cache.get_many([1])[1]) == ["old"]
    assert store.closed == store.opened == (1 if where == "scan" else 0)  # a made one closed
    assert cache.claim_reload()  # its claim given back: the next task tries again
