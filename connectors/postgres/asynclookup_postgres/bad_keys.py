"""Keys a batch cannot send — a text holding NUL, a value that is not of the key column's type
(a text that is no UUID, an integer beyond int4, a text longer than a ``name``) — found and
answered as unfit keys (``Matches.unfit``: no row can have them; ``on.unfit-key`` says whether
each is a miss or a failed key), while the batch's other keys are asked as usual."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence

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
    """The answer to ``keys`` where those at ``refused`` (a mask) are unfit keys (``message``
    says why) and the others are asked as usual."""
    kept = np.flatnonzero(~refused)
    found = await lookup(keys.take(pa.array(kept))) if len(kept) else Matches.none(fields)
    unfit = {int(p): message for p in np.flatnonzero(refused)}
    for position, why in (found.unfit or {}).items():
        unfit[int(kept[position])] = why
    return Matches(kept[found.key_index], found.values, found.errors, found.keys, unfit)


def a_key_error(error: BaseException) -> bool:
    """Whether ``error`` says a key could not be sent as a value of its column's type (raised
    by asyncpg while encoding the keys, or by the server as a data exception)."""
    import asyncpg

    if isinstance(error, (ValueError, TypeError, OverflowError)):
        return True
    client_side = getattr(asyncpg.exceptions, "_base", None)
    if client_side is not None and isinstance(error, getattr(client_side, "DataError", ())):
        return True
    # class 22, or a text too long for a `name` key (42622: the query's own identifiers are
    # checked when it is made, so only a key can be too long here)
    return isinstance(error, (asyncpg.exceptions.DataError, asyncpg.exceptions.NameTooLongError))


def key_error_text(error: BaseException) -> str:
    """Why a key could not be sent, without the other keys of its batch (asyncpg quotes the
    whole argument: ``$1: [1, 2, 1099511627776] (value out of int32 range)``)."""
    text = re.sub(r"(query argument \$\d+): \[.*\]", r"\1", str(error).strip())
    return f"it cannot be sent as the key column's type: {type(error).__name__}: {text}"


def joined(parts: list[tuple[int, Matches]], fields: Sequence[pa.Field]) -> Matches:
    """Several answers as one, each part's key positions (and unfit keys) moved by its
    offset."""
    names = [f.name for f in fields]
    return Matches.concat(
        [
            Matches(
                part.key_index + offset,
                part.values.select(names),
                part.errors,
                part.keys,
                {p + offset: why for p, why in (part.unfit or {}).items()} or None,
            )
            for offset, part in parts
        ],
        fields,
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
