"""Output in bounded batches whatever the fan-out: a key with many matches is emitted slice by
slice, and the slices together are exactly the join made in one piece."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pyarrow as pa
import pytest

from lookup_source.connector_api import Matches
from lookup_source.engine.lookup_engine import LookupEngine
from lookup_source.engine.output.joined_rows import JoinedRows
from lookup_source.engine.spec import EngineSpec
from lookup_source.redaction import Redactor
from lookup_source.testing import clock as virtual_time
from tests.fakes import (
    FakeColumnarClient,
    FakeStore,
    key_batch,
    make_config,
    make_options,
    make_spec,
)

FIELDS = [pa.field("v", pa.int64())]


def joined(*args: Any, **kwargs: Any) -> pa.RecordBatch:
    return JoinedRows(*args, **kwargs).whole()


def _case(seed: int, how: str) -> tuple[JoinedRows, pa.RecordBatch]:
    rng = random.Random(seed)
    num_keys = 30
    rows = 200
    keys = [rng.choice([None, *range(num_keys)]) for _ in range(rows)]
    indices = pa.array(keys, type=pa.int32())
    index, values, errors = [], [], []
    for key in range(num_keys):
        for n in range(rng.choice([0, 1, 1, 2, 5, 40])):
            index.append(key)
            values.append(key * 1000 + n)
            errors.append("bad value" if key % 11 == 3 and n == 0 else None)
    order = list(range(len(index)))
    rng.shuffle(order)  # the store answers in any order; the join keeps each key's order
    matches = Matches(
        [index[i] for i in order],
        pa.record_batch({"v": pa.array([values[i] for i in order], pa.int64())}),
        pa.array([errors[i] for i in order], pa.string()),
    )
    batch = pa.record_batch({"row": pa.array(range(rows), pa.int64()), "k": indices})
    arguments: dict[str, Any] = {"how": how, "error_column": "_lookup_error", "fields": FIELDS}
    whole = joined(batch, indices, num_keys, matches, **arguments)
    return JoinedRows(batch, indices, num_keys, matches, **arguments), whole


@pytest.mark.parametrize("how", ["left", "inner"])
@pytest.mark.parametrize("step", [1, 7, 64, 10_000])
def test_the_slices_are_the_join_made_in_one_piece(how: str, step: int) -> None:
    for seed in range(5):
        joined, whole = _case(seed, how)
        batches = list(joined.batches(step))
        assert all(b.num_rows <= step for b in batches)
        assert pa.Table.from_batches(batches).to_pylist() == whole.to_pylist()
        assert sum(b.num_rows for b in batches) == joined.num_rows == whole.num_rows


def test_wide_rows_are_bounded_by_bytes_too() -> None:
    joined, whole = _case(1, "left")
    row_bytes = whole.nbytes / whole.num_rows
    batches = list(joined.batches(10_000, max_bytes=int(row_bytes * 20)))
    assert len(batches) > 1 and all(b.num_rows <= 40 for b in batches)
    assert pa.Table.from_batches(batches).to_pylist() == whole.to_pylist()


def test_no_rows_is_one_empty_batch_with_the_schema() -> None:
    batch = pa.record_batch({"k": pa.array([None], pa.int64())})
    joined = JoinedRows(
        batch,
        pa.array([None], pa.int32()),
        0,
        Matches.none(FIELDS),
        how="inner",
        error_column=None,
        fields=FIELDS,
    )
    (only,) = list(joined.batches(10))
    assert only.num_rows == 0 and only.schema.names == ["k", "v"]


def test_a_hot_key_fans_out_in_bounded_batches_and_bounded_memory() -> None:
    """20,000 input rows of one key with 500 matches: 10,000,000 output rows, in batches of at
    most 4,096, while Arrow's memory stays far below what the output would take at once."""
    store = FakeStore({7: [{"name": f"m{n}", "n": n} for n in range(500)]})
    spec = make_spec(make_options(batch_size=10))
    spec = EngineSpec(**{**spec.__dict__, "output_rows": 4_096})
    client = FakeColumnarClient(make_config(spec), store)
    seen = {"rows": 0, "largest": 0, "peak": 0}

    async def drive() -> None:
        engine = LookupEngine(client, spec, redact=Redactor())
        outputs = []
        for _ in range(2):
            outputs += await engine.submit(key_batch([7] * 10_000))
        outputs += await engine.finish()
        first = True
        for output in outputs:
            for batch in output:
                if first:  # each input row repeats once per match, in the store's order
                    assert batch.column("n").to_pylist()[:3] == [0, 1, 2]
                    first = False
                seen["rows"] += batch.num_rows
                seen["largest"] = max(seen["largest"], batch.num_rows)
                seen["peak"] = max(seen["peak"], pa.total_allocated_bytes())

    virtual_time.run(drive())
    assert seen["rows"] == 20_000 * 500
    assert seen["largest"] <= 4_096
    # the whole output would be ~10M rows x 4 columns: hundreds of MB; one slice is < 1 MB
    assert seen["peak"] < 64 * 1024 * 1024, seen
    assert len(store.requests) == 1  # the second batch shared the first one's request


def test_the_buffer_counts_held_matches() -> None:
    """Ordered output and a slow first batch: the batches after it complete and wait with
    their matches, which the engine's input budget counts as well as their input rows."""
    store = FakeStore({k: [{"name": "x", "n": n} for n in range(100)] for k in range(1, 50)})
    store.latency = lambda keys: 0.3 if 1 in keys else 0.0
    spec = make_spec(make_options(batch_size=1, capacity=50))
    client = FakeColumnarClient(make_config(spec), store)

    async def drive() -> tuple[int, int]:
        engine = LookupEngine(client, spec, redact=Redactor())
        first = asyncio.ensure_future(engine.submit(key_batch([1])))
        await asyncio.sleep(0.01)
        for key in range(2, 6):
            await engine.submit(key_batch([key]))
        await asyncio.sleep(0.1)  # keys 2 to 5 are answered; key 1 is not yet
        held = engine.buffered_rows
        outputs = await first + await engine.finish()
        rows = sum(b.num_rows for output in outputs for b in output)
        return held, rows

    held, rows = virtual_time.run(drive())
    assert held == 5 + 4 * 100  # five input rows, and the matches of the four batches done
    assert rows == 5 * 100
