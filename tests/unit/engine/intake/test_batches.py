"""A queue entry (an input batch on its way,
:class:`~lookup_source.engine.intake.batches.BatchEntry`) owns its completion: told how many parts
to expect, it hears each end and completes exactly once, after the engine has sealed it — never
early while a part is still being asked, never twice."""

from __future__ import annotations

import numpy as np
import pytest

from lookup_source.engine.intake.batches import BatchEntry
from lookup_source.engine.request.answers import Part
from tests.fakes import key_batch, make_options, make_spec


def entry() -> tuple[BatchEntry, list[int]]:
    completed: list[int] = []
    spec = make_spec(make_options())
    job = BatchEntry.of(
        7, key_batch([1, 2, 2, None, 3]), spec, ["k"], lambda j: completed.append(j.number)
    )
    return job, completed


def test_an_entry_with_nothing_to_ask_completes_when_sealed() -> None:
    job, completed = entry()
    assert len(job.distinct) == 3 and not job.completed
    job.seal()
    assert completed == [7] and job.completed


def test_an_entry_completes_once_after_the_seal_and_its_last_part() -> None:
    job, completed = entry()
    job.expect(1)  # a request it shares, answered before the engine is done with it
    job.settle()
    assert completed == [] and not job.completed  # not sealed: more may be asked
    job.expect(2)  # its own two requests
    job.seal()
    job.settle()
    assert completed == []
    job.receive(Part(np.array([0]), None))  # type: ignore[arg-type]
    job.settle()
    assert completed == [7] and len(job.parts) == 1
    with pytest.raises(RuntimeError, match="batch 7 is complete"):
        job.expect()
    job.settle()  # a stray end after completion never completes it again
    assert completed == [7]
