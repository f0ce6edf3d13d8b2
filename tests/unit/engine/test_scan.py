"""A whole table read through a connector's scan (lookup_source.engine.scan): one part of it as
typed output rows (its split passed when there is one), its client kept only after a scan read
to its end; and what is asked of a connector on the driver (its scan's splits, its size, whether
its keys match exactly, its table's facts), each with its default when the connector says
nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, ClassVar

import pyarrow as pa
import pytest

from lookup_source.connector_api import ConnectorConfig, Matches, TableFacts
from lookup_source.engine.kept.clients import REUSE_VARIABLE
from lookup_source.engine.kept.worker import forget_worker
from lookup_source.engine.scan import (
    estimate_rows,
    keys_match_exactly,
    scan_batches,
    scan_splits,
    table_facts,
)
from lookup_source.errors import LookupFailedError
from tests.fakes import FakeClient, FakeStore, make_config, make_options, make_spec

KEY_FIELDS = (pa.field("k", pa.int64()),)
VALUE_FIELDS = (pa.field("name", pa.string()), pa.field("n", pa.int64()))
TABLE = {i: {"name": f"user-{i}", "n": i} for i in range(10)}


class Scanning(FakeClient):
    """A connector class (made by the engine from its config alone) over the class's ``store``:
    its scan hands part ``partition`` of ``partitions`` (keys by their remainder), and notes
    each call's arguments."""

    supports_scan = True
    store_of: ClassVar[FakeStore]
    calls: ClassVar[list[tuple[int, int, Any]]]

    def __init__(self, config: ConnectorConfig, store: FakeStore | None = None) -> None:
        super().__init__(config, type(self).store_of)

    async def scan(  # type: ignore[override]
        self, partition: int = 0, partitions: int = 1
    ) -> AsyncIterator[tuple[Any, Any]]:
        type(self).calls.append((partition, partitions, None))
        for key, record in sorted(self.store.table.items()):
            if key % partitions == partition:
                yield key, record


class Splitting(Scanning):
    """A connector that cuts its scan into key ranges (its splits)."""

    answer: ClassVar[Any] = None

    async def scan_splits(self, partitions: int) -> Sequence[Any] | None:
        return type(self).answer

    async def scan_arrow(  # type: ignore[override]
        self, partition: int = 0, partitions: int = 1, *, split: Any = None
    ) -> AsyncIterator[tuple[pa.RecordBatch, Matches]]:
        type(self).calls.append((partition, partitions, split))
        low, high = split
        keys = [k for k in sorted(self.store.table) if low <= k < high]
        records = [self.store.table[k] for k in keys]
        values = pa.RecordBatch.from_pylist(records, schema=pa.schema(VALUE_FIELDS))
        yield pa.record_batch({"k": pa.array(keys, pa.int64())}), Matches(range(len(keys)), values)


@pytest.fixture(autouse=True)
def fresh() -> Iterator[FakeStore]:
    forget_worker()
    store = FakeStore(TABLE)
    for kind in (Scanning, Splitting):
        kind.store_of = store
        kind.calls = []
    Splitting.answer = None
    yield store
    forget_worker()


def config_of() -> ConnectorConfig:
    return make_config(make_spec(make_options()))


def scanned(kind: type[FakeClient], partition: int, partitions: int, **options: Any) -> list[Any]:
    split = options.pop("split", None)
    batches = scan_batches(
        kind,
        config_of(),
        make_options(**options),
        KEY_FIELDS,
        VALUE_FIELDS,
        partition,
        partitions,
        split,
    )
    return [row for batch in batches for row in batch.to_pylist()]


def test_a_part_of_the_scan_comes_as_typed_rows_and_its_client_is_closed(
    fresh: FakeStore,
) -> None:
    rows = scanned(Scanning, 1, 3)
    assert rows == [{"k": k, "name": f"user-{k}", "n": k} for k in (1, 4, 7)]
    assert Scanning.calls == [(1, 3, None)]  # no split: the argument is not passed
    assert fresh.opened == 1 and fresh.closed == 1  # not kept outside a reused worker


def test_a_parts_split_is_passed_to_the_connector() -> None:
    rows = scanned(Splitting, 0, 2, split=(2, 5))
    assert [row["k"] for row in rows] == [2, 3, 4]
    assert Splitting.calls[0] == (0, 2, (2, 5))


