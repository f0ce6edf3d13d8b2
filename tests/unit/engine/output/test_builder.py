"""A batch's output (:class:`OutputBuilder`): input rows joined to the answers it gathered for
``how`` = left, inner, semi and anti; ``on.error`` (fail: the task's error, counting every
failed key; null or column: the rows of a failed request kept with nulls and the reason);
``lookup.max-matches``; values that do not fit their column; and the rows of some keys only
(``output.mode=key-ordered``), the answers of the others kept for later. Also the helpers:
:func:`failed_keys`, :func:`value_failure`, :func:`describe_error`, :func:`failed_rows`,
:func:`over_max_matches`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from lookup_source.connector_api import Matches
from lookup_source.engine.intake.batches import BatchEntry
from lookup_source.engine.output.builder import (
    OutputBuilder,
    describe_error,
    failed_keys,
    failed_rows,
    over_max_matches,
    value_failure,
)
from lookup_source.engine.request.answers import Part, RecordAnswer
from lookup_source.errors import LookupFailedError, PermanentError
from tests.fakes import key_batch, make_options, make_spec

ADDRESS = "fake://user:secret@store:1"
ONE = {"name": "one", "n": 1}
TWO_A, TWO_B = {"name": "two-a", "n": 2}, {"name": "two-b", "n": 22}


def builder(how: str = "left", **options: Any) -> tuple[OutputBuilder, Any]:
    spec = make_spec(make_options(**options), how=how)
    made = OutputBuilder(
        spec.options,
        spec.value_fields,
        how=how,
        connector="fake",
        address=ADDRESS,
        output_fields=spec.output_fields,
    )
    return made, spec


def job_with(spec: Any, keys: Sequence[Any], answers: dict[Any, Any]) -> BatchEntry:
    """A batch of ``keys`` that received ``answers`` (key -> record, records or None) for its
    distinct keys, in one part."""
    job = BatchEntry.of(0, key_batch(list(keys)), spec, ["k"])
    asked = job.python_keys()
    values = [answers.get(key) for key in asked]
    job.receive(Part(np.arange(len(asked)), RecordAnswer(values, asked, list(spec.value_fields))))
    return job


def out(made: OutputBuilder, job: BatchEntry) -> list[tuple[Any, ...]]:
    return [tuple(row.values()) for row in made.build(job).whole().to_pylist()]


KEYS = [1, 2, None, 1, 3]  # 1 has one match, 2 two, 3 none; row 2 has a null key
ANSWERS = {1: ONE, 2: [TWO_A, TWO_B]}


def test_left_join_keeps_every_row_one_per_match() -> None:
    made, spec = builder("left")
    rows = out(made, job_with(spec, KEYS, ANSWERS))
    assert rows == [
        (1, 0, "one", 1),
        (2, 1, "two-a", 2),
        (2, 1, "two-b", 22),
        (None, 2, None, None),
        (1, 3, "one", 1),
        (3, 4, None, None),
    ]


def test_inner_join_drops_misses_and_null_keys() -> None:
    made, spec = builder("inner")
    rows = out(made, job_with(spec, KEYS, ANSWERS))
    assert rows == [(1, 0, "one", 1), (2, 1, "two-a", 2), (2, 1, "two-b", 22), (1, 3, "one", 1)]


def test_semi_join_keeps_each_matched_row_once_without_values() -> None:
    made, spec = builder("semi")
    output = made.build(job_with(spec, KEYS, ANSWERS)).whole()
    assert output.schema.names == ["k", "row"]
    assert output.to_pylist() == [{"k": 1, "row": 0}, {"k": 2, "row": 1}, {"k": 1, "row": 3}]


def test_anti_join_keeps_the_rows_with_no_match_null_keys_included() -> None:
    made, spec = builder("anti")
    output = made.build(job_with(spec, KEYS, ANSWERS)).whole()
    assert output.to_pylist() == [{"k": None, "row": 2}, {"k": 3, "row": 4}]


def test_an_empty_batch_gives_no_row() -> None:
    made, spec = builder("left")
    job = BatchEntry.of(0, key_batch([]), spec, ["k"])
    output = made.build(job).whole()
    assert output.num_rows == 0 and output.schema.names == ["k", "row", "name", "n"]


def test_the_matched_column_says_which_rows_have_a_match() -> None:
    spec = make_spec(make_options(), how="left")
    made = OutputBuilder(
        spec.options,
        spec.value_fields,
        how="left",
        connector="fake",
        address=None,
        matched_column="found",
    )
    output = made.build(job_with(spec, [1, 3, None], ANSWERS)).whole()
    assert output.column("found").to_pylist() == [True, False, False]


def test_on_error_fail_a_failed_request_is_the_tasks_error() -> None:
    made, spec = builder("left", on_error="fail")
    job = BatchEntry.of(0, key_batch([1, 2]), spec, ["k"])
    cause = PermanentError("refused by https://admin:hunter2@store/x")
    error = made.request_failed(cause, 3, [1, 2], [(job, np.arange(2))], None)
    assert isinstance(error, LookupFailedError)
    assert (error.connector, error.failed_keys, error.attempts) == ("fake", 2, 3)
    assert error.sample_keys == [1, 2]
    assert error.reason == "PermanentError: refused by https://admin:***@store/x"
    assert "hunter2" not in str(error) and "secret" not in str(error)
    assert str(error).startswith("fake lookup at fake://user:***@store:1 failed for 2 keys")
    assert error.__cause__ is not None and error.__cause__ is not cause
    assert "PermanentError" in str(error.__cause__) and "hunter2" not in str(error.__cause__)
    assert job.failed_parts == []  # the task fails: no error rows


def test_on_error_fail_later_failures_add_their_keys_to_the_first() -> None:
    made, _ = builder("left", on_error="fail")
    first = made.request_failed(PermanentError("one"), 1, [1], [], None)
    assert isinstance(first, LookupFailedError)
    both = made.request_failed(PermanentError("two"), 2, [7, 8], [], first)
    assert isinstance(both, LookupFailedError) and both is not first
    assert both.failed_keys == 3 and both.sample_keys == [1, 7, 8]
    assert both.reason == first.reason == "PermanentError: one"


def test_on_error_fail_another_failure_already_failing_the_task_stays() -> None:
    made, _ = builder("left", on_error="fail")
    current = RuntimeError("a connector's bug")
    assert made.request_failed(PermanentError("x"), 1, [1], [], current) is current


@pytest.mark.parametrize("on_error", ["null", "column"])
def test_a_failed_request_gives_its_keys_error_rows(on_error: str) -> None:
    made, spec = builder("inner", on_error=on_error)
    job = job_with(spec, [1, 2, 3, 1], {1: ONE})
    assert (
        made.request_failed(PermanentError("refused"), 3, [2, 3], [(job, np.array([1, 2]))], None)
        is None
    )
    output = made.build(job).whole().to_pylist()
    message = "fake lookup failed after 3 attempts: PermanentError: refused"
    if on_error == "column":
        assert [(r["k"], r["name"], r["_lookup_error"]) for r in output] == [
            (1, "one", None),
            (2, None, message),
            (3, None, message),
            (1, "one", None),
        ]
    else:  # kept with nulls, even by an inner join (a failure is not a miss)
        assert [(r["k"], r["name"]) for r in output] == [
            (1, "one"),
            (2, None),
            (3, None),
            (1, "one"),
        ]
        assert "_lookup_error" not in output[0]


def test_one_attempt_is_not_mentioned() -> None:
    made, spec = builder("left", on_error="column")
    job = BatchEntry.of(0, key_batch([1]), spec, ["k"])
    made.request_failed(PermanentError("down"), 1, [1], [(job, np.array([0]))], None)
    errors = made.build(job).whole().column("_lookup_error").to_pylist()
    assert errors == ["fake lookup failed: PermanentError: down"]


def test_a_value_that_does_not_fit_fails_the_task_under_on_error_fail() -> None:
    made, spec = builder("left", on_error="fail")
    job = job_with(spec, [1, 4], {1: ONE, 4: {"name": "bad", "n": "x"}})
    with pytest.raises(LookupFailedError) as raised:
        made.build(job)
    assert raised.value.failed_keys == 1 and raised.value.sample_keys == [4]
    assert raised.value.reason.startswith("a value could not be used: key 4: column 'n' expects")
    assert job.keys_with_bad_values == 1


def test_a_value_that_does_not_fit_is_an_error_row_under_on_error_column() -> None:
    made, spec = builder("left", on_error="column")
    job = job_with(spec, [1, 4], {1: ONE, 4: {"name": "bad", "n": "x"}})
    rows = made.build(job).whole().to_pylist()
    assert rows[0]["_lookup_error"] is None and rows[0]["name"] == "one"
    assert rows[1]["name"] is None and rows[1]["n"] is None
    assert rows[1]["_lookup_error"].startswith("key 4: column 'n' expects bigint, got str 'x'")
    assert job.keys_with_bad_values == 1


def test_more_matches_than_max_matches_is_an_error_for_that_key() -> None:
    made, spec = builder("left", on_error="column", max_matches=2)
    many = [{"name": f"m{i}", "n": i} for i in range(3)]
    job = job_with(spec, [9, 2], {9: many, 2: [TWO_A, TWO_B]})
    rows = [(r["k"], r["name"], r["_lookup_error"]) for r in made.build(job).whole().to_pylist()]
    assert rows == [
        (
            9,
            None,
            "key 9: 3 matches, more than lookup.max-matches=2 (raise it, or set it to 0 "
            "for no limit)",
        ),
        (2, "two-a", None),
        (2, "two-b", None),
    ]
    assert job.keys_with_bad_values == 1


def test_more_matches_than_max_matches_fails_under_on_error_fail() -> None:
    made, spec = builder("left", on_error="fail", max_matches=1)
    job = job_with(spec, [2], {2: [TWO_A, TWO_B]})
    with pytest.raises(LookupFailedError, match="key 2: 2 matches, more than lookup.max-matches=1"):
        made.build(job)


def test_build_part_makes_the_rows_of_some_keys_and_keeps_the_other_answers() -> None:
    made, spec = builder("left", on_error="column")
    job = job_with(spec, [1, 2, None, 1, 3], ANSWERS)  # 1, 2, 3 at 0, 1, 2
    made.request_failed(PermanentError("x"), 1, [3], [(job, np.array([2]))], None)
    first = made.build_part(job, np.array([0]), nulls=True).whole().to_pylist()
    assert [(r["row"], r["name"]) for r in first] == [(0, "one"), (2, None), (3, "one")]
    assert all(r["_lookup_error"] is None for r in first)
    assert len(job.parts) == 1 and len(job.failed_parts) == 1  # 2 and 3 wait
    rest = made.build_part(job, np.array([1, 2]), nulls=False).whole().to_pylist()
    assert [(r["row"], r["name"], r["_lookup_error"]) for r in rest] == [
        (1, "two-a", None),
        (1, "two-b", None),
        (4, None, "fake lookup failed: PermanentError: x"),
    ]
    assert job.parts == [] and job.failed_parts == []


def test_build_part_of_no_key_and_no_nulls_is_empty() -> None:
    made, spec = builder("left")
    job = job_with(spec, [1, None], ANSWERS)
    part = made.build_part(job, np.zeros(0, dtype=np.int64), nulls=False)
    assert part.num_rows == 0
    assert len(job.parts) == 1  # the answer of key 1 waits


def test_build_part_raises_for_a_bad_value_of_its_keys_only() -> None:
    made, spec = builder("left", on_error="fail")
    job = job_with(spec, [1, 4], {1: ONE, 4: {"name": "bad", "n": "x"}})
    assert made.build_part(job, np.array([0]), nulls=False).whole().column("n").to_pylist() == [1]
    with pytest.raises(LookupFailedError, match="key 4"):
        made.build_part(job, np.array([1]), nulls=False)
    assert job.keys_with_bad_values == 1


def test_failed_keys_are_the_keys_with_an_error_row() -> None:
    values = pa.record_batch({"v": pa.array([1, 2, 3, 4], pa.int64())})
    assert failed_keys(Matches([0, 1, 2, 1], values)).tolist() == []
    no_error = pa.array([None] * 4, pa.string())
    assert failed_keys(Matches([0, 1, 2, 1], values, no_error)).tolist() == []
    errors = pa.array([None, "bad", None, "worse"], pa.string())
    assert failed_keys(Matches([5, 3, 2, 3], values, errors)).tolist() == [3]


def test_value_failure_names_the_first_key_and_counts_them_all() -> None:
    values = pa.record_batch({"v": pa.array([1, 2, 3], pa.int64())})
    errors = pa.array([None, "key 'b': broken", "key 'c': broken too"], pa.string())
    failure = value_failure(
        Matches([0, 1, 2], values, errors), ["a", "b", "c"], connector="fake", address=None
    )
    assert failure is not None
    assert failure.failed_keys == 2 and failure.sample_keys == ["b", "c"]
    assert failure.attempts == 0
    assert failure.reason == "a value could not be used: key 'b': broken"
    assert (
        value_failure(Matches([0], values.slice(0, 1)), ["a"], connector="f", address=None) is None
    )


def test_describe_error_names_the_type_and_redacts() -> None:
    assert describe_error(ValueError("")) == "ValueError"
    assert describe_error(ValueError("  spaced  ")) == "ValueError: spaced"
    assert describe_error(ValueError("see https://a:b@host/p")) == (
        "ValueError: see https://a:***@host/p"
    )
    assert describe_error(KeyError("x"), lambda text: text.upper()) == "KeyError: 'X'"


def test_failed_rows_are_null_rows_with_the_message() -> None:
    fields = [pa.field("name", pa.string()), pa.field("n", pa.int64())]
    rows = failed_rows(np.array([4, 1]), fields, "down")
    assert rows.key_index.tolist() == [4, 1]
    assert rows.values.schema == pa.schema(fields)
    assert rows.values.to_pylist() == [{"name": None, "n": None}] * 2
    assert rows.errors is not None and rows.errors.to_pylist() == ["down", "down"]


def test_over_max_matches_replaces_the_rows_of_keys_over_the_limit() -> None:
    fields = [pa.field("v", pa.int64())]
    values = pa.record_batch({"v": pa.array([10, 11, 12, 20, 30, 31], pa.int64())})
    matches = Matches([0, 0, 0, 1, 2, 2], values)
    asked: list[int] = []

    def keys() -> list[str]:
        asked.append(1)
        return ["a", "b", "c"]

    capped = over_max_matches(matches, 3, keys, 2, fields)
    assert capped.key_index.tolist() == [1, 2, 2, 0]
    assert capped.values.column("v").to_pylist() == [20, 30, 31, None]
    assert capped.errors is not None
    assert capped.errors.to_pylist() == [
        None,
        None,
        None,
        "key 'a': 3 matches, more than lookup.max-matches=2 (raise it, or set it to 0 for no "
        "limit)",
    ]
    assert over_max_matches(matches, 3, keys, 3, fields) is matches  # none over
    assert over_max_matches(matches, 3, keys, 6, fields) is matches  # not even in all
    assert asked == [1]  # keys made only when a key is over
