"""Join the answers of a lookup to its input rows, in Arrow: the output of every lookup and scan.

The input is a batch, the index of each row's key among the batch's distinct keys (null for a
null key), and the :class:`~lookup_source.connectors.base.Matches` gathered for those keys
(``key_index`` = the distinct key's position). The output keeps the input rows in their order:

- a key with one match gets its values; with several, its row is repeated once per match, in
  the order of the matches (a one-to-many lookup join);
- a key with no match (or a null key) keeps one row of nulls under ``how="left"`` and is
  dropped under ``how="inner"``;
- a key whose lookup failed keeps one row of nulls under both (a failure is not a miss), with
  the reason in the error column when there is one.

No Python object is made per row: positions are computed with numpy, rows moved with ``take``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from lookup_source.connector_api import Matches
from lookup_source.errors import LookupFailedError


def concat_matches(parts: Sequence[Matches], fields: Sequence[pa.Field]) -> Matches:
    """All ``parts`` (each already conformed to ``fields``) as one :class:`Matches`."""
    parts = [part for part in parts if part.num_rows]
    if not parts:
        return Matches.none(fields)
    if len(parts) == 1:
        return parts[0]
    schema = pa.schema(list(fields))
    values = pa.Table.from_batches([p.values for p in parts], schema=schema).combine_chunks()
    batch = values.to_batches()[0] if values.num_rows else parts[0].values.slice(0, 0)
    errors = None
    if any(p.errors is not None for p in parts):
        errors = pa.concat_arrays(
            [p.errors if p.errors is not None else pa.nulls(p.num_rows, pa.string()) for p in parts]
        )
    return Matches(np.concatenate([p.key_index for p in parts]), batch, errors)


def failed_keys(matches: Matches) -> np.ndarray:
    """Positions of the keys that have at least one error row, ascending."""
    errors = matches.errors
    if errors is None or errors.null_count == len(errors):
        return np.zeros(0, dtype=np.int64)
    bad = errors.is_valid().to_numpy(zero_copy_only=False)
    return np.unique(matches.key_index[bad])


def value_failure(
    matches: Matches, keys: Sequence[object], *, connector: str, address: str | None
) -> LookupFailedError | None:
    """The ``on.error=fail`` error for the keys of ``matches`` whose values could not be used
    (their messages already name the key), or None if there is none."""
    bad = failed_keys(matches)
    if not len(bad):
        return None
    assert matches.errors is not None
    rows = np.flatnonzero(matches.key_index == bad[0])
    reason = next(m for m in matches.errors.take(pa.array(rows)).to_pylist() if m)
    return LookupFailedError(
        connector=connector,
        address=address,
        failed_keys=len(bad),
        attempts=0,
        reason=f"a value could not be used: {reason}",
        sample_keys=[keys[p] for p in bad[:3]],
    )


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


def join_matches(
    batch: pa.RecordBatch,
    indices: pa.Array,
    num_keys: int,
    matches: Matches,
    *,
    how: str,
    error_column: str | None,
    fields: Sequence[pa.Field],
) -> pa.RecordBatch:
    """``batch`` with the value columns ``fields`` (and ``error_column``) appended."""
    matches, is_error = _without_extra_rows_of_failed_keys(matches)
    index = matches.key_index
    rows = batch.num_rows
    counts = np.bincount(index, minlength=num_keys) if len(index) else np.zeros(num_keys, int)
    key_of_row = indices.fill_null(num_keys).to_numpy(zero_copy_only=False).astype(np.int64)
    counts_ext = np.append(counts, 0)
    if not len(index) or counts.max() <= 1:
        first = np.full(num_keys + 1, -1, dtype=np.int64)
        first[index] = np.arange(len(index))
        answer = first[key_of_row]
        if how == "inner":
            keep = answer >= 0
            if not keep.all():
                batch = batch.filter(pa.array(keep))
                answer = answer[keep]
    else:  # one-to-many: repeat each input row once per match of its key
        matched = counts_ext[key_of_row]
        emit = matched if how == "inner" else np.maximum(matched, 1)
        repeat = np.repeat(np.arange(rows), emit)
        group_start = np.repeat(np.cumsum(emit) - emit, emit)
        offset = np.arange(len(repeat)) - group_start
        order = np.argsort(index, kind="stable")
        starts = np.append(np.cumsum(counts) - counts, 0)
        slot = starts[key_of_row][repeat] + offset
        has = matched[repeat] > 0
        answer = np.where(has, order[np.minimum(slot, max(len(order) - 1, 0))], -1)
        batch = batch.take(pa.array(repeat))
    value_rows = answer
    if is_error.any():  # an error row contributes its message, never its values
        value_rows = np.where(is_error[np.maximum(answer, 0)], -1, answer)
    taken = matches.values.take(_nullable(value_rows))
    columns = list(batch.columns) + [taken.column(f.name) for f in fields]
    schema_fields = list(batch.schema) + list(fields)
    if error_column is not None:
        errors = matches.errors
        if errors is None:
            columns.append(pa.nulls(len(answer), type=pa.string()))
        else:
            columns.append(errors.take(_nullable(answer)))
        schema_fields.append(pa.field(error_column, pa.string()))
    return pa.RecordBatch.from_arrays(columns, schema=pa.schema(schema_fields))
