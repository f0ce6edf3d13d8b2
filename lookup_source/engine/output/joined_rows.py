"""A batch's rows joined to their matches (:class:`JoinedRows`), in Arrow.

It takes a batch, the index of each row's key among the batch's distinct keys (null for a null
key), and the :class:`~lookup_source.connector_api.Matches` gathered for those keys
(``key_index`` = the distinct key's position). The output keeps the input rows in their order:

- a key with one match gets its values; with several, its row is repeated once per match, in
  the order of the matches (a one-to-many lookup join);
- a key with no match (or a null key) keeps one row of nulls under ``how="left"`` and is
  dropped under ``how="inner"``;
- a key whose lookup failed keeps one row of nulls under both (a failure is not a miss), with
  the reason in the error column when there is one;
- ``how="semi"`` keeps each input row whose key has a match once, ``how="anti"`` each whose key
  has none (a null key included), without the value columns (a failed key's row is kept by
  both, with its reason in the error column when there is one: a failure is neither).

No Python object is made per row: positions are computed with numpy, rows moved with ``take``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa

from lookup_source.connector_api import Matches
from lookup_source.engine.output.match_conditions import MatchCondition, pairs_passing


def _without_extra_rows_of_failed_keys(matches: Matches) -> tuple[Matches, np.ndarray]:
    """Keep one row (its first error row) for each key that has an error; return the matches
    and, per remaining row, whether it is an error row."""
    errors = matches.errors
    if errors is None or errors.null_count == len(errors):
        return matches, np.zeros(matches.num_rows, dtype=bool)
    is_error = errors.is_valid().to_numpy(zero_copy_only=False)
    index = matches.key_index
    error_rows = np.flatnonzero(is_error)
    bad_keys, first = np.unique(index[error_rows], return_index=True)
    keep = ~np.isin(index, bad_keys)
    keep[error_rows[first]] = True
    if keep.all():
        return matches, is_error
    rows = pa.array(np.flatnonzero(keep))
    kept = Matches(index[keep], matches.values.take(rows), errors.take(rows))
    return kept, is_error[keep]


def _nullable(positions: np.ndarray) -> pa.Array:
    """``positions`` as an Arrow index array in which -1 is null (take gives a null row)."""
    return pa.array(positions, mask=positions < 0, type=pa.int64())


OUTPUT_BATCH_BYTES = 64 * 1024 * 1024
"""Most bytes (estimated) per output batch, whatever the rows per batch allow."""


class JoinedRows:
    """A batch's rows joined to their matches, made slice by slice: a key with many matches
    repeats its input row once per match, and :meth:`batches` emits those rows in batches of
    bounded size, so memory does not grow with the fan-out. Only per-input-row positions are
    computed up front; the rows of a slice are taken when it is asked for.
    """

    def __init__(
        self,
        batch: pa.RecordBatch,
        indices: pa.Array,
        num_keys: int,
        matches: Matches,
        *,
        how: str,
        error_column: str | None,
        fields: Sequence[pa.Field],
        matched_column: str | None = None,
        conditions: Sequence[MatchCondition] = (),
    ) -> None:
        matches, self._is_error = _without_extra_rows_of_failed_keys(matches)
        self._batch = batch
        self._matches = matches
        self._error_column = error_column
        self._matched_column = matched_column
        self._fields = list(fields)
        index = matches.key_index
        counts = np.bincount(index, minlength=num_keys) if len(index) else np.zeros(num_keys, int)
        key_of_row = indices.fill_null(num_keys).to_numpy(zero_copy_only=False).astype(np.int64)
        self._kept: np.ndarray | None = None  # input rows that an inner join keeps (one-to-one)
        self._ends: np.ndarray | None = None  # one-to-many: where each input row's output ends
        if conditions:  # each pair (row, match) judged first: explicit pairs
            self._answer = self._pairs(how, counts, num_keys, key_of_row, conditions)
            self.num_rows = len(self._answer)
        elif how in ("semi", "anti"):
            self._answer = self._exists(how, index, num_keys, key_of_row)
            self.num_rows = len(self._answer)
        elif not len(index) or np.max(counts) <= 1:
            first = np.full(num_keys + 1, -1, dtype=np.int64)
            first[index] = np.arange(len(index))
            answer = first[key_of_row]
            if how == "inner" and not (answer >= 0).all():
                self._kept = np.flatnonzero(answer >= 0)
                answer = answer[self._kept]
            self._answer = answer
            self.num_rows = len(answer)
        else:  # one-to-many: each input row once per match of its key
            self._matched = np.append(counts, 0)[key_of_row]
            self._emit = self._matched if how == "inner" else np.maximum(self._matched, 1)
            self._ends = np.cumsum(self._emit)
            self._order = np.argsort(index, kind="stable")
            self._starts = np.append(np.cumsum(counts) - counts, 0)
            self._key_of_row = key_of_row
            self.num_rows = int(self._ends[-1]) if len(self._ends) else 0

    def _exists(
        self,
        how: str,
        index: np.ndarray,
        num_keys: int,
        key_of_row: np.ndarray,
        matched: np.ndarray | None = None,
    ) -> np.ndarray:
        """Semi and anti joins: the input rows kept (in :attr:`_kept`), and for each its error
        row, or -1; ``matched``: whether each row has a match (else: its key has one)."""
        is_error = self._is_error
        error_row = np.full(num_keys + 1, -1, dtype=np.int64)
        error_row[index[is_error]] = np.flatnonzero(is_error)
        if matched is None:
            found = np.zeros(num_keys + 1, dtype=bool)
            found[index[~is_error]] = True
            matched = found[key_of_row]
        failed = error_row[key_of_row]
        keep = (matched | (failed >= 0)) if how == "semi" else ~matched
        self._kept = np.flatnonzero(keep)
        return failed[self._kept]

    def _pairs(
        self,
        how: str,
        counts: np.ndarray,
        num_keys: int,
        key_of_row: np.ndarray,
        conditions: Sequence[MatchCondition],
    ) -> np.ndarray:
        """With conditions on the pairs: every pair of a row and one of its key's matches,
        those that pass the conditions (an error row always does), then the rows a join of
        ``how`` keeps — in :attr:`_kept` (a row once per pair kept, in input order) — and for
        each its match row, or -1."""
        index = self._matches.key_index
        order = np.argsort(index, kind="stable")
        starts = np.append(np.cumsum(counts) - counts, 0)
        per_row = np.append(counts, 0)[key_of_row]
        row = np.repeat(np.arange(len(key_of_row), dtype=np.int64), per_row)
        offset = np.arange(len(row), dtype=np.int64) - np.repeat(
            np.cumsum(per_row) - per_row, per_row
        )
        match = order[np.repeat(starts[key_of_row], per_row) + offset]
        values = self._matches.values
        keep = pairs_passing(conditions, self._batch, values, row, match) | self._is_error[match]
        row, match = row[keep], match[keep]
        if how in ("semi", "anti"):
            real = ~self._is_error[match]
            matched = np.bincount(row[real], minlength=len(key_of_row)) > 0
            return self._exists(how, index, num_keys, key_of_row, matched)
        if how == "left":  # a row none of whose matches passed keeps one row of nulls
            alone = np.flatnonzero(np.bincount(row, minlength=len(key_of_row)) == 0)
            row = np.concatenate([row, alone])
            match = np.concatenate([match, np.full(len(alone), -1, dtype=np.int64)])
            by_row = np.argsort(row, kind="stable")
            row, match = row[by_row], match[by_row]
        self._kept = row
        return match

    @property
    def held_rows(self) -> int:
        """The rows of matches this output holds until it is emitted."""
        return self._matches.num_rows

    def whole(self) -> pa.RecordBatch:
        """Every output row, in one batch (a scan's chunk; lookups use :meth:`batches`)."""
        return self.slice(0, self.num_rows)

    def slice(self, start: int, stop: int) -> pa.RecordBatch:
        """Output rows ``start`` to ``stop``."""
        batch = self._batch
        if self._ends is None:
            answer = self._answer[start:stop]
            if self._kept is not None:
                batch = batch.take(pa.array(self._kept[start:stop]))
            elif start or stop < batch.num_rows:
                batch = batch.slice(start, stop - start)
        else:
            positions = np.arange(start, stop, dtype=np.int64)
            repeat = np.searchsorted(self._ends, positions, side="right")
            offset = positions - (self._ends[repeat] - self._emit[repeat])
            slot = self._starts[self._key_of_row[repeat]] + offset
            last = max(len(self._order) - 1, 0)
            has = self._matched[repeat] > 0
            answer = np.where(has, self._order[np.minimum(slot, last)], -1)
            batch = batch.take(pa.array(repeat))
        return self._with_values(batch, answer)

    def _with_values(self, batch: pa.RecordBatch, answer: np.ndarray) -> pa.RecordBatch:
        matches = self._matches
        value_rows = answer
        if self._is_error.any():  # an error row contributes its message, never its values
            value_rows = np.where(self._is_error[np.maximum(answer, 0)], -1, answer)
        taken = matches.values.take(_nullable(value_rows))
        columns = list(batch.columns) + [taken.column(f.name) for f in self._fields]
        schema_fields = list(batch.schema) + self._fields
        if self._error_column is not None:
            errors = matches.errors
            if errors is None:
                columns.append(pa.nulls(len(answer), type=pa.string()))
            else:
                columns.append(errors.take(_nullable(answer)))
            schema_fields.append(pa.field(self._error_column, pa.string()))
        if self._matched_column is not None:  # a value row, not a miss, a null key or an error
            columns.append(pa.array(value_rows >= 0, type=pa.bool_()))
            schema_fields.append(pa.field(self._matched_column, pa.bool_()))
        return pa.RecordBatch.from_arrays(columns, schema=pa.schema(schema_fields))

    def rows_per_batch(self, max_rows: int, max_bytes: int = OUTPUT_BATCH_BYTES) -> int:
        """How many output rows a batch may hold: ``max_rows`` (0 or less: no limit), fewer
        when rows are so wide that ``max_bytes`` would be passed."""
        batch, values = self._batch, self._matches.values
        row_bytes = batch.nbytes / max(1, batch.num_rows) + values.nbytes / max(1, values.num_rows)
        by_bytes = max(1, int(max_bytes // max(1.0, row_bytes)))
        return min(max_rows, by_bytes) if max_rows > 0 else by_bytes

    def batches(
        self, max_rows: int, max_bytes: int = OUTPUT_BATCH_BYTES
    ) -> Iterator[pa.RecordBatch]:
        """The output in batches of at most :meth:`rows_per_batch` rows, made one at a time
        (one empty batch when there is no row)."""
        step = self.rows_per_batch(max_rows, max_bytes)
        if self.num_rows <= step:
            yield self.slice(0, self.num_rows)
            return
        for start in range(0, self.num_rows, step):
            yield self.slice(start, min(start + step, self.num_rows))


__all__ = ["OUTPUT_BATCH_BYTES", "JoinedRows"]
