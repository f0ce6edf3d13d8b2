"""The Spark floor: the same ``mapInArrow`` appending computed value columns, no I/O (what the
Spark part of a lookup join costs before any lookup)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from lookup_source.bench.context import Context, Result, values_schema
from lookup_source.bench.timing import timed


def floor_columns(batches: Iterator[Any]) -> Iterator[Any]:
    """What the Spark floor's ``mapInArrow`` does: append computed value columns, no I/O."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for batch in batches:
        text = batch.column("user_id").cast(pa.string())
        name = pc.binary_join_element_wise("user-", text, "")
        yield batch.append_column("name", name).append_column("tier", text)


def floor(ctx: Context) -> Result:
    """The Spark floor: the same mapInArrow appending computed columns, no I/O."""
    frame = ctx.df.mapInArrow(floor_columns, "event_id long, user_id long, " + values_schema())
    seconds = timed(frame)
    return ctx.result("Spark floor: mapInArrow, no I/O", ctx.df.count(), seconds)
