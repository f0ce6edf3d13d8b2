"""What a request returns: an :class:`Answer`, one type per form, each with its value schema.

An answer holds, for each key a request asked (rows ``0 .. size - 1``), its matches — from a
columnar client as :class:`~lookup_source.connector_api.Matches` (:class:`ColumnarAnswer`),
from a client in the record form as the records it returned (:class:`RecordAnswer`). The engine
never tells the two apart: it asks an answer which keys it found (:meth:`Answer.found`), the
part of it that a later batch sharing the request waits for (:meth:`Answer.take`), what the
cache should keep (:meth:`Answer.cache_entries`), its matches whole (:meth:`Answer.to_matches`),
and merges the answers of a request's attempts (:func:`merge`); each form answers for itself.
A batch gathers its answers as :class:`Part` objects, placed at its own key positions, and
:func:`gather` makes them one :class:`Matches`, its error messages naming their keys.

Records are converted into Arrow in one place, :func:`gather`, all the record answers of a
batch together: one GET's record alone would cost more to convert than to fetch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from lookup_source.connector_api import Key, Matches
from lookup_source.connector_api.values import conform_matches, values_to_matches
from lookup_source.engine.kept.cached_rows import MISSING, CachedError, CachedRows, cache_rows

Fields = Sequence[pa.Field]
"""A value schema: the declared value columns."""

KeySource = Callable[[], Sequence[Key]]
"""The asked keys as Python values, made when first needed (a message names its key)."""


def keyed_messages(matches: Matches, keys: KeySource) -> Matches:
    """``matches`` with each error message prefixed by the key it concerns: ``key 7: ...``
    (``keys()``: the asked keys, which ``key_index`` points into)."""
    errors = matches.errors
    if errors is None or errors.null_count == len(errors):
        return matches
    everything = keys()
    index = matches.key_index
    messages = [
        None if text is None else f"key {everything[index[row]]!r}: {text}"
        for row, text in enumerate(errors.to_pylist())
    ]
    return Matches(index, matches.values, pa.array(messages, type=pa.string()))


def absent(value: Any) -> bool:
    """Whether a record-form value means "no match": None, or an empty list of records."""
    return value is None or (isinstance(value, (list, tuple)) and not value)


class Answer:
    """The matches of the keys one request asked (see the module), in one of two forms:
    :class:`ColumnarAnswer` (a columnar client's :class:`Matches`, one row per match) or
    :class:`RecordAnswer` (per asked row, what a record-form client returned). Each form
    carries its value schema (``fields``) and answers every question itself, so no caller
    tells them apart. ``keys``: the asked keys as Python values, or a function that makes them
    when first needed."""

    __slots__ = ("_found", "_keys", "fields", "size")

    def __init__(self, size: int, keys: KeySource | Sequence[Key], fields: Fields) -> None:
        self.size = size
        self._keys = keys
        self.fields = fields
        self._found: np.ndarray | None = None

    def asked(self) -> Sequence[Key]:
        """The keys the request asked, as Python values."""
        keys = self._keys
        return keys() if callable(keys) else keys

    def _asked_at(self, rows: np.ndarray) -> KeySource:
        asked = self.asked

        def keys() -> list[Key]:
            everything = asked()
            return [everything[row] for row in rows.tolist()]

        return keys

    def found(self) -> np.ndarray:
        """For each asked key, whether it has at least one match (or an error)."""
        if self._found is None:
            self._found = self._found_mask()
        return self._found

    def _found_mask(self) -> np.ndarray:
        raise NotImplementedError

    def missing_among(self, rows: np.ndarray | None = None) -> int:
        """How many of the asked keys (those at ``rows``, or all) have no match."""
        found = self.found()
        return int(len(found) - found.sum()) if rows is None else int((~found[rows]).sum())

    def missing_rows(self) -> np.ndarray:
        """The asked rows with no match."""
        return np.flatnonzero(~self.found())

    def take(self, rows: np.ndarray) -> Answer:
        """The answer of the asked keys at ``rows`` only, numbered ``0 .. len(rows) - 1`` (what a
        batch that shares the request waits for)."""
        raise NotImplementedError

    def placed(self, rows: np.ndarray, size: int, keys: KeySource) -> Answer:
        """This answer to the keys at ``rows`` of a request of ``size`` keys, as an answer to
        that whole request (the other keys not found): a retry that asked some keys again."""
        raise NotImplementedError

    def merged(self, later: Sequence[Answer]) -> Answer:
        """This answer and ``later`` ones to the same request (each to the whole of it) as one:
        a key takes its matches from the last answer that found it."""
        raise NotImplementedError

    def cache_entries(self, *, cache_missing: bool) -> list[tuple[Key, Any]]:
        """What a cache keeps of this answer: per found key its matches — a
        :class:`CachedRows` (columnar) or its records — and per missing key :data:`MISSING`
        (if ``cache_missing``); a key whose value was malformed is not kept."""
        raise NotImplementedError

    def to_matches(self) -> Matches:
        """The whole answer as :class:`Matches` in its ``fields``' types (records converted)."""
        raise NotImplementedError

    def gather_into(self, positions: np.ndarray, gathering: Gathering) -> None:
        """Add this answer, its rows placed at a batch's key ``positions``, to ``gathering``."""
        raise NotImplementedError


class ColumnarAnswer(Answer):
    """A columnar client's answer: ``matches``, ``key_index`` = the asked row."""

    __slots__ = ("_conformed", "matches")

    def __init__(
        self, matches: Matches, size: int, keys: KeySource | Sequence[Key], fields: Fields
    ) -> None:
        super().__init__(size, keys, fields)
        self.matches = matches
        self._conformed: Matches | None = None

    def _found_mask(self) -> np.ndarray:
        found = np.zeros(self.size, dtype=bool)
        found[self.matches.key_index] = True
        return found

    def take(self, rows: np.ndarray) -> Answer:
        slot = np.full(self.size, -1, dtype=np.int64)
        slot[rows] = np.arange(len(rows))
        mine = slot[self.matches.key_index]
        kept = self.matches.rows(np.flatnonzero(mine >= 0), mine)
        return ColumnarAnswer(kept, len(rows), self._asked_at(rows), self.fields)

    def placed(self, rows: np.ndarray, size: int, keys: KeySource) -> Answer:
        matches = self.matches
        placed = Matches(rows[matches.key_index], matches.values, matches.errors)
        return ColumnarAnswer(placed, size, keys, self.fields)

    def merged(self, later: Sequence[Answer]) -> Answer:
        parts = [answer.to_matches() for answer in (self, *later)]
        return ColumnarAnswer(
            Matches.concat(parts, self.fields), self.size, self._keys, self.fields
        )

    def cache_entries(self, *, cache_missing: bool) -> list[tuple[Key, Any]]:
        # kept in the declared types, as every reader of the cache takes them (a connector may
        # answer in looser ones: an int64 for an int32 column)
        return cache_rows(
            self.asked(), self.to_matches(), self.found(), cache_missing=cache_missing
        )

    def to_matches(self) -> Matches:
        """The matches in the declared value types (converted once)."""
        if self._conformed is None:
            self._conformed = conform_matches(self.matches, self.fields)
        return self._conformed

    def gather_into(self, positions: np.ndarray, gathering: Gathering) -> None:
        if not self.matches.num_rows:
            return
        matches = keyed_messages(self.to_matches(), self.asked)
        gathering.columnar.append(
            Matches(positions[matches.key_index], matches.values, matches.errors)
        )


class RecordAnswer(Answer):
    """A record-form client's answer: per asked row, what it returned for the key — a record,
    a list of records, a :class:`RecordError`, None."""

    __slots__ = ("values",)

    def __init__(self, values: list[Any], keys: KeySource | Sequence[Key], fields: Fields) -> None:
        super().__init__(len(values), keys, fields)
        self.values = values

    @classmethod
    def of(cls, result: Mapping[Key, Any], keys: Sequence[Key], fields: Fields) -> RecordAnswer:
        """The record form of a client's answer (``{key: record}``) for the asked ``keys``."""
        return cls([result.get(key) for key in keys], keys, fields)

    def _found_mask(self) -> np.ndarray:
        found = np.zeros(self.size, dtype=bool)
        found[:] = [not absent(value) for value in self.values]
        return found

    def missing_among(self, rows: np.ndarray | None = None) -> int:
        if self._found is not None:
            return super().missing_among(rows)
        # no array per request: a GET's answer is one key
        values = self.values if rows is None else [self.values[r] for r in rows.tolist()]
        return sum(map(absent, values))

    def take(self, rows: np.ndarray) -> Answer:
        picked = rows.tolist()
        return RecordAnswer([self.values[row] for row in picked], self._asked_at(rows), self.fields)

    def placed(self, rows: np.ndarray, size: int, keys: KeySource) -> Answer:
        values: list[Any] = [None] * size
        for row, value in zip(rows.tolist(), self.values):
            values[row] = value
        return RecordAnswer(values, keys, self.fields)

    def merged(self, later: Sequence[Answer]) -> Answer:
        values = list(self.values)
        for answer in later:
            assert isinstance(answer, RecordAnswer)  # one client: one form
            for row, value in enumerate(answer.values):
                if not absent(value):
                    values[row] = value
        return RecordAnswer(values, self._keys, self.fields)

    def cache_entries(self, *, cache_missing: bool) -> list[tuple[Key, Any]]:
        items: list[tuple[Key, Any]] = []
        for key, value in zip(self.asked(), self.values):
            if absent(value):
                if cache_missing:
                    items.append((key, MISSING))
            elif isinstance(value, Mapping) or (
                isinstance(value, (list, tuple)) and all(isinstance(v, Mapping) for v in value)
            ):
                items.append((key, value))
        return items

    def to_matches(self) -> Matches:
        return values_to_matches(self.values, self.fields)

    def gather_into(self, positions: np.ndarray, gathering: Gathering) -> None:
        gathering.records.append((positions, self))


def answer_of(
    result: Matches | Mapping[Key, Any], size: int, keys: KeySource, fields: Fields
) -> Answer:
    """A client's result (``Matches``, or ``{key: record}``) to ``size`` asked keys."""
    if isinstance(result, Matches):
        return ColumnarAnswer(result, size, keys, fields)
    return RecordAnswer.of(result, keys(), fields)


def merge(answers: Sequence[Answer]) -> Answer:
    """The answers of a request's attempts (each to the whole request, :meth:`Answer.placed`)
    as one: a key takes its matches from the last attempt that found it (a retry asks only
    the keys still missing)."""
    return answers[0] if len(answers) == 1 else answers[0].merged(answers[1:])


class Part(NamedTuple):
    """An answer gathered by a batch: the batch's key position of each asked row."""

    positions: np.ndarray
    answer: Answer

    def split(self, wanted: np.ndarray) -> tuple[Part | None, Part | None]:
        """This part cut in two by ``wanted`` (a mask by the batch's key positions): the rows
        of wanted keys, and the others (None for an empty side)."""
        mine = wanted[self.positions]
        if mine.all():
            return self, None
        if not mine.any():
            return None, self
        taken, left = np.flatnonzero(mine), np.flatnonzero(~mine)
        return (
            Part(self.positions[taken], self.answer.take(taken)),
            Part(self.positions[left], self.answer.take(left)),
        )


@dataclass
class Gathering:
    """A batch's answers on their way to one :class:`Matches` (:func:`gather`): the columnar
    ones as they come, the record ones kept to be converted together."""

    fields: Fields
    columnar: list[Matches] = field(default_factory=list)
    records: list[tuple[np.ndarray, RecordAnswer]] = field(default_factory=list)

    def matches(self) -> Matches:
        columnar = list(self.columnar)
        if self.records:
            values = [v for _, answer in self.records for v in answer.values]
            positions = np.concatenate([positions for positions, _ in self.records])
            keys = [k for _, answer in self.records for k in answer.asked()]
            converted = values_to_matches(values, self.fields)
            converted = keyed_messages(converted, lambda: keys)
            columnar.append(
                Matches(positions[converted.key_index], converted.values, converted.errors)
            )
        return Matches.concat(columnar, self.fields)


def gather(parts: Sequence[Part], fields: Fields) -> Matches:
    """Every part's matches as one :class:`Matches` in ``fields``' types, ``key_index`` = the
    batch's key position, each error message naming its key (``key 7: ...``). The record
    answers are converted together, in one pass."""
    gathering = Gathering(fields)
    for part in parts:
        part.answer.gather_into(part.positions, gathering)
    return gathering.matches()


def cached_answer(hits: Sequence[tuple[Key, CachedRows | CachedError]], fields: Fields) -> Answer:
    """The answer a cache gives for its columnar hits ``(key, entry)``, rows numbered in the
    order of ``hits``."""
    keys = [key for key, _ in hits]
    by_segment: dict[int, tuple[pa.RecordBatch, list[int], list[int]]] = {}
    failed: list[tuple[int, str]] = []
    for row, (_, cached) in enumerate(hits):
        if isinstance(cached, CachedError):
            failed.append((row, cached.message))
            continue
        _, taken, rows = by_segment.setdefault(id(cached.values), (cached.values, [], []))
        taken.extend(range(cached.start, cached.start + cached.count))
        rows.extend([row] * cached.count)
    schema = pa.schema(list(fields))
    batches = [values.take(pa.array(taken)) for values, taken, _ in by_segment.values()]
    if failed:
        empty = pa.RecordBatch.from_pylist([], schema=schema)
        batches.append(empty.take(pa.nulls(len(failed), pa.int64())))
    table = pa.Table.from_batches(batches, schema=schema).combine_chunks()
    values = (
        table.to_batches()[0] if table.num_rows else pa.RecordBatch.from_pylist([], schema=schema)
    )
    index = np.asarray(
        [r for _, _, rows in by_segment.values() for r in rows] + [r for r, _ in failed],
        dtype=np.int64,
    )
    errors = None
    if failed:
        found = len(index) - len(failed)
        errors = pa.array([None] * found + [m for _, m in failed], type=pa.string())
    return ColumnarAnswer(Matches(index, values, errors), len(keys), keys, fields)


__all__ = [
    "MISSING",
    "Answer",
    "CachedError",
    "CachedRows",
    "ColumnarAnswer",
    "Gathering",
    "Part",
    "RecordAnswer",
    "absent",
    "answer_of",
    "cache_rows",
    "cached_answer",
    "gather",
    "keyed_messages",
    "merge",
]
