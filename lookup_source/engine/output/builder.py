"""All that follows an answer, in Arrow: the output of every lookup and scan.

:class:`OutputBuilder` turns what a batch gathered — answers, cache hits, failed requests — into
its output: messages that name their key, ``lookup.max-matches``, ``on.error`` (fail the task,
or keep the rows with nulls and the reason in ``_lookup_error``), then the input rows joined to
their matches (:class:`~.joined_rows.JoinedRows`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from lookup_source.connector_api import Matches
from lookup_source.connector_api.boundary import clean_cause
from lookup_source.engine.intake.batches import BatchEntry
from lookup_source.engine.output.joined_rows import JoinedRows
from lookup_source.engine.output.match_conditions import MatchCondition
from lookup_source.engine.request.answers import Part, gather
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
    return Matches.concat([kept, failed], fields)


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
        output_fields: Sequence[pa.Field] | None = None,
        conditions: Sequence[MatchCondition] = (),
    ) -> None:
        self.options = options
        self.fields = list(fields)
        self.output_fields = self.fields if output_fields is None else list(output_fields)
        """The value columns the output carries (none for a semi or anti join)."""
        self.conditions = tuple(conditions)
        """Conditions on each pair of a row and a match, judged before the join."""
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
        targets: Sequence[tuple[BatchEntry, np.ndarray]],
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
            new.__cause__ = clean_cause(error, self.redact)  # its traceback quotes no secret
            return failure or new
        after = f" after {attempts} attempts" if attempts > 1 else ""
        message = f"{self.connector} lookup failed{after}: {reason}"
        for job, positions in targets:
            job.receive_failure(failed_rows(positions, self.fields, message))
        return failure

    def build(self, job: BatchEntry) -> JoinedRows:
        """The output of a batch whose lookups are all done, to be made slice by slice; raises
        the ``on.error=fail`` error of a value that could not be used."""
        matches = self._checked(job, gather(job.parts, self.fields), job.failed_parts)
        return self._joined(job.batch, job.distinct.indices, len(job.distinct), matches)

    def build_part(self, job: BatchEntry, positions: np.ndarray, nulls: bool) -> JoinedRows:
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

    def _checked(self, job: BatchEntry, answers: Matches, failures: Sequence[Matches]) -> Matches:
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
        return Matches.concat([answers, *failures], fields) if failures else answers

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
            fields=self.output_fields,
            matched_column=self.matched_column,
            conditions=self.conditions,
        )


def _split(
    parts: Sequence[Matches], wanted: np.ndarray, fields: Sequence[pa.Field]
) -> tuple[Matches, list[Matches]]:
    """The rows of ``parts`` whose key is ``wanted`` (a mask by key position), as one
    :class:`Matches`; and the other rows, as the parts left."""
    merged = Matches.concat(parts, fields)
    mine = wanted[merged.key_index]
    if mine.all():
        return merged, []
    taken, left = np.flatnonzero(mine), np.flatnonzero(~mine)
    return merged.rows(taken), [merged.rows(left)]
