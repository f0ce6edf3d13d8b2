"""The bench's quota service (:mod:`lookup_source.bench.quota`): what it counts, what it
refuses, and how late its own loop ran (a test's allowance for a busy machine)."""

from __future__ import annotations

import time
import urllib.error
import urllib.request

from lookup_source.bench.quota import QuotaService
from tests.helpers import waited_for


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def test_it_counts_costs_refuses_past_its_rate_and_measures_its_own_lateness() -> None:
    with QuotaService(rate=3, latency_s=0.0, cost_of=lambda key: key % 3 + 1) as service:
        url = service.base_url + "/users/{}"
        statuses = [_get(url.format(key)) for key in (1, 2, 3, 4)]
        assert statuses == [200, 200, 200, 429]  # the fourth within one second: over rate=3
        stats = service.stats()
        assert stats["requests"] == 3 and stats["refused"] == 1
        assert stats["most_in_1s"] == 3 and stats["most_cost_in_1s"] == 2 + 3 + 1
        assert stats["late_s"] < 0.5  # an idle service's loop wakes on time, or about
        loop = service._loop
        assert loop is not None
        loop.call_soon_threadsafe(time.sleep, 0.3)  # its loop held, as a busy machine would
        waited_for(lambda: service.late_s >= 0.25, 10)
        service.reset(phase="next")
        assert service.stats()["late_s"] < 0.25 and service.stats()["requests"] == 0


def test_a_refusal_is_explained_only_by_lateness_within_its_own_second() -> None:
    service = QuotaService(rate=10)  # (not started: its counts are set by hand)
    service.refusals = [10.0, 10.1, 10.2]
    assert service.unexplained_refusals() == 3  # a loop on time explains none
    service.late_ticks = [(5.0, 0.5)]  # late, but seconds before
    assert service.unexplained_refusals() == 3
    service.late_ticks = [(10.05, 0.3)]  # 0.3 s late within: 10 x 1.02 x 0.3 + 1 = 4 allowed
    assert service.unexplained_refusals() == 0
    service.late_ticks = [(10.05, 0.1)]  # 2 allowed: the third refusal of the second is not
    assert service.unexplained_refusals() == 1
    service.late_ticks = [(10.25, 0.015)]  # (the tick after, too little to explain any)
    assert service.unexplained_refusals() == 3


def test_its_stats_count_each_refusal_on_an_idle_loop_as_unexplained() -> None:
    with QuotaService(rate=2, latency_s=0.0) as service:
        url = service.base_url + "/users/{}"
        began = time.monotonic()
        assert [_get(url.format(key)) for key in (1, 2, 3)] == [200, 200, 429]
        stats = service.stats()
        assert stats["refused"] == 1 and began <= service.refusals[0] <= time.monotonic()
        if not service.late_ticks:  # (a busy machine's late tick may explain it)
            assert stats["unexplained_refusals"] == 1
