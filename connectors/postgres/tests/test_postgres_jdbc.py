"""The Postgres connector's options as Spark's JDBC reader's (pgjdbc): the URL, the password
(from the URL, the connector's option or libpq's PGPASSWORD), TLS, how the read is cut, and
each case that has no faithful JDBC form, with its reason."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from asynclookup_postgres.client import PostgresLookupClient

from lookup_source.connector_api import ConnectorConfig, JdbcUnavailable


def config(url: str, keys: tuple[str, ...] = ("id",), **options: Any) -> ConnectorConfig:
    types = tuple(pa.string() if k.startswith("s") else pa.int64() for k in keys)
    return ConnectorConfig(
        connector="postgres",
        url=url,
        key_columns=keys,
        value_columns=("name",),
        value_types=(pa.string(),),
        key_types=types,
        options={"postgres.table": "public.Users", **options},
    )


def jdbc(url: str, keys: tuple[str, ...] = ("id",), **options: Any) -> Any:
    return PostgresLookupClient.jdbc_table(config(url, keys, **options))


def test_the_url_and_password_become_the_drivers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGPASSWORD", raising=False)
    table = jdbc("postgresql://app:p%40ss@db.example:6543/shop?application_name=etl")
    assert table.url == "jdbc:postgresql://db.example:6543/shop"  # no secret in the URL
    assert table.table == '"public"."users"' and table.driver == "org.postgresql.Driver"
    assert table.properties == {"user": "app", "password": "p@ss", "ApplicationName": "etl"}
    assert table.partition_column == '"id"' and table.hash_predicate is None
    assert "p@ss" not in repr(table)
    monkeypatch.setenv("SHOP_PW", "from-env")
    table = jdbc("postgresql://app@[::1]/shop", **{"postgres.password.env": "SHOP_PW"})
    assert table.url == "jdbc:postgresql://[::1]:5432/shop"
    assert table.properties["password"] == "from-env"
    monkeypatch.setenv("PGPASSWORD", "libpq")  # as libpq (and asyncpg) read it
    assert jdbc("postgresql://app@h/shop").properties["password"] == "libpq"
    assert jdbc("postgresql://app@h").url.endswith("/app")  # libpq's database: the user's


def test_a_key_that_is_not_one_integer_is_cut_by_a_hash() -> None:
    text = jdbc("postgresql://app@h/db", keys=("sku",))
    assert text.partition_column is None
    assert text.hash_predicate == 'mod(abs(hashtext(("sku")::text)::bigint), {parts}) = {part}'
    pair = jdbc("postgresql://app@h/db", keys=("tenant", "id"))
    assert pair.hash_predicate is not None and 'row("tenant", "id")' in pair.hash_predicate


def test_tls_options_map_to_pgjdbcs(monkeypatch: pytest.MonkeyPatch) -> None:
    table = jdbc("postgresql://app@h/db", **{"postgres.tls.ca-file": "/etc/ca.pem"})
    assert table.properties["sslmode"] == "verify-full"
    assert table.properties["sslrootcert"] == "/etc/ca.pem"
    loose = jdbc(
        "postgresql://app@h/db",
        **{"postgres.tls.ca-file": "/etc/ca.pem", "postgres.tls.check-hostname": False},
    )
    assert loose.properties["sslmode"] == "verify-ca"
    monkeypatch.setenv("KEY_PW", "k3y")
    mutual = jdbc(
        "postgresql://app@h/db",
        **{
            "postgres.tls.ca-file": "/etc/ca.pem",
            "postgres.tls.cert-file": "/etc/client.pem",
            "postgres.tls.key-file": "/etc/client.key",
            "postgres.tls.jdbc-key-file": "/etc/client.pk8",
            "postgres.tls.key-password.env": "KEY_PW",
        },
    )
    assert mutual.properties["sslcert"] == "/etc/client.pem"
    assert mutual.properties["sslkey"] == "/etc/client.pk8"
    assert mutual.properties["sslpassword"] == "k3y"
    # the URL's own settings win over the options'
    url = "postgresql://app@h/db?sslmode=require&sslrootcert=/u/ca.pem"
    given = jdbc(url, **{"postgres.tls.ca-file": "/etc/ca.pem"}).properties
    assert given["sslmode"] == "require" and given["sslrootcert"] == "/u/ca.pem"


@pytest.mark.parametrize(
    ("url", "options", "reason"),
    [
        ("postgresql://app@h/db?target_session_attrs=any", {}, "'target_session_attrs'"),
        ("postgresql://app@h1,h2/db", {}, "several"),
        ("postgresql:///db?host=/var/run/postgresql", {}, "no host"),
        ("redis://h/0", {}, "not a postgresql:// URL"),
        ("postgresql://app@h/db", {"postgres.tls.cert-file": "/c.pem"}, "system's CAs"),
        (
            "postgresql://app@h/db",
            {
                "postgres.tls.ca-file": "/ca.pem",
                "postgres.tls.cert-file": "/c.pem",
                "postgres.tls.key-file": "/c.key",
            },
            "not PEM",
        ),
        ("postgresql://app@h/db?sslkey=/c.pem", {}, "not PEM"),
    ],
)
def test_what_has_no_jdbc_form_says_why(url: str, options: dict[str, Any], reason: str) -> None:
    with pytest.raises(JdbcUnavailable, match=reason):
        jdbc(url, **options)


def test_a_custom_query_has_no_table_to_read() -> None:
    query = config("postgresql://app@h/db")
    query.options.pop("postgres.table")
    query.options["postgres.query"] = "SELECT id, name FROM users WHERE id = ANY($1)"
    with pytest.raises(JdbcUnavailable, match="postgres.query have no table"):
        PostgresLookupClient.jdbc_table(query)
