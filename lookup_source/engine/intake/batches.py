"""The engine's units of work: an input batch on its way (:class:`BatchEntry`) and one request to
the store (:class:`Request`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from lookup_source.connector_api import Matches
from lookup_source.connector_api.keys import python_keys
from lookup_source.engine.intake.keys import DistinctKeys, cast_key_column, distinct_keys
from lookup_source.engine.intake.ranges import with_bounds
from lookup_source.engine.request.answers import Part
from lookup_source.engine.spec import EngineSpec
from lookup_source.errors import SchemaError


class Output(Protocol):
    """A finished batch's output, made slice by slice as it is read
    (:class:`~lookup_source.engine.output.joined_rows.JoinedRows`)."""

    num_rows: int

    @property
    def held_rows(self) -> int: ...

    def batches(self, max_rows: int) -> Iterator[pa.RecordBatch]: ...


@dataclass(eq=False)
class BatchEntry:
    """One input batch on its way through the engine — an entry of the output queue: its
    distinct keys, the answers gathered for them, and its completion, which it owns.

    The entry is told how many parts of its answer to expect (:meth:`expect`: a request of
    its own, or one it shares), receives them (:meth:`receive`, :meth:`receive_failure`),
    hears each expected part end (:meth:`settle`) and completes exactly once, through
    ``on_complete``, when the last has ended and the engine has said no more will be asked
    (:meth:`seal`). Nothing else reads or writes its count (Flink's ``ResultFuture``)."""

    number: int
    batch: pa.RecordBatch
    distinct: DistinctKeys
    parts: list[Part] = field(default_factory=list)
    """Answers for some of its keys (from the store or the cache), at its key positions."""
    failed_parts: list[Matches] = field(default_factory=list)
    """Error rows of its keys whose request failed (``on.error=null|column``)."""
    output: Output | None = None
    held_rows: int = 0
    """Rows this batch holds in the engine's buffer: its input rows, then its matches."""
    keys_with_bad_values: int = 0
    """Of its distinct keys, how many failed on their answer: a value that does not fit its
    column, more matches than ``lookup.max-matches`` (counted when its output is built)."""
    costs: np.ndarray | None = None
    """``budget.cost.column``: the cost of each distinct key (the largest of its rows')."""
    on_complete: Callable[[BatchEntry], None] | None = None
    """Called once, when the entry completes."""
    _python_keys: list[Any] | None = None
    _pending: int = 1
    """Parts still to end, and the engine's own until it seals the entry."""
    _completed: bool = False

    def expect(self, parts: int = 1) -> None:
        """``parts`` more parts of the answer will come (requests it sends or shares)."""
        if self._completed:
            raise RuntimeError(f"batch {self.number} is complete: it expects nothing more")
        self._pending += parts

    def receive(self, *parts: Part) -> None:
        """Answers to some of its keys, at its key positions."""
        self.parts.extend(parts)

    def receive_failure(self, rows: Matches) -> None:
        """Error rows for keys whose request failed (``on.error=null|column``)."""
        self.failed_parts.append(rows)

    def settle(self) -> None:
        """An expected part ended, answered or failed; the last completes the entry."""
        self._pending -= 1
        if self._pending == 0 and not self._completed:
            self._completed = True
            if self.on_complete is not None:
                self.on_complete(self)

    def seal(self) -> None:
        """The engine will ask nothing more for it: complete once its parts have ended."""
        self.settle()

    @property
    def completed(self) -> bool:
        return self._completed

    @classmethod
    def of(
        cls,
        number: int,
        batch: pa.RecordBatch,
        spec: EngineSpec,
        names: list[str],
        on_complete: Callable[[BatchEntry], None] | None = None,
    ) -> BatchEntry:
        """Input batch ``batch``, its key columns (``spec.key_columns``) cast to the declared
        key types and reduced to distinct keys named ``names``; ``on_complete`` is called
        when it completes."""
        columns = []
        for position, column in enumerate(spec.key_columns):
            array = batch.column(column)
            if isinstance(array, pa.ChunkedArray):
                array = array.combine_chunks()
            key_type = spec.key_types[position] if position < len(spec.key_types) else None
            columns.append(cast_key_column(array, key_type, column))
        distinct = with_bounds(distinct_keys(columns, names), batch, spec.pushed_ranges)
        cost_column = spec.options.budget.cost_column
        costs = key_costs(batch, cost_column, distinct) if cost_column is not None else None
        return cls(
            number, batch, distinct, held_rows=batch.num_rows, costs=costs, on_complete=on_complete
        )

    def cost(self, positions: np.ndarray) -> float:
        """What the distinct keys at ``positions`` cost the budget: their costs, or one each."""
        if self.costs is None:
            return float(len(positions))
        return float(self.costs[positions].sum())

    def keys_at(self, positions: np.ndarray) -> pa.RecordBatch:
        """The distinct keys at ``positions`` (ascending), without a copy when contiguous."""
        keys = self.distinct.keys
        if len(positions) == keys.num_rows:
            return keys
        if positions[-1] - positions[0] + 1 == len(positions):
            return keys.slice(int(positions[0]), len(positions))
        return keys.take(pa.array(positions))

    def python_keys(self) -> list[Any]:
        """The distinct keys as Python values (made once, when first needed)."""
        if self._python_keys is None:
            self._python_keys = python_keys(self.distinct.keys)
        return self._python_keys


def key_costs(batch: pa.RecordBatch, column: str, distinct: DistinctKeys) -> np.ndarray:
    """The cost of each distinct key: the largest ``column`` value of its rows; a SchemaError
    naming the column for a missing or non-numeric column, or a null, negative, NaN or
    infinite cost on a row with a key."""
    where = "budget.cost.column"
    if column not in batch.schema.names:
        raise SchemaError(
            f"{where} {column!r} is not a column of the input (it has "
            f"{', '.join(batch.schema.names)})"
        )
    array = batch.column(column)
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if not (
        pa.types.is_integer(array.type)
        or pa.types.is_floating(array.type)
        or pa.types.is_decimal(array.type)
    ):
        raise SchemaError(f"{where} {column!r} must be numeric, not {array.type}")
    keyed = distinct.indices.is_valid()
    rows = np.flatnonzero(keyed.to_numpy(zero_copy_only=False))
    costs = np.zeros(len(distinct), dtype=np.float64)
    if not len(rows):
        return costs
    chosen = array.take(pa.array(rows))
    values = chosen.cast(pa.float64()).to_numpy(zero_copy_only=False)
    bad = np.flatnonzero(~((values >= 0) & np.isfinite(values)))  # null (NaN), < 0, inf
    if len(bad):
        row = int(rows[bad[0]])
        raise SchemaError(
            f"{where} {column!r} is {array[row].as_py()!r} on input row {row} of its batch: a "
            "key's cost must be a finite number of at least 0 (coalesce it in the input)"
        )
    indices = distinct.indices.take(pa.array(rows)).to_numpy(zero_copy_only=False)
    np.maximum.at(costs, indices.astype(np.int64), values)
    return costs


Subscriber = tuple[BatchEntry, np.ndarray, np.ndarray]
"""A later batch sharing a request: (its job, positions among its distinct keys, the rows of
the request's keys they are)."""


@dataclass(eq=False)
class Request:
    """One request: some distinct keys of one batch (``positions``), and the later batches
    that share it."""

    owner: BatchEntry
    positions: np.ndarray
    subscribers: list[Subscriber] = field(default_factory=list)
    _keys: pa.RecordBatch | None = None
    _python_keys: list[Any] | None = None

    @property
    def size(self) -> int:
        return len(self.positions)

    def keys(self) -> pa.RecordBatch:
        """Its keys as Arrow (made when first needed: a client in the record form, asked
        key by key, never needs them)."""
        if self._keys is None:
            self._keys = self.owner.keys_at(self.positions)
        return self._keys

    def cost(self, rows: np.ndarray | None = None) -> float:
        """What its keys (or those at ``rows`` of them) cost the budget."""
        return self.owner.cost(self.positions if rows is None else self.positions[rows])

    def python_keys(self) -> list[Any]:
        if self._python_keys is None:
            everything = self.owner.python_keys()
            self._python_keys = [everything[p] for p in self.positions.tolist()]
        return self._python_keys

    def jobs(self) -> list[BatchEntry]:
        """The batch that asked, then those sharing the request."""
        return [self.owner] + [job for job, _, _ in self.subscribers]

    def targets(self) -> list[tuple[BatchEntry, np.ndarray]]:
        """Each batch waiting for the request, with the positions of its keys it asks."""
        return [(self.owner, self.positions)] + [(job, at) for job, at, _ in self.subscribers]

    def shared_keys(self) -> int:
        """How many keys the batches sharing the request wait for."""
        return sum(len(at) for _, at, _ in self.subscribers)
