"""Keys a batch cannot send — a text holding NUL, a value that is not of the key column's type
(a text that is no UUID, an integer beyond int4) — found and answered as errors of their own,
while the batch's other keys are asked as usual."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lookup_source.connector_api import Matches

Lookup = Callable[[pa.RecordBatch], Awaitable[Matches]]
"""The client's ``lookup_arrow``: what the keys not at fault are asked through."""

NUL_KEY = "it holds a NUL character, which Postgres text cannot hold"


async def isolate(
    lookup: Lookup, keys: pa.RecordBatch, error: BaseException, fields: Sequence[pa.Field]
) -> Matches:
    """The answer to ``keys`` when one of them cannot be sent (not a value of the key
    column's type: a text that is no UUID, an integer beyond int4): each half asked apart
    until the keys at fault are found, each of them an error of its own."""
    if keys.num_rows == 1:
        return await lookup_apart(
            lookup, keys, np.ones(1, dtype=bool), key_error_text(error), fields
        )
    half = keys.num_rows // 2
    first = await lookup(keys.slice(0, half))
    second = await lookup(keys.slice(half))
    return joined([(0, first), (half, second)], fields)


async def lookup_apart(
    lookup: Lookup,
    keys: pa.RecordBatch,
    refused: np.ndarray,
    message: str,
    fields: Sequence[pa.Field],
) -> Matches:
    """The answer to ``keys`` where those at ``refused`` (a mask) are errors of their own
    (``message``) and the others are asked as usual."""
    kept = np.flatnonzero(~refused)
    found = await lookup(keys.take(pa.array(kept))) if len(kept) else Matches.none(fields)
    bad = np.flatnonzero(refused)
    nulls = pa.RecordBatch.from_arrays(
        [pa.nulls(len(bad), type=f.type) for f in fields],
        schema=pa.schema(fields),
    )
    failed = Matches(bad, nulls, pa.array([message] * len(bad), type=pa.string()))
    placed = Matches(kept[found.key_index], found.values, found.errors)
    return joined([(0, placed), (0, failed)], fields)


def a_key_error(error: BaseException) -> bool:
    """Whether ``error`` says a key could not be sent as a value of its column's type (raised
    by asyncpg while encoding the keys, or by the server as a data exception, class 22)."""
    import asyncpg

    if isinstance(error, (ValueError, TypeError, OverflowError)):
        return True
    client_side = getattr(asyncpg.exceptions, "_base", None)
    if client_side is not None and isinstance(error, getattr(client_side, "DataError", ())):
        return True
    return isinstance(error, asyncpg.exceptions.DataError)


def key_error_text(error: BaseException) -> str:
    """Why a key could not be sent, without the other keys of its batch (asyncpg quotes the
    whole argument: ``$1: [1, 2, 1099511627776] (value out of int32 range)``)."""
    text = re.sub(r"(query argument \$\d+): \[.*\]", r"\1", str(error).strip())
    return f"it cannot be sent as the key column's type: {type(error).__name__}: {text}"


def joined(parts: list[tuple[int, Matches]], fields: Sequence[pa.Field]) -> Matches:
    """Several answers as one, each part's key positions moved by its offset."""
    names = [f.name for f in fields]
    parts = [(offset, part) for offset, part in parts if part.num_rows]
    if not parts:
        return Matches.none(fields)
    values = pa.Table.from_batches(
        [part.values.select(names) for _, part in parts], schema=pa.schema(list(fields))
    ).combine_chunks()
    errors: list[Any] = []
    for _, part in parts:
        errors += [None] * part.num_rows if part.errors is None else part.errors.to_pylist()
    return Matches(
        np.concatenate([part.key_index + offset for offset, part in parts]),
        values.to_batches()[0] if values.num_rows else Matches.none(fields).values,
        pa.array(errors, type=pa.string()) if any(e is not None for e in errors) else None,
    )


def keys_holding_nul(keys: pa.RecordBatch) -> np.ndarray | None:
    """A mask of the keys whose text holds a NUL character, or None when none does."""
    refused = None
    for column in keys.columns:
        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            continue
        holds = pc.fill_null(pc.match_substring(column, "\x00"), False)
        if pc.any(holds).as_py():
            mask = holds.to_numpy(zero_copy_only=False)
            refused = mask if refused is None else refused | mask
    return refused
