"""Finding connectors: entry points (the built-in ones too), module:Class, hints."""

from __future__ import annotations

from collections.abc import Iterator
from importlib.metadata import EntryPoint

import pytest
from asynclookup_redis import RedisLookupClient

from lookup_source import registry
from lookup_source.errors import ConnectorNotFoundError
from lookup_source.settings import parse_options
from tests.fakes import FakeClient


@pytest.fixture(autouse=True)
def fresh_entry_points() -> Iterator[None]:
    registry._installed.cache_clear()
    yield
    registry._installed.cache_clear()


def test_builtin_by_name_any_case() -> None:
    assert registry.resolve_connector("Redis") is RedisLookupClient


def test_builtin_connectors_are_registered_as_entry_points() -> None:
    """The first-party connectors are found the way a third party's are."""
    points = {ep.name: ep.value for ep in registry.entry_points(group="asynclookup.connectors")}
    assert points["redis"] == "asynclookup_redis:RedisLookupClient"
    assert points["http"] == "asynclookup_http:HttpLookupClient"
    assert points["postgres"] == "asynclookup_postgres:PostgresLookupClient"
    assert set(registry.installed_connectors()) >= {"redis", "http", "postgres"}


def test_first_party_without_metadata_is_found_by_its_module(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A connector zipped with --py-files has no distribution metadata on the executors."""
    monkeypatch.setattr(registry, "entry_points", lambda group: [])
    assert registry.resolve_connector("redis") is RedisLookupClient


def test_missing_first_party_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "entry_points", lambda group: [])
    monkeypatch.setitem(
        registry.FIRST_PARTY,
        "redis",
        registry.FirstParty("redis", "asynclookup_missing_x:Client", "asynclookup-redis"),
    )
    with pytest.raises(ConnectorNotFoundError) as info:
        registry.resolve_connector("redis")
    assert "install it with pip install ./connectors/redis from a clone of asynclookup" in str(
        info.value
    )
    assert info.value.option == "connector"


def test_module_and_class() -> None:
    assert registry.resolve_connector("tests.fakes:FakeClient") is FakeClient
    opts = parse_options({"connector": "tests.fakes:FakeClient"})
    assert opts.batch_size == FakeClient.default_batch_size


def test_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_entry_points(group: str) -> list[EntryPoint]:
        assert group == "asynclookup.connectors"
        return [EntryPoint("dict", "tests.fakes:FakeClient", group)]

    monkeypatch.setattr(registry, "entry_points", fake_entry_points)
    assert registry.resolve_connector("dict") is FakeClient
    assert "dict" in registry.available_connectors()


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("nosuch", "unknown connector 'nosuch'"),
        ("tests.fakes:Nope", "has no attribute 'Nope'"),
        ("no_such_module_x:Client", "No module named 'no_such_module_x'"),
        ("tests.fakes:FakeStore", "is not a subclass of lookup_source.connector_api.LookupClient"),
        (":Client", "is not of the form package.module:Class"),
    ],
)
def test_errors_name_the_connector(name: str, message: str) -> None:
    with pytest.raises(ConnectorNotFoundError, match=message) as info:
        registry.resolve_connector(name)
    assert info.value.option == "connector"
