"""How the shared tier's values are written and read (lookup_source.engine.kept.shared_values):
a key's rows or a missing mark round-trip with their expiry; a value that is not ours, was
changed, moved from another key, is out of bounds or malformed, or holds an Arrow message that
could allocate past its bound, is a RejectedValue (a miss), never a crash."""

from __future__ import annotations

import hmac
import struct

import pyarrow as pa
import pytest

from lookup_source.engine.kept.shared_values import FORMAT, TAG_BYTES, RejectedValue, ValueCodec
from lookup_source.engine.request.answers import MISSING

FIELDS = [pa.field("name", pa.string()), pa.field("n", pa.int64())]
TAG_KEY = b"k" * 32
EXPIRES_MS = 1_700_000_000_000


def codec(max_bytes: int = 1 << 16, tag_key: bytes = TAG_KEY) -> ValueCodec:
    return ValueCodec(FIELDS, tag_key, max_bytes)


def rows(*names: str) -> pa.RecordBatch:
    return pa.record_batch(
        {"name": pa.array(names, pa.string()), "n": pa.array(range(len(names)), pa.int64())}
    )


def sealed(name: bytes, body: bytes, tag_key: bytes = TAG_KEY) -> bytes:
    """A value as the format lays it out (version, tag, body), whatever its body holds."""
    tag = hmac.new(tag_key, name + b"\x00" + body, "sha256").digest()[:TAG_BYTES]
    return bytes([FORMAT]) + tag + body


def rows_body(message: bytes, *, claimed: int | None = None) -> bytes:
    """The body of a rows value holding the Arrow ``message`` (its size as ``claimed``)."""
    packed = pa.Codec("zstd").compress(message, asbytes=True)
    size = len(message) if claimed is None else claimed
    return b"\x01" + struct.pack("<Q", EXPIRES_MS) + struct.pack("<I", size) + packed


def test_rows_and_their_expiry_round_trip() -> None:
    values = codec()
    kept = rows("ada", "bob")
    data = values.encode(b"key-1", kept, EXPIRES_MS)
    assert data is not None and data[0] == FORMAT
    read, expires = values.decode(b"key-1", data)
    assert read.equals(kept) and expires == EXPIRES_MS
    empty, _ = values.decode(b"key-2", values.encode(b"key-2", rows(), 0) or b"")
    assert empty.num_rows == 0 and empty.schema == pa.schema(FIELDS)


def test_a_missing_key_round_trips_as_missing() -> None:
    values = codec()
    data = values.encode_missing(b"gone", EXPIRES_MS)
    assert values.decode(b"gone", data) == (MISSING, EXPIRES_MS)


def test_rows_larger_than_the_bound_are_not_written() -> None:
    many = rows(*(f"name-{i}" for i in range(1000)))
    assert codec(max_bytes=64).encode(b"k", many, EXPIRES_MS) is None
    assert codec(max_bytes=1 << 20).encode(b"k", many, EXPIRES_MS) is not None


def test_a_value_moved_changed_or_sealed_by_another_identity_is_rejected() -> None:
    values = codec()
    data = values.encode(b"key-1", rows("ada"), EXPIRES_MS)
    assert data is not None
    with pytest.raises(RejectedValue, match="tag does not match"):
        values.decode(b"key-2", data)  # moved from another key
    changed = data[:-1] + bytes([data[-1] ^ 1])
    with pytest.raises(RejectedValue, match="tag does not match"):
        values.decode(b"key-1", changed)
    with pytest.raises(RejectedValue, match="tag does not match"):
        codec(tag_key=b"x" * 32).decode(b"key-1", data)  # another lookup's identity
    later = bytearray(data)
    later[1 + TAG_BYTES + 1] ^= 0xFF  # its expiry pushed on: the tag covers it
    with pytest.raises(RejectedValue, match="tag does not match"):
        values.decode(b"key-1", bytes(later))


def test_values_out_of_bounds_or_of_another_version_are_rejected() -> None:
    values = codec(max_bytes=256)
    with pytest.raises(RejectedValue, match="out of bounds"):
        values.decode(b"k", b"")
    with pytest.raises(RejectedValue, match="out of bounds"):
        values.decode(b"k", b"\x02" * (1 + TAG_BYTES + 1 + 8 + 4 + 256 + 1))
    data = values.encode_missing(b"k", EXPIRES_MS)
    with pytest.raises(RejectedValue, match="not a value of this version"):
        values.decode(b"k", bytes([FORMAT + 1]) + data[1:])


def test_a_sealed_value_of_an_unknown_kind_or_a_false_size_is_rejected() -> None:
    values = codec(max_bytes=4096)
    unknown = sealed(b"k", b"\x07" + struct.pack("<Q", EXPIRES_MS) + b"\x00" * 4)
    with pytest.raises(RejectedValue, match="not a value of the shared cache"):
        values.decode(b"k", unknown)
    message = rows("ada").serialize().to_pybytes()
    with pytest.raises(RejectedValue, match="claiming 5,000 bytes is out of bounds"):
        values.decode(b"k", sealed(b"k", rows_body(message, claimed=5000)))
    with pytest.raises(RejectedValue, match="malformed"):
        values.decode(b"k", sealed(b"k", rows_body(message, claimed=len(message) - 1)))
    with pytest.raises(RejectedValue):
        values.decode(b"k", sealed(b"k", rows_body(b"\x00" * 64)))  # no Arrow message at all


def test_an_arrow_message_that_is_not_a_record_batch_is_rejected() -> None:
    schema_message = pa.schema(FIELDS).serialize().to_pybytes()
    with pytest.raises(RejectedValue, match="not a record batch"):
        codec().decode(b"k", sealed(b"k", rows_body(schema_message)))


def test_an_arrow_body_compressed_by_arrow_itself_is_rejected() -> None:
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.ipc.new_stream(sink, pa.schema(FIELDS), options=options) as writer:
        writer.write_batch(rows("ada", "bob"))
    reader = pa.ipc.MessageReader.open_stream(sink.getvalue())
    reader.read_next_message()  # the schema
    batch_message = reader.read_next_message().serialize().to_pybytes()
    with pytest.raises(RejectedValue, match="compressed by Arrow itself"):
        codec().decode(b"k", sealed(b"k", rows_body(batch_message)))


def test_a_value_of_another_schema_is_rejected() -> None:
    other = ValueCodec([pa.field("name", pa.string())], TAG_KEY, 1 << 16)
    data = other.encode(b"k", pa.record_batch({"name": ["ada"]}), EXPIRES_MS)
    assert data is not None
    with pytest.raises(RejectedValue):
        codec().decode(b"k", data)
