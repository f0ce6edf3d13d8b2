"""What the engine needs besides the client: :class:`EngineSpec`, built on the driver."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from lookup_source.engine.intake.ranges import PushedRange
from lookup_source.engine.output.match_conditions import MatchCondition
from lookup_source.settings import LookupOptions

DEFAULT_OUTPUT_ROWS = 10_000
"""Most rows per output batch unless the spec says otherwise (Spark's default
``spark.sql.execution.arrow.maxRecordsPerBatch``)."""


HOWS = ("left", "inner", "semi", "anti")
"""The joins the engine makes: ``left`` and ``inner`` add the value columns; ``semi`` keeps the
rows whose key has a match, ``anti`` those whose key has none (the input's columns only)."""
HOW_ALIASES = {"left_semi": "semi", "leftsemi": "semi", "left_anti": "anti", "leftanti": "anti"}
"""Spark's names of the semi and anti joins, taken too."""


@dataclass(frozen=True)
class EngineSpec:
    """Which input columns hold the key, which value columns to append, how to join, and the
    options. Plain values only, so it pickles into every task."""

    options: LookupOptions
    key_columns: tuple[str, ...]
    value_fields: tuple[pa.Field, ...]
    key_types: tuple[pa.DataType | None, ...] = ()
    how: str = "left"
    output_rows: int = DEFAULT_OUTPUT_ROWS
    """Most rows per output batch (Spark's ``spark.sql.execution.arrow.maxRecordsPerBatch``;
    0 or less: bounded by bytes only): a key with many matches is emitted in several batches."""
    name: str = ""
    """The lookup's name (``lookup_join(name=...)``, a registered table's name): in its
    metrics, its log lines and its OpenTelemetry attributes."""
    matched_column: str | None = None
    """When set, each output row gets a boolean column of this name: whether its key found a
    match (false for a missing or null key, and for a failed lookup kept by ``on.error``), so
    that a left join's matched rows are told from unmatched ones even when their values are
    all null (the SQL JOIN rewrite reads it)."""

    match_conditions: tuple[MatchCondition, ...] = ()
    """Conditions on each pair of a row and one of its key's matches (a validity range),
    judged before the join (:mod:`.output.match_conditions`)."""
    pushed_ranges: tuple[PushedRange, ...] = ()
    """Of those, the ranges sent to the store with each key (:mod:`.intake.ranges`): kept by
    the engine only for a client that takes them in ``lookup_arrow``
    (``LookupClient.takes_ranges``); its requests are then neither shared nor cached."""

    def __post_init__(self) -> None:
        if self.how not in HOWS:
            raise ValueError(f"how must be one of {', '.join(HOWS)}, got {self.how!r}")

    @property
    def output_fields(self) -> tuple[pa.Field, ...]:
        """The value columns the output carries: none for a semi or anti join."""
        return self.value_fields if self.how in ("left", "inner") else ()
