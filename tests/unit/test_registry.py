"""Finding connectors: built-ins, module:Class and entry points."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

from lookup_source import registry
from lookup_source.connectors.redis_client import RedisLookupClient
from lookup_source.errors import ConnectorNotFoundError
from lookup_source.options import parse_options
from tests.fakes import FakeClient


def test_builtin_by_name_any_case() -> None:
    assert registry.resolve_connector("Redis") is RedisLookupClient


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
        ("tests.fakes:FakeStore", "is not a subclass of lookup_source.connectors.LookupClient"),
        (":Client", "is not of the form package.module:Class"),
    ],
)
def test_errors_name_the_connector(name: str, message: str) -> None:
    with pytest.raises(ConnectorNotFoundError, match=message) as info:
        registry.resolve_connector(name)
    assert info.value.option == "connector"
