"""What a request returns (engine.request.answers), in both forms: which asked keys a columnar
or record answer found, the part a sharing batch takes, an answer placed into a whole request
and the merge of a request's attempts (the last finder wins), what a cache keeps (rows, MISSING,
never a malformed key), the conversion to Matches in the declared types, Part.split, gather's
one Matches at the batch's key positions with each error naming its key, and the answer a
cache's hits give (cached_answer)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from lookup_source.connector_api import Matches
from lookup_source.engine.request.answers import (
    MISSING,
    CachedError,
    CachedRows,
    ColumnarAnswer,
    Part,
    RecordAnswer,
    absent,
    answer_of,
    cached_answer,
    gather,
    keyed_messages,
    merge,
)
from lookup_source.errors import RecordError

FIELDS = [pa.field("name", pa.string()), pa.field("n", pa.int64())]
KEYS = ["k0", "k1", "k2", "k3", "k4"]


def columnar(
    index: list[int], names: list[str], errors: list[str | None] | None = None
) -> ColumnarAnswer:
    """An answer to KEYS: one match per ``index`` entry, ``n`` its position in the list."""
    values = pa.record_batch(
        {"name": pa.array(names, pa.string()), "n": pa.array(range(len(names)), pa.int64())}
    )
    errs = None if errors is None else pa.array(errors, pa.string())
    return ColumnarAnswer(Matches(index, values, errs), len(KEYS), KEYS, FIELDS)


def rows_of(matches: Matches) -> list[tuple[int, Any, Any]]:
    errors = [None] * matches.num_rows if matches.errors is None else matches.errors.to_pylist()
    return [
        (int(at), value["name"], error)
        for at, value, error in zip(matches.key_index, matches.values.to_pylist(), errors)
    ]


def test_keyed_messages_prefix_each_error_with_its_key() -> None:
    values = pa.record_batch({"name": ["a", "b", "c"]})
    matches = Matches([2, 0, 2], values, pa.array([None, "bad", "worse"], pa.string()))
    keyed = keyed_messages(matches, lambda: [7, "x", 9])
    assert keyed.errors is not None
    assert keyed.errors.to_pylist() == [None, "key 7: bad", "key 9: worse"]
    assert keyed.key_index.tolist() == [2, 0, 2]
    assert keyed.values.equals(values)


def test_keyed_messages_leave_matches_without_errors_as_they_are() -> None:
    def never() -> list[Any]:
        raise AssertionError("no keys needed")

    plain = Matches([0], pa.record_batch({"name": ["a"]}))
    assert keyed_messages(plain, never) is plain
    nulls = Matches([0], pa.record_batch({"name": ["a"]}), pa.array([None], pa.string()))
    assert keyed_messages(nulls, never) is nulls


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, True), ([], True), ((), True), ({}, False), ({"a": 1}, False), ([{}], False)],
)
def test_absent_means_none_or_an_empty_list_of_records(value: Any, expected: bool) -> None:
    assert absent(value) is expected


def test_a_columnar_answer_found_the_keys_its_rows_name() -> None:
    answer = columnar([0, 2, 2, 3], ["a", "b", "c", "d"])
    assert answer.found().tolist() == [True, False, True, True, False]
    assert answer.missing_among() == 2
    assert answer.missing_among(np.array([1, 2, 4])) == 2
    assert answer.missing_among(np.array([0, 3])) == 0
    assert answer.missing_rows().tolist() == [1, 4]
    assert answer.asked() == KEYS


def test_a_key_with_only_an_error_row_counts_as_found() -> None:
    broken = columnar([1], [""], ["malformed"])
    assert broken.found().tolist() == [False, True, False, False, False]
    assert broken.missing_among() == 4


def test_a_columnar_answer_takes_the_rows_a_sharing_batch_waits_for() -> None:
    answer = columnar([0, 2, 2, 3], ["a", "b", "c", "d"], [None, None, None, "broken"])
    taken = answer.take(np.array([2, 3, 1]))
    assert isinstance(taken, ColumnarAnswer)
    assert taken.size == 3
    assert taken.asked() == ["k2", "k3", "k1"]
    assert rows_of(taken.matches) == [(0, "b", None), (0, "c", None), (1, "d", "broken")]
    assert taken.found().tolist() == [True, True, False]


def test_a_columnar_answer_placed_into_a_whole_request() -> None:
    part = ColumnarAnswer(
        Matches([0, 1, 1], pa.record_batch({"name": ["x", "y", "z"], "n": [1, 2, 3]})),
        2,
        ["k3", "k1"],
        FIELDS,
    )
    whole = part.placed(np.array([3, 1]), 5, lambda: KEYS)
    assert whole.size == 5
    assert whole.asked() == KEYS
    assert whole.found().tolist() == [False, True, False, True, False]
    assert isinstance(whole, ColumnarAnswer)
    assert rows_of(whole.matches) == [(3, "x", None), (1, "y", None), (1, "z", None)]


def test_merged_columnar_answers_keep_every_attempts_rows() -> None:
    first = columnar([0, 2], ["a", "c"])
    retry = columnar([1], ["b"])
    merged = merge([first, retry])
    assert isinstance(merged, ColumnarAnswer)
    assert merged.found().tolist() == [True, True, True, False, False]
    assert rows_of(merged.matches) == [(0, "a", None), (2, "c", None), (1, "b", None)]
    assert merge([first]) is first


def test_a_columnar_answer_converts_to_the_declared_types() -> None:
    loose = pa.record_batch({"name": ["a"], "n": pa.array([7], pa.int64())})
    fields = [pa.field("name", pa.string()), pa.field("n", pa.int32())]
    answer = ColumnarAnswer(Matches([0], loose), 1, ["k"], fields)
    matches = answer.to_matches()
    assert matches.values.schema == pa.schema(fields)
    assert matches.values.to_pylist() == [{"name": "a", "n": 7}]


def test_a_columnar_answer_caches_rows_per_key_never_a_malformed_one() -> None:
    answer = columnar([0, 2, 2, 3], ["a", "b", "c", "d"], [None, None, None, "broken"])
    entries = dict(answer.cache_entries(cache_missing=True))
    assert set(entries) == {"k0", "k2", "k1", "k4"}  # k3's value is malformed: not kept
    assert entries["k1"] is MISSING and entries["k4"] is MISSING
    k0, k2 = entries["k0"], entries["k2"]
    assert isinstance(k0, CachedRows) and isinstance(k2, CachedRows)
    assert (k0.start, k0.count, k2.start, k2.count) == (0, 1, 1, 2)
    assert k2.values.slice(k2.start, k2.count).column("name").to_pylist() == ["b", "c"]
    without = dict(answer.cache_entries(cache_missing=False))
    assert set(without) == {"k0", "k2"}


def test_a_record_answer_of_a_clients_mapping_follows_the_asked_keys() -> None:
    answer = RecordAnswer.of({"b": {"name": "B"}, "z": {"name": "Z"}}, ["a", "b", "c"], FIELDS)
    assert answer.values == [None, {"name": "B"}, None]
    assert answer.size == 3
    assert answer.asked() == ["a", "b", "c"]


def test_a_record_answer_found_the_keys_with_records_or_errors() -> None:
    values = [{"name": "a", "n": 1}, None, [{"name": "b"}, {"name": "c"}], RecordError("bad"), []]
    answer = RecordAnswer(values, KEYS, FIELDS)
    assert answer.missing_among() == 2  # counted without the mask first
    assert answer.missing_among(np.array([1, 3, 4])) == 2
    assert answer.found().tolist() == [True, False, True, True, False]
    assert answer.missing_among(np.array([0, 4])) == 1  # and with it
    assert answer.missing_rows().tolist() == [1, 4]


def test_a_record_answer_take_place_and_merge() -> None:
    answer = RecordAnswer([{"name": "a"}, None, {"name": "c"}], ["x", "y", "z"], FIELDS)
    taken = answer.take(np.array([2, 1]))
    assert isinstance(taken, RecordAnswer)
    assert taken.values == [{"name": "c"}, None]
    assert taken.asked() == ["z", "y"]
    placed = RecordAnswer([{"name": "Y"}], ["y"], FIELDS).placed(
        np.array([1]), 3, lambda: ["x", "y", "z"]
    )
    assert isinstance(placed, RecordAnswer)
    assert placed.values == [None, {"name": "Y"}, None]
    later = RecordAnswer([{"name": "A2"}, None, []], ["x", "y", "z"], FIELDS)
    merged = merge([answer, placed, later])
    assert isinstance(merged, RecordAnswer)
    # a key takes its matches from the last answer that found it; nothing found keeps the earlier
    assert merged.values == [{"name": "A2"}, {"name": "Y"}, {"name": "c"}]
    assert answer.values == [{"name": "a"}, None, {"name": "c"}]  # not changed in place


def test_a_record_answer_caches_records_and_missing_keys_not_errors() -> None:
    records = [{"name": "b"}, {"name": "c"}]
    values = [{"name": "a"}, None, records, RecordError("bad"), [], ["not a record"]]
    answer = RecordAnswer(values, ["a", "b", "c", "d", "e", "f"], FIELDS)
    assert answer.cache_entries(cache_missing=True) == [
        ("a", {"name": "a"}),
        ("b", MISSING),
        ("c", records),
        ("e", MISSING),
    ]
    assert answer.cache_entries(cache_missing=False) == [("a", {"name": "a"}), ("c", records)]


def test_a_record_answer_converts_records_with_an_error_per_bad_value() -> None:
    values = [{"name": "a", "n": 1}, None, [{"name": "b", "n": 2}], RecordError("bad value")]
    matches = RecordAnswer(values, ["w", "x", "y", "z"], FIELDS).to_matches()
    assert matches.values.schema == pa.schema(FIELDS)
    assert rows_of(matches) == [(0, "a", None), (2, "b", None), (3, None, "bad value")]


def test_answer_of_picks_the_form_of_the_clients_result() -> None:
    made: list[int] = []

    def keys() -> list[str]:
        made.append(1)
        return ["a", "b"]

    col = answer_of(Matches([1], pa.record_batch({"name": ["B"], "n": [2]})), 2, keys, FIELDS)
    assert isinstance(col, ColumnarAnswer)
    assert made == []  # the keys are made only when needed
    assert col.found().tolist() == [False, True]
    rec = answer_of({"a": {"name": "A"}}, 2, keys, FIELDS)
    assert isinstance(rec, RecordAnswer)
    assert rec.values == [{"name": "A"}, None]


def test_a_part_splits_by_the_batchs_wanted_keys() -> None:
    answer = RecordAnswer([{"name": "a"}, None, {"name": "c"}], ["x", "y", "z"], FIELDS)
    part = Part(np.array([4, 0, 2]), answer)
    wanted = np.array([True, False, False, False, True])
    mine, others = part.split(wanted)
    assert mine is not None and others is not None
    assert mine.positions.tolist() == [4, 0]
    assert isinstance(mine.answer, RecordAnswer)
    assert mine.answer.values == [{"name": "a"}, None]
    assert others.positions.tolist() == [2]
    assert isinstance(others.answer, RecordAnswer)
    assert others.answer.values == [{"name": "c"}]
    assert part.split(np.ones(5, dtype=bool)) == (part, None)
    assert part.split(np.zeros(5, dtype=bool)) == (None, part)


def test_gather_places_every_part_at_the_batchs_positions_with_keyed_errors() -> None:
    col = columnar([0, 2, 3], ["a", "c", "d"], [None, None, "bad row"])
    rec = RecordAnswer([None, RecordError("bad record"), {"name": "r", "n": 5}], [7, 8, 9], FIELDS)
    empty = ColumnarAnswer(Matches.none(FIELDS), 1, ["nothing"], FIELDS)
    parts = [
        Part(np.array([10, 11, 12, 13, 14]), col),
        Part(np.array([20, 21, 22]), rec),
        Part(np.array([30]), empty),
    ]
    matches = gather(parts, FIELDS)
    assert matches.values.schema == pa.schema(FIELDS)
    assert rows_of(matches) == [
        (10, "a", None),
        (12, "c", None),
        (13, "d", "key 'k3': bad row"),
        (21, None, "key 8: bad record"),
        (22, "r", None),
    ]
    assert gather([], FIELDS).num_rows == 0


def test_the_answer_of_a_caches_hits_numbers_rows_in_their_order() -> None:
    cached = columnar([0, 2, 2], ["a", "b", "c"]).cache_entries(cache_missing=False)
    rows = dict(cached)
    hits: list[tuple[Any, CachedRows | CachedError]] = [
        ("k2", rows["k2"]),
        ("bad", CachedError("malformed value")),
        ("k0", rows["k0"]),
    ]
    answer = cached_answer(hits, FIELDS)
    assert answer.asked() == ["k2", "bad", "k0"]
    assert answer.found().tolist() == [True, True, True]
    assert rows_of(answer.matches) == [
        (0, "b", None),
        (0, "c", None),
        (2, "a", None),
        (1, None, "malformed value"),
    ]


def test_the_answer_of_only_failed_hits_has_an_error_row_each() -> None:
    answer = cached_answer([("x", CachedError("one")), ("y", CachedError("two"))], FIELDS)
    assert rows_of(answer.matches) == [(0, None, "one"), (1, None, "two")]
    assert answer.matches.values.schema == pa.schema(FIELDS)


def test_rows_cached_from_a_looser_columnar_answer_come_back_in_the_declared_types() -> None:
    fields = [pa.field("name", pa.string()), pa.field("n", pa.int32())]
    loose = pa.record_batch({"name": ["a"], "n": pa.array([7], pa.int64())})  # as Matches allows
    answer = ColumnarAnswer(Matches([0], loose), 1, ["k"], fields)
    hit = cached_answer(answer.cache_entries(cache_missing=False), fields)
    assert hit.matches.values.to_pylist() == [{"name": "a", "n": 7}]
