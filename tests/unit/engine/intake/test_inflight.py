"""Keys already being asked (:class:`InFlightKeys`): a later batch shares the requests in flight
that ask some of its keys (it subscribes to them and expects their parts) and asks only the
rest; a request that ended is discarded; :func:`deliver` hands a request's answer to the batch
that asked and to every batch sharing it, each at its own key positions, and counts the keys
missing among them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from lookup_source.engine.intake.batches import BatchEntry, Request
from lookup_source.engine.intake.inflight import InFlightKeys, deliver
from lookup_source.engine.request.answers import RecordAnswer, gather
from tests.fakes import key_batch, make_options, make_spec

SPEC = make_spec(make_options())
FIELDS = list(SPEC.value_fields)


def entry(number: int, keys: Sequence[Any]) -> tuple[BatchEntry, list[int]]:
    completed: list[int] = []
    job = BatchEntry.of(
        number, key_batch(list(keys)), SPEC, ["k"], lambda j: completed.append(j.number)
    )
    return job, completed


def composite_entry(number: int, rows: Sequence[tuple[Any, Any]]) -> BatchEntry:
    spec = make_spec(make_options(), key_columns=("t", "u"))
    batch = pa.RecordBatch.from_pydict(
        {"t": [t for t, _ in rows], "u": pa.array([u for _, u in rows], pa.int64())}
    )
    return BatchEntry.of(number, batch, spec, ["t", "u"])


def in_flight(*requests: Request) -> InFlightKeys[Request]:
    keys: InFlightKeys[Request] = InFlightKeys()
    for request in requests:
        keys.add(request, request.keys)
    return keys


def test_nothing_in_flight_shares_nothing() -> None:
    job, _ = entry(0, [1, 2])
    keys: InFlightKeys[Request] = InFlightKeys()
    wanted = np.arange(2)
    left, shared = keys.share(job, wanted)
    assert left is wanted and shared == 0
    assert keys.find(job.distinct.keys) == []
    assert len(keys) == 0


def test_a_later_batch_shares_the_keys_in_flight_and_asks_the_rest() -> None:
    owner, _ = entry(0, [1, 2, 3])  # 1, 2, 3 at 0, 1, 2
    request = Request(owner, np.array([1, 2]))  # asks 2 and 3
    keys = in_flight(request)
    assert len(keys) == 1
    later, _ = entry(1, [3, 4, 2, 3])  # 3, 4, 2 at 0, 1, 2
    left, shared = keys.share(later, np.arange(3))
    assert left.tolist() == [1] and shared == 2  # only 4 is asked
    [(job, positions, request_rows)] = request.subscribers
    assert job is later
    assert positions.tolist() == [0, 2]  # its keys 3 and 2 ...
    assert request_rows.tolist() == [1, 0]  # ... are the request's rows 1 (3) and 0 (2)
    assert request.shared_keys() == 2
    assert request.jobs() == [owner, later]


def test_sharing_makes_the_batch_expect_one_part_per_request() -> None:
    first, _ = entry(0, [1])
    second, _ = entry(1, [2])
    keys = in_flight(Request(first, np.array([0])), Request(second, np.array([0])))
    later, completed = entry(2, [2, 1, 5])
    left, shared = keys.share(later, np.arange(3))
    assert left.tolist() == [2] and shared == 2
    later.seal()  # the engine asks nothing more: it waits for the two shared requests
    assert completed == []
    later.settle()
    assert completed == []
    later.settle()
    assert completed == [2]


def test_only_the_wanted_positions_are_probed() -> None:
    owner, _ = entry(0, [1, 2, 3])
    request = Request(owner, np.array([0, 1, 2]))
    keys = in_flight(request)
    later, _ = entry(1, [1, 2, 3, 4])
    left, shared = keys.share(later, np.array([1, 3]))  # a cache knew 1 and 3
    assert left.tolist() == [3] and shared == 1
    [(_, positions, request_rows)] = request.subscribers
    assert positions.tolist() == [1] and request_rows.tolist() == [1]


def test_nothing_wanted_shares_nothing() -> None:
    owner, _ = entry(0, [1])
    request = Request(owner, np.array([0]))
    keys = in_flight(request)
    later, _ = entry(1, [1])
    left, shared = keys.share(later, np.zeros(0, dtype=np.int64))
    assert left.tolist() == [] and shared == 0 and request.subscribers == []


def test_no_key_in_common_shares_nothing() -> None:
    owner, _ = entry(0, [1, 2])
    request = Request(owner, np.array([0, 1]))
    keys = in_flight(request)
    later, completed = entry(1, [3, 4])
    wanted = np.arange(2)
    left, shared = keys.share(later, wanted)
    assert left.tolist() == [0, 1] and shared == 0 and request.subscribers == []
    later.seal()
    assert completed == [1]  # it expects no shared part


def test_find_tells_which_request_holds_which_keys() -> None:
    owner, _ = entry(0, [10, 20, 30, 40])
    first = Request(owner, np.array([0, 1]))  # 10, 20
    second = Request(owner, np.array([2, 3]))  # 30, 40
    keys = in_flight(first, second)
    probe = pa.RecordBatch.from_pydict({"k": pa.array([40, 99, 20, 10], pa.int64())})
    found = keys.find(probe)
    assert [(r, rows.tolist(), at.tolist()) for r, rows, at in found] == [
        (first, [2, 3], [1, 0]),
        (second, [0], [1]),
    ]
    assert keys.find(probe.slice(0, 0)) == []


def test_a_key_in_two_requests_is_shared_with_the_first() -> None:
    owner, _ = entry(0, [5])
    other, _ = entry(1, [5])
    first, second = Request(owner, np.array([0])), Request(other, np.array([0]))
    keys = in_flight(first, second)
    later, _ = entry(2, [5])
    left, shared = keys.share(later, np.arange(1))
    assert left.tolist() == [] and shared == 1
    assert len(first.subscribers) == 1 and second.subscribers == []


def test_a_discarded_request_is_no_longer_shared() -> None:
    owner, _ = entry(0, [1, 2])
    request = Request(owner, np.array([0, 1]))
    keys = in_flight(request)
    keys.discard(request)
    keys.discard(request)  # (twice: nothing happens)
    assert len(keys) == 0
    later, _ = entry(1, [1, 2])
    left, shared = keys.share(later, np.arange(2))
    assert left.tolist() == [0, 1] and shared == 0 and request.subscribers == []


def test_keys_are_made_only_when_a_batch_is_probed() -> None:
    made: list[int] = []
    owner, _ = entry(0, [1])
    request = Request(owner, np.array([0]))

    def make_keys() -> pa.RecordBatch:
        made.append(1)
        return request.keys()

    keys: InFlightKeys[Request] = InFlightKeys()
    keys.add(request, make_keys)
    assert made == []
    keys.share(entry(1, [1])[0], np.zeros(0, dtype=np.int64))
    assert made == []  # nothing wanted: nothing probed
    keys.share(entry(2, [1])[0], np.arange(1))
    assert made == [1]


def test_composite_keys_are_shared_when_every_part_is_equal() -> None:
    owner = composite_entry(0, [("a", 1), ("a", 2), ("b", 1)])
    request = Request(owner, np.arange(3))
    keys = in_flight(request)
    later = composite_entry(1, [("b", 2), ("a", 2), ("b", 1)])
    left, shared = keys.share(later, np.arange(len(later.distinct)))
    assert shared == 2
    asked = later.python_keys()
    assert [asked[p] for p in left.tolist()] == [("b", 2)]
    [(_, positions, request_rows)] = request.subscribers
    owner_keys = request.python_keys()
    assert [asked[p] for p in positions.tolist()] == [owner_keys[r] for r in request_rows.tolist()]


def test_deliver_hands_the_answer_to_the_owner_and_each_sharing_batch() -> None:
    owner, _ = entry(0, [1, 2, 3])
    request = Request(owner, np.array([0, 2]))  # asks 1 and 3
    keys = in_flight(request)
    later, _ = entry(1, [9, 3, 1])  # 9, 3, 1 at 0, 1, 2
    left, _ = keys.share(later, np.arange(3))
    assert left.tolist() == [0]
    answer = RecordAnswer([None, {"name": "three", "n": 3}], [1, 3], FIELDS)  # 1 missing
    missing = deliver(request, answer)
    assert missing == 2  # key 1: missing for the owner and for the later batch
    mine = gather(owner.parts, FIELDS)
    assert mine.key_index.tolist() == [2] and mine.values.to_pylist() == [{"name": "three", "n": 3}]
    theirs = gather(later.parts, FIELDS)
    assert theirs.key_index.tolist() == [1]  # placed at the later batch's position of 3
    assert theirs.values.to_pylist() == [{"name": "three", "n": 3}]


def test_deliver_with_no_subscriber_counts_the_owners_missing_keys() -> None:
    owner, _ = entry(0, [1, 2])
    request = Request(owner, np.array([0, 1]))
    answer = RecordAnswer([{"name": "one", "n": 1}, {"name": "two", "n": 2}], [1, 2], FIELDS)
    assert deliver(request, answer) == 0
    assert len(owner.parts) == 1 and owner.parts[0].positions.tolist() == [0, 1]
