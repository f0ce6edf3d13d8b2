"""How a value of the shared tier is written and read (:class:`ValueCodec`): a key's rows as a
compressed Arrow IPC message, or a mark for a missing key, with its expiry, sealed by a tag
keyed by the lookup's identity; read defensively (its size bounded before anything is
decompressed, its Arrow message checked before Arrow reads a buffer). What fails is a
:class:`RejectedValue`: a miss, never a crash. See :mod:`.shared_cache`."""

from __future__ import annotations

import hmac
import struct
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from lookup_source.engine.request.answers import MISSING

FORMAT = 2
"""The version of keys and values; a change of form starts a new namespace."""

TAG_BYTES = 16
"""Bytes of a value's tag (a truncated HMAC-SHA-256: 128 bits)."""

_VERSION = bytes([FORMAT])
_MISSING_VALUE = b"\x00"
_ROWS = b"\x01"
_EXPIRES = struct.Struct("<Q")
_LENGTH = struct.Struct("<I")
_HEADER = 1 + TAG_BYTES + 1 + _EXPIRES.size
"""Version, tag, kind, expiry (ms since the epoch)."""


class RejectedValue(ValueError):
    """A value of the tier that is not believed: not ours, tampered with, moved from another
    key, out of bounds or malformed. The key is a miss."""


class ValueCodec:
    """A key's rows to bytes and back, in the lookup's value schema, sealed by a tag keyed by
    ``tag_key`` (the identity's), of at most ``max_bytes`` compressed and uncompressed."""

    def __init__(self, fields: Sequence[pa.Field], tag_key: bytes, max_bytes: int) -> None:
        self.schema = pa.schema(list(fields))
        self.max_bytes = max_bytes
        self._codec = pa.Codec("zstd")
        self._tag_key = tag_key

    def _tag(self, name: bytes, body: bytes) -> bytes:
        return hmac.new(self._tag_key, name + b"\x00" + body, "sha256").digest()[:TAG_BYTES]

    def _sealed(self, name: bytes, body: bytes) -> bytes:
        return _VERSION + self._tag(name, body) + body

    def encode(self, name: bytes, rows: pa.RecordBatch, expires_ms: int) -> bytes | None:
        """The value of key ``name`` holding ``rows``, or None when it is larger than
        ``max_bytes`` (not written: asked of the store again next time)."""
        message = rows.serialize()
        if message.size > self.max_bytes:
            return None
        packed = self._codec.compress(message, asbytes=True)
        if len(packed) > self.max_bytes:
            return None
        body = _ROWS + _EXPIRES.pack(expires_ms) + _LENGTH.pack(message.size) + packed
        return self._sealed(name, body)

    def encode_missing(self, name: bytes, expires_ms: int) -> bytes:
        return self._sealed(name, _MISSING_VALUE + _EXPIRES.pack(expires_ms))

    def decode(self, name: bytes, data: bytes) -> tuple[pa.RecordBatch | Any, int]:
        """The rows (or :data:`MISSING`) the value ``data`` of key ``name`` holds, and when it
        expires (ms since the epoch); :class:`RejectedValue` for a value not to believe."""
        if len(data) < _HEADER or len(data) > _HEADER + _LENGTH.size + self.max_bytes:
            raise RejectedValue(f"a value of {len(data):,} bytes is out of bounds")
        if data[:1] != _VERSION:
            raise RejectedValue("not a value of this version of the shared cache")
        body = data[1 + TAG_BYTES :]
        if not hmac.compare_digest(data[1 : 1 + TAG_BYTES], self._tag(name, body)):
            raise RejectedValue(
                "the value's tag does not match: written without the lookup's identity, "
                "changed, or moved from another key"
            )
        kind = body[:1]
        (expires_ms,) = _EXPIRES.unpack_from(body, 1)
        if kind == _MISSING_VALUE and len(body) == 1 + _EXPIRES.size:
            return MISSING, expires_ms
        if kind != _ROWS or len(body) < 1 + _EXPIRES.size + _LENGTH.size:
            raise RejectedValue("not a value of the shared cache")
        (size,) = _LENGTH.unpack_from(body, 1 + _EXPIRES.size)
        if size > self.max_bytes:
            raise RejectedValue(f"a value claiming {size:,} bytes is out of bounds")
        try:
            raw = self._codec.decompress(
                body[1 + _EXPIRES.size + _LENGTH.size :], decompressed_size=size
            )
            _check_message(memoryview(raw), self.max_bytes)  # before Arrow reads its buffers
            rows = pa.ipc.read_record_batch(raw, self.schema)
            rows.validate(full=True)  # offsets, lengths, UTF-8: nothing read outside its data
        except RejectedValue:
            raise
        except (pa.ArrowException, ValueError, OSError, EOFError) as exc:
            raise RejectedValue(f"a malformed value: {type(exc).__name__}: {exc}") from None
        if not isinstance(rows, pa.RecordBatch) or rows.schema != self.schema:
            raise RejectedValue("a value of another schema")
        return rows, expires_ms


