"""A user's fetch function known by its state (lookup_source.engine.kept.function_state): the
same digest for the same code and data in every process, another one whenever what decides
its answers differs (closure, defaults, globals it reads, environment variables it names, the
object a method or callable carries, a partial's arguments), and no endless walk of a cycle."""

from __future__ import annotations

import functools
import os
from typing import Any

import pytest

from lookup_source.engine.kept.function_state import function_state

TABLE: dict[int, str] = {1: "one"}
"""Data a module-level function reads."""

TOKEN_VARIABLE = "ASYNCLOOKUP_FUNCTION_STATE_TOKEN"


def reads_the_table(key: int) -> str | None:
    return TABLE.get(key)


def reads_the_environment(key: int) -> str:
    return os.environ["ASYNCLOOKUP_FUNCTION_STATE_TOKEN"] + str(key)


def reads_nothing(key: int) -> int:
    return key


def closure_over(value: Any) -> Any:
    def fetch(key: int) -> Any:
        return value

    return fetch


class Fetcher:
    """A callable object: known by its class's code and its attributes."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self.token = token

    def __call__(self, key: int) -> str:
        return f"{self.url}/{key}?{self.token}"

    def fetch(self, key: int) -> str:
        return self(key)


class Slotted:
    __slots__ = ("token",)

    def __init__(self, token: str) -> None:
        self.token = token

    def __call__(self, key: int) -> str:
        return self.token


def test_the_digest_is_stable_and_of_sha256_size() -> None:
    first = function_state(reads_nothing)
    assert isinstance(first, bytes) and len(first) == 32
    assert function_state(reads_nothing) == first
    assert function_state(reads_the_table) != first  # other code


def test_closures_differ_by_the_values_they_hold() -> None:
    assert function_state(closure_over("a")) == function_state(closure_over("a"))
    assert function_state(closure_over("a")) != function_state(closure_over("b"))
    assert function_state(closure_over([1, 2])) != function_state(closure_over((1, 2)))
    assert function_state(closure_over(1)) != function_state(closure_over("1"))  # by type too


def test_default_arguments_count() -> None:
    def with_default(key: int, region: str = "eu") -> str:
        return region

    def with_other_default(key: int, region: str = "us") -> str:
        return region

    with_other_default.__qualname__ = with_default.__qualname__
    assert function_state(with_default) != function_state(with_other_default)


def test_the_globals_a_function_reads_count(monkeypatch: pytest.MonkeyPatch) -> None:
    before = function_state(reads_the_table)
    unrelated = function_state(reads_nothing)
    monkeypatch.setitem(TABLE, 2, "two")
    assert function_state(reads_the_table) != before
    assert function_state(reads_nothing) == unrelated  # a global it does not read


def test_the_environment_variables_a_function_names_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(TOKEN_VARIABLE, raising=False)
    unset = function_state(reads_the_environment)
    monkeypatch.setenv(TOKEN_VARIABLE, "first")
    first = function_state(reads_the_environment)
    monkeypatch.setenv(TOKEN_VARIABLE, "second")
    second = function_state(reads_the_environment)
    assert len({unset, first, second}) == 3
    monkeypatch.setenv("ASYNCLOOKUP_SOME_OTHER_VARIABLE", "x")  # one it does not name
    assert function_state(reads_the_environment) == second


def test_callable_objects_and_bound_methods_are_known_by_their_attributes() -> None:
    a, also_a, b = (
        Fetcher("https://a", "tokA"),
        Fetcher("https://a", "tokA"),
        Fetcher("https://b", "tokB"),
    )
    assert function_state(a) == function_state(also_a)
    assert function_state(a) != function_state(b)
    assert function_state(a.fetch) == function_state(also_a.fetch)
    assert function_state(a.fetch) != function_state(b.fetch)
    assert function_state(a.fetch) != function_state(a)  # a method is not the object
    assert function_state(Slotted("x")) == function_state(Slotted("x"))
    assert function_state(Slotted("x")) != function_state(Slotted("y"))  # its slots count


def test_a_class_attribute_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    before = function_state(Fetcher("https://a", "tokA"))
    monkeypatch.setattr(Fetcher, "region", "eu", raising=False)
    assert function_state(Fetcher("https://a", "tokA")) != before


def test_a_partial_is_known_by_its_function_and_arguments() -> None:
    def fetch(key: int, region: str) -> str:
        return region

    eu = functools.partial(fetch, region="eu")
    assert function_state(eu) == function_state(functools.partial(fetch, region="eu"))
    assert function_state(eu) != function_state(functools.partial(fetch, region="us"))
    assert function_state(eu) != function_state(fetch)


def test_containers_of_any_shape_are_walked_and_a_cycle_ends() -> None:
    cycle: list[Any] = [1]
    cycle.append(cycle)
    assert function_state(closure_over(cycle)) == function_state(closure_over(cycle))
    deep: Any = "leaf"
    for _ in range(50):  # deeper than is followed: ends too
        deep = [deep]
    assert len(function_state(closure_over(deep))) == 32
    assert function_state(closure_over({"b": 2, "a": 1})) == function_state(
        closure_over({"a": 1, "b": 2})
    )  # a mapping by its items, whatever their order
    assert function_state(closure_over({3, 1, 2})) == function_state(closure_over({1, 2, 3}))
    assert function_state(closure_over({1, 2})) != function_state(closure_over({1, 3}))


def test_a_large_container_is_known_by_its_size_and_first_items() -> None:
    size = 10_001
    table = list(range(size))
    changed_late = [*table[:-1], -1]  # beyond the items taken in
    changed_early = [-1, *table[1:]]
    longer = [*table, 0]
    digest = function_state(closure_over(table))
    assert function_state(closure_over(changed_late)) == digest
    assert function_state(closure_over(changed_early)) != digest
    assert function_state(closure_over(longer)) != digest
