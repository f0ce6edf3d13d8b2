"""All that follows an answer, in Arrow: the output of every lookup and scan.

:class:`OutputBuilder` turns what a batch gathered — answers, cache hits, failed requests — into
its output: messages that name their key, ``lookup.max-matches``, ``on.error`` (fail the task,
or keep the rows with nulls and the reason in ``_lookup_error``), then :class:`JoinedRows`.

:class:`JoinedRows` takes a batch, the index of each row's key among the batch's distinct keys
(null for a null key), and the :class:`~lookup_source.connector_api.Matches` gathered for those
keys (``key_index`` = the distinct key's position). The output keeps the input rows in their
order:

- a key with one match gets its values; with several, its row is repeated once per match, in
  the order of the matches (a one-to-many lookup join);
- a key with no match (or a null key) keeps one row of nulls under ``how="left"`` and is
  dropped under ``how="inner"``;
- a key whose lookup failed keeps one row of nulls under both (a failure is not a miss), with
  the reason in the error column when there is one.

No Python object is made per row: positions are computed with numpy, rows moved with ``take``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from lookup_source.connector_api import Matches
from lookup_source.engine.answers import Part, concat_matches, gather
from lookup_source.engine.batches import Job
from lookup_source.errors import LookupFailedError
from lookup_source.redaction import redact_text
from lookup_source.settings import ERROR_COLUMN, LookupOptions


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
        if not len(index) or np.max(counts) <= 1:
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


def describe_error(error: BaseException, redact: Callable[[str], str] = redact_text) -> str:
    """``TypeName: message`` (or the type's name alone), redacted (any URL in it; with a
    :class:`~lookup_source.redaction.Redactor`, the lookup's own secrets too)."""
    text = redact(str(error).strip())
    name = type(error).__name__
    return f"{name}: {text}" if text else name


def failed_rows(positions: np.ndarray, fields: Sequence[pa.Field], message: str) -> Matches:
    """One error row, with null values, for each key position of ``positions``."""
    values = pa.RecordBatch.from_pylist([], schema=pa.schema(list(fields)))
    nulls = values.take(pa.nulls(len(positions), type=pa.int64()))
    return Matches(positions, nulls, pa.array([message] * len(positions), type=pa.string()))


def over_max_matches(
    matches: Matches,
    num_keys: int,
    keys: Callable[[], Sequence[Any]],
    limit: int,
    fields: Sequence[pa.Field],
) -> Matches:
    """``matches`` with each key that has more than ``limit`` matches replaced by one error
    naming it (then handled by ``on.error``)."""
    if len(matches.key_index) <= limit:
        return matches
    counts = np.bincount(matches.key_index, minlength=num_keys)
    over = np.flatnonzero(counts > limit)
    if not len(over):
        return matches
    asked = keys()
    rows = pa.array(np.flatnonzero(~np.isin(matches.key_index, over)))
    errors = matches.errors
    kept = Matches(
        matches.key_index[rows.to_numpy()],
        matches.values.take(rows),
        errors.take(rows) if errors is not None else None,
    )
    messages = [
        f"key {asked[k]!r}: {counts[k]:,} matches, more than lookup.max-matches={limit} "
        "(raise it, or set it to 0 for no limit)"
        for k in over.tolist()
    ]
    nulls = pa.RecordBatch.from_arrays(
        [pa.nulls(len(over), f.type) for f in fields], schema=pa.schema(list(fields))
    )
    failed = Matches(over.astype(np.int64), nulls, pa.array(messages, pa.string()))
    return concat_matches([kept, failed], fields)


class OutputBuilder:
    """What a lookup emits for its batches, as its options say (``on.error``,
    ``lookup.max-matches``, ``how``), for the connector ``connector`` at ``address``."""

    def __init__(
        self,
        options: LookupOptions,
        fields: Sequence[pa.Field],
        *,
        how: str,
        connector: str,
        address: str | None,
        redact: Callable[[str], str] = redact_text,
        matched_column: str | None = None,
    ) -> None:
        self.options = options
        self.fields = list(fields)
        self.how = how
        self.matched_column = matched_column
        self.connector = connector
        self.address = address
        self.redact = redact

    def request_failed(
        self,
        error: BaseException,
        attempts: int,
        keys: Sequence[Any],
        targets: Sequence[tuple[Job, np.ndarray]],
        failure: BaseException | None,
    ) -> BaseException | None:
        """A request for ``keys`` failed for good. Under ``on.error=fail``: the error that
        fails the task (``failure``, the one already failing it, counts these keys too).
        Otherwise: each of ``targets`` (a batch, the positions of its keys) gets error rows;
        None."""
        reason = describe_error(error, self.redact)
        if self.options.on_error == "fail":
            # (the batches sharing the request asked the same keys: not counted again)
            if isinstance(failure, LookupFailedError):  # failed before the task stopped
                return failure.with_more(len(keys), keys)
            new = LookupFailedError(
                connector=self.connector,
                address=self.address,
                failed_keys=len(keys),
                attempts=attempts,
                reason=reason,
                sample_keys=keys,
            )
            new.__cause__ = error
            return failure or new
        after = f" after {attempts} attempts" if attempts > 1 else ""
        message = f"{self.connector} lookup failed{after}: {reason}"
        for job, positions in targets:
            job.receive_failure(failed_rows(positions, self.fields, message))
        return failure

    def build(self, job: Job) -> JoinedRows:
        """The output of a batch whose lookups are all done, to be made slice by slice; raises
        the ``on.error=fail`` error of a value that could not be used."""
        matches = self._checked(job, gather(job.parts, self.fields), job.failed_parts)
        return self._joined(job.batch, job.distinct.indices, len(job.distinct), matches)

    def build_part(self, job: Job, positions: np.ndarray, nulls: bool) -> JoinedRows:
        """The output of the rows of ``job`` whose key is at ``positions`` (distinct keys that
        have their answer), and of its rows with a null key if ``nulls``, in input order. The
        answers of other keys stay with the job for a later part (``output.mode=key-ordered``)."""
        fields = self.fields
        wanted = np.zeros(len(job.distinct) + 1, dtype=bool)
        wanted[positions] = True
        taken: list[Part] = []
        kept: list[Part] = []
        for part in job.parts:
            mine, rest = part.split(wanted)
            taken += [mine] if mine is not None else []
            kept += [rest] if rest is not None else []
        job.parts = kept
        failures, job.failed_parts = _split(job.failed_parts, wanted, fields)
        matches = self._checked(job, gather(taken, fields), [failures])
        wanted[-1] = nulls  # a null key's rows: index len(distinct), below
        key_of_row = job.distinct.indices.fill_null(len(job.distinct)).to_numpy(
            zero_copy_only=False
        )
        rows = pa.array(np.flatnonzero(wanted[key_of_row]))
        return self._joined(
            job.batch.take(rows), job.distinct.indices.take(rows), len(job.distinct), matches
        )

    def _checked(self, job: Job, answers: Matches, failures: Sequence[Matches]) -> Matches:
        """``answers`` with ``lookup.max-matches`` applied, then the error rows of failed
        requests; counts (on ``job``) the keys whose answer could not be used, and raises for
        them under ``on.error=fail``."""
        fields = self.fields
        if self.options.max_matches:
            answers = over_max_matches(
                answers, len(job.distinct), job.python_keys, self.options.max_matches, fields
            )
        bad = len(failed_keys(answers))
        job.keys_with_bad_values += bad
        if self.options.on_error == "fail" and bad:
            failure = value_failure(
                answers, job.python_keys(), connector=self.connector, address=self.address
            )
            if failure is not None:
                raise failure
        return concat_matches([answers, *failures], fields) if failures else answers

    def _joined(
        self, batch: pa.RecordBatch, indices: pa.Array, num_keys: int, matches: Matches
    ) -> JoinedRows:
        return JoinedRows(
            batch,
            indices,
            num_keys,
            matches,
            how=self.how,
            error_column=ERROR_COLUMN if self.options.error_column else None,
            fields=self.fields,
            matched_column=self.matched_column,
        )


def _split(
    parts: Sequence[Matches], wanted: np.ndarray, fields: Sequence[pa.Field]
) -> tuple[Matches, list[Matches]]:
    """The rows of ``parts`` whose key is ``wanted`` (a mask by key position), as one
    :class:`Matches`; and the other rows, as the parts left."""
    merged = concat_matches(parts, fields)
    mine = wanted[merged.key_index]
    if mine.all():
        return merged, []
    taken, left = np.flatnonzero(mine), np.flatnonzero(~mine)
    return _rows(merged, taken), [_rows(merged, left)]


def _rows(matches: Matches, rows: np.ndarray) -> Matches:
    index = pa.array(rows)
    errors = matches.errors.take(index) if matches.errors is not None else None
    return Matches(matches.key_index[rows], matches.values.take(index), errors)
