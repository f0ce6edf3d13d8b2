"""The one keeper of what outlives a task (engine/kept/keeper.py): least recently used first,
pinned values never dropped, idle values past their limit expired, and one eviction policy by
count and by bytes, which the worker's clients, caches and identity keys all follow."""

from __future__ import annotations

import math
from collections.abc import Callable

from lookup_source.engine.kept.keeper import Keeper, Memo


def make(**settings: object) -> tuple[Keeper[str], list[str], list[float]]:
    now = [0.0]
    dropped: list[str] = []
    keeper: Keeper[str] = Keeper(
        clock=lambda: now[0],
        on_drop=lambda key, value: dropped.append(key),
        size_of=len,
        **settings,  # type: ignore[arg-type]
    )
    return keeper, dropped, now


def test_the_least_recently_used_value_that_no_task_pins_goes_first() -> None:
    keeper, dropped, _ = make(max_entries=2)
    for key in "abc":
        keeper.put(key, key * 10)
    keeper.use("a", pin=True)  # "a" is used again, and pinned
    assert keeper.evict() == 0 and dropped == ["b"]  # not "a": pinned; "b" is the oldest
    keeper.put("d", "d")
    keeper.evict()
    assert dropped == ["b", "c"] and sorted(keeper.keys()) == ["a", "d"]
    kept = keeper.get("a")
    assert kept is not None and kept.users == 1
    keeper.unpin(kept, "a")
    keeper.put("e", "e")
    keeper.evict()
    assert dropped == ["b", "c", "d"]  # "a" was used after "d" (its task handed it back)
    assert keeper.dropped == 3


def test_a_pinned_value_stays_even_past_every_limit() -> None:
    keeper, dropped, now = make(max_entries=1)
    for key in "ab":
        keeper.put(key, key, max_idle_s=1.0)
        keeper.use(key, pin=True)
    now[0] = 100.0
    keeper.evict(max_bytes=0)
    assert keeper.expire() == 0 and dropped == [] and len(keeper) == 2


def test_values_idle_past_their_own_limit_expire() -> None:
    keeper, dropped, now = make(max_entries=10)
    keeper.put("short", "x", max_idle_s=1.0)
    keeper.put("long", "y", max_idle_s=10.0)
    keeper.put("forever", "z")
    now[0] = 5.0
    assert keeper.idle() == ["short"]
    assert keeper.expire() == 1 and dropped == ["short"]
    now[0] = 50.0
    keeper.expire()
    assert dropped == ["short", "long"] and list(keeper.keys()) == ["forever"]
    assert keeper.get("forever") is not None and keeper.get("forever").max_idle_s == math.inf  # type: ignore[union-attr]


def test_by_bytes_small_values_go_for_the_count_only_and_protected_ones_stay() -> None:
    keeper, dropped, _ = make(max_entries=3)
    keeper.put("big", "x" * 100)
    keeper.put("small", "y")
    keeper.put("mine", "z" * 100)
    left = keeper.evict(max_bytes=150, protect=("mine",), small_bytes=10)
    assert dropped == ["big"] and left == 101  # "small" stays (only the count would drop it)
    keeper.put("more", "w")
    keeper.put("again", "v")  # four: one over the count
    keeper.evict(max_bytes=1000, protect=("mine",), small_bytes=10)
    assert dropped == ["big", "small"]  # for the count, small or not, oldest first
    assert list(keeper.keys()) == ["mine", "more", "again"]


def test_room_keeps_one_place_free_and_popped_values_are_not_dropped() -> None:
    keeper, dropped, _ = make(max_entries=2)
    keeper.put("a", "a")
    keeper.put("b", "b")
    keeper.evict(room=1)
    assert dropped == ["a"] and len(keeper) == 1
    popped = keeper.pop("b")
    assert popped is not None and popped.value == "b" and dropped == ["a"]
    keeper.put("c", "c")
    keeper.use("c", pin=True)
    keeper.put("d", "d")
    keeper.clear(pinned=False)
    assert dropped == ["a", "d"] and list(keeper.keys()) == ["c"]
    keeper.clear()
    assert dropped == ["a", "d", "c"] and len(keeper) == 0


def test_the_modules_example_runs() -> None:
    import doctest

    import lookup_source.engine.kept.keeper as keeper_module

    failed, tried = doctest.testmod(keeper_module)
    assert tried and not failed


def test_the_worker_keeps_its_clients_caches_and_identity_keys_in_keepers() -> None:
    from lookup_source.engine.kept.worker import Worker

    worker = Worker(sweep_every_s=0)
    try:
        assert isinstance(worker.caches._keeper, Keeper)
        assert isinstance(worker.identity_keys._keys._keeper, Keeper)  # (through a Memo)
        assert isinstance(worker.table_facts._answers._keeper, Keeper)
        assert isinstance(worker.clients()._kept, Keeper)
    finally:
        worker.close()


def test_a_memo_makes_each_value_once_and_keeps_only_what_it_is_told_to() -> None:
    memo: Memo[str] = Memo(max_entries=2, clock=lambda: 0.0)
    made: list[str] = []

    def make(value: str) -> Callable[[], str]:
        return lambda: made.append(value) or value

    assert memo.get("a", make("A")) == memo.get("a", make("again")) == "A"
    assert memo.get("b", make(""), keep=bool) == ""  # not kept: made again next time
    assert memo.get("b", make("B")) == "B"
    assert made == ["A", "", "B"] and len(memo) == 2
    memo.get("c", make("C"))  # over max_entries: the least recently used ("a") goes
    assert memo.get("a", make("A2")) == "A2" and len(memo) == 2
