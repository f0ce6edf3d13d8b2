"""The table function's answer in the schema PySpark declared for it, whatever zone or string
types the input came in (``lookup_source.spark.declared_output``)."""

from __future__ import annotations

import inspect
import io
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from lookup_source.spark.declared_output import DeclaredOutput

LARGE_TYPES = "prefers_large_types" in inspect.signature(to_arrow_type).parameters

MICROS = 1_767_225_600_000_000  # 2026-01-01 00:00 UTC
DECLARED = StructType(
    [
        StructField("id", LongType(), nullable=False),
        StructField("s", StringType()),
        StructField("ts", TimestampType(), nullable=False),
        StructField("name", StringType()),
    ]
)


def answer(string: pa.DataType | None = None) -> pa.RecordBatch:
    """A batch as the engine builds it: the input's columns as Spark sent them (a timestamp
    in the session's zone), then a value column."""
    string = string or pa.string()
    return pa.RecordBatch.from_arrays(
        [
            pa.array([1, 2], pa.int64()),
            pa.array(["a", None], string),
            pa.array([MICROS, MICROS + 1], pa.timestamp("us", tz="Europe/Paris")),
            pa.array(["x", None], pa.string()),
        ],
        schema=pa.schema(
            [
                pa.field("id", pa.int64(), nullable=False),
                pa.field("s", string),
                pa.field("ts", pa.timestamp("us", tz="Europe/Paris"), nullable=False),
                pa.field("name", pa.string()),
            ]
        ),
    )


def test_each_batch_takes_the_declared_schema_and_keeps_its_values() -> None:
    batch = answer()
    output = DeclaredOutput(DECLARED)
    (out,) = output.conform([batch], batch.schema)
    assert out.schema == pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("s", pa.string()),
            pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
            pa.field("name", pa.string()),
        ]
    )
    assert out.column("ts").cast(pa.int64()).to_pylist() == [MICROS, MICROS + 1]
    assert out.column("s").to_pylist() == ["a", None]


@pytest.mark.skipif(not LARGE_TYPES, reason="this PySpark has no large Arrow types")
def test_large_types_when_spark_sent_the_input_with_them() -> None:
    batch = answer(pa.large_string())  # useLargeVarTypes: the input's strings are large
    (out,) = DeclaredOutput(DECLARED).conform([batch], batch.schema)
    assert out.schema.field("s").type == pa.large_string()
    assert out.schema.field("name").type == pa.large_string()  # the value column too
    assert out.column("name").to_pylist() == ["x", None]


def test_a_call_with_nothing_to_hand_back_hands_back_an_empty_batch_of_the_schema() -> None:
    output = DeclaredOutput(DECLARED)
    schema = answer().schema
    (empty,) = output.conform([], schema)
    (full,) = output.conform([answer()], schema)
    assert empty.num_rows == 0 and empty.schema == full.schema


def test_what_it_cannot_judge_goes_as_it_is() -> None:
    odd = pa.record_batch({"other": pa.array([1])})
    assert next(DeclaredOutput(DECLARED).conform([odd], odd.schema)) is odd
    batch = answer()
    assert next(DeclaredOutput(None).conform([batch], batch.schema)) is batch
    assert list(DeclaredOutput(None).conform([], batch.schema)) == []


@pytest.mark.parametrize("large", [False, True])
def test_pyspark_writes_every_batch_of_a_task_in_one_schema(large: bool) -> None:
    """What PySpark 4.3 does with an Arrow UDTF's answer: each batch matched against the
    declared schema (``enforce_schema``), an empty batch of it for a call that answered
    nothing, all written by one IPC writer whose schema is the first batch's."""
    conversion: Any = pytest.importorskip("pyspark.sql.conversion")
    if not hasattr(getattr(conversion, "ArrowBatchTransformer", None), "enforce_schema"):
        pytest.skip("this PySpark writes an Arrow UDTF's answer otherwise (before 4.3)")
    target = pa.schema(list(to_arrow_type(DECLARED, timezone="UTC", prefers_large_types=large)))
    batch = answer(pa.large_string() if large else pa.string())
    output = DeclaredOutput(DECLARED)
    calls = [[], [batch], [], [batch, batch]]  # the first call answered nothing
    written = [
        conversion.ArrowBatchTransformer.enforce_schema(out, target, safecheck=True)
        for call in calls
        for out in output.conform(call, batch.schema)
    ]
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, written[0].schema) as writer:
        for out in written:
            writer.write_batch(out)  # raised "different schema" before
    assert sum(out.num_rows for out in written) == 6