def test_a_malformed_value_is_reported_as_on_error_asks(fresh: FakeStore) -> None:
    fresh.table[3] = {"name": "three", "n": "not a number"}
    rows = scanned(Scanning, 0, 1, on_error="column")
    bad = [row for row in rows if row["k"] == 3]
    assert len(rows) == 10 and bad[0]["n"] is None and "key 3" in bad[0]["_lookup_error"]
    with pytest.raises(LookupFailedError, match="key 3"):
        scanned(Scanning, 0, 1, on_error="fail")


def test_a_kept_client_is_reused_after_a_whole_scan_never_after_an_abandoned_one(
    fresh: FakeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(REUSE_VARIABLE, "1")  # a worker Spark reuses: scans keep their client
    assert len(scanned(Scanning, 0, 1)) == 10
    assert len(scanned(Scanning, 0, 1)) == 10
    assert fresh.opened == 1 and fresh.closed == 0  # one client, kept
    batches = scan_batches(Scanning, config_of(), make_options(), KEY_FIELDS, VALUE_FIELDS, 0, 1)
    next(batches)
    batches.close()  # abandoned part-way: a cursor may be left open
    assert fresh.closed == 1
    assert len(scanned(Scanning, 0, 1)) == 10 and fresh.opened == 2  # a new one next


def test_scan_splits_are_asked_only_of_a_connector_that_has_them(fresh: FakeStore) -> None:
    config = config_of()
    assert scan_splits(Scanning, config, 4) is None  # none: no client made
    assert scan_splits(Splitting, config, 1) is None  # one part needs no split
    assert fresh.opened == 0
    assert scan_splits(Splitting, config, 2) is None  # it has none for this table
    Splitting.answer = ((0, 5), (5, 10))
    assert scan_splits(Splitting, config, 2) == [(0, 5), (5, 10)]
    assert fresh.opened == fresh.closed == 2  # a client each time, closed
    Splitting.answer = [(0, 10)]
    with pytest.raises(TypeError, match="returned 1 scan splits for 2 partitions"):
        scan_splits(Splitting, config, 2)
    assert fresh.closed == 3


class Described(FakeClient):
    """A connector that says what its store holds: ``said`` is returned by whatever is asked."""

    store_of: ClassVar[FakeStore]
    said: ClassVar[Any] = None

    def __init__(self, config: ConnectorConfig, store: FakeStore | None = None) -> None:
        super().__init__(config, Scanning.store_of)

    async def estimate_rows(self) -> int | None:
        return type(self).said  # type: ignore[no-any-return]

    async def table_facts(self) -> TableFacts:
        return type(self).said  # type: ignore[no-any-return]

    async def keys_match_exactly(self) -> bool:
        return type(self).said  # type: ignore[no-any-return]

    async def keys_sent_exactly(self) -> bool:
        return type(self).said  # type: ignore[no-any-return]


@pytest.mark.parametrize(("said", "estimate"), [(None, None), (1234, 1234), (-5, 0), (7.9, 7)])
def test_the_estimate_of_rows_is_a_non_negative_whole_number(
    said: Any, estimate: int | None, fresh: FakeStore
) -> None:
    Described.said = said
    assert estimate_rows(Described, config_of()) == estimate
    assert fresh.opened == fresh.closed == 1
    assert estimate_rows(FakeClient, config_of()) is None  # a connector that cannot tell


def test_table_facts_default_to_unknown(fresh: FakeStore) -> None:
    assert table_facts(FakeClient, config_of()) == TableFacts()
    Described.said = TableFacts(null_key=False, any_row=True)
    assert table_facts(Described, config_of()) == TableFacts(null_key=False, any_row=True)
    Described.said = {"null_key": False}  # not facts: nothing is known
    assert table_facts(Described, config_of()) == TableFacts()
    assert fresh.opened == fresh.closed == 2


class Reporting(Described):
    reports_keys = True


class ReportingSilently(FakeClient):
    reports_keys = True


def test_whether_keys_match_exactly_is_asked_only_when_the_connector_can_tell(
    fresh: FakeStore,
) -> None:
    config = config_of()
    assert keys_match_exactly(ReportingSilently, config) is True  # its keys reach the store
    assert keys_match_exactly(FakeClient, config) is False  # exact_key_match: cannot scan
    assert keys_match_exactly(Scanning, config) is True  # what it scans is what it matches
    assert fresh.opened == 0  # none of them asked
    for said in (True, False, 0):
        Described.said = said
        assert keys_match_exactly(Described, config) is bool(said)
        assert keys_match_exactly(Reporting, config) is bool(said)  # keys_sent_exactly
    assert fresh.opened == fresh.closed == 6
