"""A lookup's identity (engine/identity.py) covers what decides its answers, including what
a client library reads on its own and what a ``fetch=`` function reads at call time: two
lookups that could answer differently never share a kept client, a worker cache or the
shared tier."""

from __future__ import annotations

import os
import traceback
import types
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lookup_source.connector_api import ConnectorConfig, OptionSpec
from lookup_source.connector_api.options import declared_options
from lookup_source.connector_api.secrets import secret_values
from lookup_source.engine.kept.identity import LookupIdentity, function_state, implicit_inputs


def postgres(url: str = "postgresql://app@db/postgres") -> ConnectorConfig:
    return ConnectorConfig(
        connector="postgres",
        url=url,
        key_columns=("id",),
        value_columns=("name",),
        value_types=(pa.string(),),
        options={"postgres.table": "t"},
        key_types=(pa.int64(),),
    )


def identity_of(config: ConnectorConfig) -> str:
    from asynclookup_postgres import PostgresLookupClient

    implicit = implicit_inputs(PostgresLookupClient, config)
    return LookupIdentity.of(config, implicit=implicit).digest("tier")


@pytest.mark.parametrize(
    "variable", ["PGPASSWORD", "PGUSER", "PGDATABASE", "PGHOST", "PGSSLKEY", "PGSERVICE"]
)
def test_what_the_postgres_driver_reads_on_its_own_is_in_the_identity(
    variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, "tenant-a")
    first = identity_of(postgres())
    monkeypatch.setenv(variable, "tenant-b")
    assert identity_of(postgres()) != first
    monkeypatch.setenv(variable, "tenant-a")
    assert identity_of(postgres()) == first


