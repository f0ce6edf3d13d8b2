"""The table function hands its timestamps back in UTC, as Spark declares them, whatever zone
the input's came in (``lookup_source.spark.timestamps``)."""

from __future__ import annotations

import pyarrow as pa

from lookup_source.spark.timestamps import in_utc

MICROS = 1_767_225_600_000_000  # 2026-01-01 00:00 UTC


def test_every_zone_becomes_utc_and_no_value_changes() -> None:
    paris = pa.timestamp("us", tz="Europe/Paris")
    batch = pa.record_batch(
        {
            "ts": pa.array([MICROS, None], paris),
            "naive": pa.array([MICROS, 1], pa.timestamp("us")),  # a timestamp_ntz stays so
            "nested": pa.array(
                [{"at": MICROS, "n": 1}, None],
                pa.struct([("at", pa.timestamp("us", tz="Etc/UTC")), ("n", pa.int32())]),
            ),
            "many": pa.array([[MICROS], []], pa.list_(paris)),
            "by": pa.array([[("a", MICROS)], None], pa.map_(pa.string(), paris)),
            "n": pa.array([1, 2], pa.int64()),
        }
    )
    out = in_utc(batch)
    utc = pa.timestamp("us", tz="UTC")
    assert out.schema.field("ts").type == utc
    assert out.schema.field("naive").type == pa.timestamp("us")
    assert out.schema.field("nested").type.field("at").type == utc
    assert out.schema.field("many").type.value_type == utc
    assert out.schema.field("by").type.item_type == utc
    assert out.column("ts").cast(pa.int64()).to_pylist() == [MICROS, None]
    assert out.column("nested").to_pylist()[0]["n"] == 1
    assert out.column("by").to_pylist()[1] is None
    assert out.column("n") is batch.column("n") or out.column("n").equals(batch.column("n"))


def test_a_batch_already_in_utc_is_handed_back_as_it_is() -> None:
    batch = pa.record_batch({"ts": pa.array([MICROS], pa.timestamp("us", tz="UTC"))})
    assert in_utc(batch) is batch
    plain = pa.record_batch({"n": pa.array([1])})
    assert in_utc(plain) is plain