_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")
_U16 = struct.Struct("<H")
_RECORD_BATCH = 3
"""``MessageHeader.RecordBatch`` in Arrow's ``Message.fbs``."""


def _check_message(raw: memoryview, max_bytes: int) -> None:
    """Refuse an Arrow IPC message that could make Arrow allocate more than ``max_bytes``
    before validation can look at it: anything but a record batch, a body compressed by
    Arrow itself (each buffer inflates to the size it claims), a body or a row count beyond
    the bound. Reads the message's flatbuffer header directly (``Message.fbs``,
    ``Schema.fbs``); what does not parse is refused too."""
    try:
        at = 0
        if _I32.unpack_from(raw, 0)[0] == -1:  # the continuation marker
            at = 4
        (length,) = _I32.unpack_from(raw, at)
        header = raw[at + 4 : at + 4 + length]
        if length <= 0 or len(header) != length:
            raise RejectedValue("an Arrow message without its header")
        message = _table(header, _U32.unpack_from(header, 0)[0])
        if _field(header, message, 1, "B", 0) != _RECORD_BATCH:
            raise RejectedValue("an Arrow message that is not a record batch")
        if _field(header, message, 3, "q", 0) > max_bytes:  # bodyLength
            raise RejectedValue("an Arrow body beyond cache.shared.max-value-bytes")
        batch_at = _offset_field(header, message, 2)
        if batch_at is None:
            raise RejectedValue("an Arrow record batch without its header")
        batch = _table(header, batch_at)
        if _offset_field(header, batch, 3) is not None:  # BodyCompression
            raise RejectedValue("an Arrow body compressed by Arrow itself")
        if _field(header, batch, 0, "q", 0) > 8 * max_bytes:  # rows: at least a bit each
            raise RejectedValue("an Arrow record batch of more rows than its bound allows")
    except (struct.error, IndexError, ValueError) as exc:
        if isinstance(exc, RejectedValue):
            raise
        raise RejectedValue(f"an Arrow message whose header does not parse: {exc}") from None


def _table(buffer: memoryview, at: int) -> tuple[int, int]:
    """A flatbuffer table at ``at``: (its position, its vtable's position)."""
    (back,) = _I32.unpack_from(buffer, at)
    vtable = at - back
    if not 0 <= vtable < len(buffer) or not 0 <= at < len(buffer):
        raise ValueError("a table outside the buffer")
    return at, vtable


def _slot(buffer: memoryview, table: tuple[int, int], index: int) -> int | None:
    """Where field ``index`` of ``table`` is, or None when absent (its default)."""
    at, vtable = table
    (size,) = _U16.unpack_from(buffer, vtable)
    entry = 4 + 2 * index
    if entry + 2 > size:
        return None
    (offset,) = _U16.unpack_from(buffer, vtable + entry)
    return at + offset if offset else None


def _field(buffer: memoryview, table: tuple[int, int], index: int, kind: str, default: int) -> int:
    slot = _slot(buffer, table, index)
    if slot is None:
        return default
    return int(struct.unpack_from("<" + kind, buffer, slot)[0])


def _offset_field(buffer: memoryview, table: tuple[int, int], index: int) -> int | None:
    """The position of the table field ``index`` refers to, or None when absent."""
    slot = _slot(buffer, table, index)
    if slot is None:
        return None
    return slot + _U32.unpack_from(buffer, slot)[0]