def test_a_password_file_and_files_named_in_the_url_are_in_it_by_content(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    passfile = tmp_path / "pgpass"
    monkeypatch.setenv("PGPASSFILE", str(passfile))
    passfile.write_text("*:*:*:*:tenant-a")
    first = identity_of(postgres())
    passfile.write_text("*:*:*:*:tenant-b")
    assert identity_of(postgres()) != first
    key = tmp_path / "client.key"
    url = f"postgresql://app@db/postgres?sslmode=require&sslkey={key}"
    key.write_text("key of tenant a")
    first = identity_of(postgres(url))
    key.write_text("key of tenant b")
    assert identity_of(postgres(url)) != first


SETTINGS = {"token": "A"}
CONFIG_MODULE = types.ModuleType("tenant_config")
CONFIG_MODULE.TOKEN = "A"  # type: ignore[attr-defined]


class Api:
    token = "A"

    async def __call__(self, key: Any) -> Any:
        return {"name": f"{self.token}:{key}"}


async def by_dict(key: Any) -> Any:
    return {"name": f"{SETTINGS['token']}:{key}"}


async def by_module(key: Any) -> Any:
    return {"name": f"{CONFIG_MODULE.TOKEN}:{key}"}


async def by_environment(key: Any) -> Any:
    return {"name": f"{os.environ['TENANT_TOKEN']}:{key}"}


def test_what_a_function_reads_at_call_time_is_in_its_state(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = Api()
    functions = (by_dict, api, by_module, by_environment)
    monkeypatch.setenv("TENANT_TOKEN", "A")
    before = [function_state(f) for f in functions]
    SETTINGS["token"] = Api.token = CONFIG_MODULE.TOKEN = "B"  # type: ignore[attr-defined]
    monkeypatch.setenv("TENANT_TOKEN", "B")
    try:
        after = [function_state(f) for f in functions]
    finally:
        SETTINGS["token"] = Api.token = CONFIG_MODULE.TOKEN = "A"  # type: ignore[attr-defined]
    assert [a != b for a, b in zip(before, after)] == [True] * 4
    monkeypatch.setenv("OTHER_VARIABLE", "x")  # one the function does not name: no change
    monkeypatch.setenv("TENANT_TOKEN", "A")
    assert [function_state(f) for f in functions] == before


class _AcmeClient:
    """A third party's connector: it says which of its options are secrets and which hold
    URLs; the engine knows no connector's option names."""

    option_specs = (
        OptionSpec("acme.header.", str, None, "A header.", prefix=True, secret=True),
        OptionSpec("acme.mirror.url", str, None, "Another address.", url=True),
        OptionSpec("acme.table", str, None, "A table."),
    )


def test_the_lookups_own_secrets_are_known_for_texts_and_the_public_part_shows_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("API_TOKEN", "Bearer env-secret-value")
    config = ConnectorConfig(
        connector="acme",
        url="https://me:url-password@api/users/{key}?api_key=query-secret",
        key_columns=("id",),
        value_columns=("name",),
        value_types=(pa.string(),),
        options={
            "acme.header.authorization": "Bearer header-secret",
            "acme.header.x-token.env": "API_TOKEN",
            "acme.mirror.url": "https://u:mirror-password@api/batch?token=mirror-secret",
            "acme.table": "users",
        },
    )
    declared = declared_options(_AcmeClient)
    known = secret_values(config, declared)
    for secret in (
        "header-secret",
        "env-secret-value",
        "url-password",
        "query-secret",
        "mirror-password",
        "mirror-secret",
    ):
        assert secret in known, secret
    assert "users" not in known  # an option neither named nor declared a secret
    public = LookupIdentity.of(config, declared=declared).public
    for secret in ("header-secret", "url-password", "query-secret", "mirror-password"):
        assert secret not in public, (secret, public)
    assert "acme.table='users'" in public and "acme.header.authorization=(secret)" in public
    # what is declared secret is in the identity by its digest: another header, another lookup
    header = {**config.options, "acme.header.authorization": "Bearer other"}
    other = ConnectorConfig(**{**config.__dict__, "options": header})
    assert LookupIdentity.of(other, declared=declared).digest("cache") != LookupIdentity.of(
        config, declared=declared
    ).digest("cache")


def test_a_header_that_reads_like_a_word_is_not_taken_for_a_secret() -> None:
    config = ConnectorConfig("acme", None, ("id",), options={"acme.header.accept": "text/plain"})
    assert secret_values(config, declared_options(_AcmeClient)) == []


def test_a_task_keys_what_the_worker_keeps_by_the_function_and_the_tier_by_its_state() -> None:
    """Two function objects with equal state (arrays the state does not look into) never share
    a worker's cache, client or budget name; the shared tier, across jobs, knows a function by
    its state; a function whose state changes as it runs keeps one local identity."""
    from lookup_source.engine.kept.task_resources import task_identities
    from lookup_source.functions import LookupFunction
    from lookup_source.settings import CacheSettings, SharedCacheSettings
    from tests.fakes import make_options, make_spec

    memo: dict[Any, Any] = {}

    def make(values: pa.Array) -> Any:
        async def fetch(key: Any) -> Any:
            memo[key] = values  # state that changes as it runs
            return {"name": str(values[0])}

        return fetch

    tier = CacheSettings(max_rows=10, shared=SharedCacheSettings(url="redis://127.0.0.1:1/0"))
    spec = make_spec(make_options(cache=tier))
    functions = [LookupFunction.of(make(pa.array([1, 2]))), LookupFunction.of(make(pa.array([3])))]
    identities = []
    for function in functions:
        assert function is not None
        options = {**function.options(None), "fake.table": "t"}
        config = ConnectorConfig("function", None, ("k",), options=options)
        identities.append(task_identities(spec, config, function))
    one, other = identities
    assert one.local.digest("cache") != other.local.digest("cache")  # never one worker cache
    assert one.local.digest("budget") != other.local.digest("budget")
    assert one.shared is not None and other.shared is not None
    assert one.shared.public == other.shared.public  # (the tier: by state, across jobs)
    function = functions[0]
    assert function is not None
    options = {**function.options(None), "fake.table": "t"}
    config = ConnectorConfig("function", None, ("k",), options=options)
    memo["seen"] = 1
    again = task_identities(spec, config, function)
    assert again.local.digest("cache") == one.local.digest("cache")  # state moved: same


def test_lookups_whose_key_rules_differ_never_share_what_a_worker_keeps() -> None:
    """key.equality=spark drops the matches of other keys, on.unfit-key=miss makes a key the
    store cannot hold a miss: their answers differ from the store's own, so their clients,
    caches and shared tier are never another lookup's; the defaults keep the identity they had."""
    from lookup_source.engine.kept.task_resources import task_identities
    from lookup_source.settings import CacheSettings, KeySettings, SharedCacheSettings
    from tests.fakes import FakeClient, make_options, make_spec

    tier = CacheSettings(max_rows=10, shared=SharedCacheSettings(url="redis://127.0.0.1:1/0"))
    config = ConnectorConfig("fake", "fake://store", ("k",), options={"fake.table": "t"})
    identities = {
        rules: task_identities(
            make_spec(make_options(cache=tier, keys=KeySettings(*rules))), config, FakeClient
        )
        for rules in (("store", "error"), ("spark", "error"), ("store", "miss"), ("spark", "miss"))
    }
    for purpose in ("cache", "client"):
        digests = {rules: ids.local.digest(purpose) for rules, ids in identities.items()}
        assert len(set(digests.values())) == 4, purpose
    tiers = {ids.shared.public for ids in identities.values() if ids.shared is not None}
    assert len(tiers) == 4
    plain = task_identities(make_spec(make_options(cache=tier)), config, FakeClient)
    assert plain.local.public == identities[("store", "error")].local.public


def test_a_tasks_errors_hide_what_its_connector_declares_secret() -> None:
    """The task's redactor is made once, with its resources, from the client's configuration
    and its connector's declarations: a service that echoes a declared secret header (whose
    name says nothing of a secret) in its error page never puts it in the task's error."""
    from lookup_source.engine.runner import run_lookups
    from lookup_source.errors import LookupFailedError
    from lookup_source.testing.clock import VirtualTimeLoop
    from tests.fakes import FakeClient, key_batch, make_config, make_options, make_spec

    token = "zq81echoedroutingvalue77"  # its header declared secret; its name says nothing

    class EchoingAcme(FakeClient):
        name = "acme"
        option_specs = _AcmeClient.option_specs

        async def lookup(self, keys: Any) -> Any:
            header = self.config.options["acme.header.x-routing"]
            raise PermissionError(f"403 for request with x-routing: {header} (keys {list(keys)})")

    spec = make_spec(make_options(max_attempts=1))
    plain = make_config(spec)
    config = ConnectorConfig(
        connector="acme",
        url=plain.url,
        key_columns=plain.key_columns,
        value_columns=plain.value_columns,
        value_types=plain.value_types,
        options={"acme.header.x-routing": token, "acme.table": "users"},
    )
    with pytest.raises(LookupFailedError) as info:
        list(
            run_lookups(
                [key_batch([1, 2])],
                spec,
                config,
                client_factory=EchoingAcme,
                keep_client=False,
                loop_factory=VirtualTimeLoop,
            )
        )
    text = str(info.value)
    assert "403 for request with x-routing" in text and "failed for 2 keys" in text
    assert token not in text and "***" in text
    printed = "".join(traceback.format_exception(info.value))  # what Spark sends the driver
    assert token not in printed and "builtins.PermissionError: 403 for request" in printed
