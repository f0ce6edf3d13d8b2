"""The scan read by the ADBC driver (COPY into Arrow) against a real Postgres: the same rows and
values as asyncpg's cursor once in the declared types (as the engine puts them), the same
errors, and asyncpg's cursor where ADBC would differ."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import traceback
from typing import Any
from urllib.parse import urlsplit

import pytest
from asynclookup_postgres import arrow_scan
from asynclookup_postgres.arrow_scan import ArrowScan, libpq_uri
from asynclookup_postgres.client import PostgresLookupClient, inline

from lookup_source.connector_api.values import conform_matches
from lookup_source.errors import PermanentError, TransientError
from lookup_source.spark.plan import LookupPlan
from tests.servers import free_port

SCHEMA = (
    "id long, small int, score double, ratio float, active boolean, name string, born date, "
    "seen timestamp, seen_tz timestamp, blob binary"
)


@pytest.fixture
def typed(pg: Any, table_name: str) -> Any:
    pg(f"""CREATE TABLE {table_name} (id bigint PRIMARY KEY, small smallint, score double
        precision, ratio real, active boolean, name varchar(40), born date, seen timestamp,
        seen_tz timestamptz, blob bytea)""")
    pg(f"""INSERT INTO {table_name} SELECT g, g % 300, g / 3.0, g / 7.0, g % 2 = 0,
        'name ' || g || ' é', date '2000-01-01' + g, timestamp '2024-01-01 12:00' + g * interval
        '1 minute', timestamptz '2024-01-01 00:00+02' + g * interval '1 hour',
        decode(lpad(to_hex(g), 8, '0'), 'hex') FROM generate_series(-20, 2979) g""")
    pg(f"INSERT INTO {table_name} (id) VALUES (5000)")  # every value null
    pg(f"ANALYZE {table_name}")
    yield table_name
    pg(f"DROP TABLE IF EXISTS {table_name}")


def config(url: str, table: str, schema: str = SCHEMA, **options: str) -> Any:
    plan = LookupPlan.build(
        {"connector": "postgres", "url": url, "postgres.table": table, **options}, schema
    )
    return plan.connector_config()


def scan(conf: Any, parts: int, *, adbc: bool, splits: bool = True) -> list[dict[str, Any]]:
    """Every row of a scan in ``parts`` parts (key ranges, or by hash), as dicts; through ADBC
    or asyncpg's cursor."""

    async def run() -> list[dict[str, Any]]:
        client = PostgresLookupClient(conf)
        await client.open()
        rows: list[dict[str, Any]] = []
        try:
            ranges = await client.scan_splits(parts) if splits else None
            for part in range(parts):
                chunks = (
                    client.scan_arrow(part, parts, split=ranges[part])
                    if ranges
                    else client.scan_arrow(part, parts)
                )
                async for keys, found in chunks:
                    matches = conform_matches(found, client.value_fields)  # as the engine does
                    values = matches.values.to_pylist()
                    for row, index in enumerate(matches.key_index):
                        key = {n: keys.column(n)[int(index)].as_py() for n in keys.schema.names}
                        error = None if matches.errors is None else matches.errors[row].as_py()
                        rows.append({**key, **values[row], "error": error})
        finally:
            await client.close()
        return sorted(rows, key=lambda r: r["id"])

    available = arrow_scan.available
    if not adbc:
        arrow_scan.available = lambda: False  # type: ignore[assignment]
    try:
        return asyncio.run(run())
    finally:
        arrow_scan.available = available  # type: ignore[assignment]


def test_the_arrow_scan_reads_every_type_as_asyncpgs_cursor_does(
    postgres_srv: Any, typed: str, caplog: Any
) -> None:
    conf = config(postgres_srv.url, typed)
    with caplog.at_level(logging.INFO, logger="lookup_source"):
        through_adbc = scan(conf, 3, adbc=True)
    assert "through asyncpg's cursor" not in caplog.text  # ADBC read it
    through_asyncpg = scan(conf, 3, adbc=False)
    assert len(through_adbc) == 3_001
    assert through_adbc == through_asyncpg
    first = through_adbc[0]
    assert (first["id"], first["name"]) == (-20, "name -20 é")
    assert first["blob"] == b"\xff\xff\xff\xec"
    assert first["seen"].replace(tzinfo=None) == dt.datetime(2024, 1, 1, 11, 40)
    assert first["seen_tz"].replace(tzinfo=None) == dt.datetime(2023, 12, 31, 2)  # in UTC
    assert through_adbc[-1] == {"id": 5000, **{k: None for k in first if k != "id"}}
    # by hash as by ranges: every row once
    assert scan(conf, 4, adbc=True, splits=False) == through_adbc


def test_a_value_that_does_not_fit_its_type_is_that_rows_error_on_both_paths(
    postgres_srv: Any, pg: Any, table_name: str
) -> None:
    pg(f"CREATE TABLE {table_name} (id bigint PRIMARY KEY, n bigint)")
    pg(f"INSERT INTO {table_name} VALUES (1, 7), (2, 9000000000), (3, NULL)")
    conf = config(postgres_srv.url, table_name, "id long, n int")  # n declared 32-bit
    through_adbc = scan(conf, 1, adbc=True)
    assert through_adbc == scan(conf, 1, adbc=False)
    assert [(r["id"], r["n"]) for r in through_adbc] == [(1, 7), (2, None), (3, None)]
    assert through_adbc[0]["error"] is None and through_adbc[2]["error"] is None
    assert "9000000000" in through_adbc[1]["error"] and "'n'" in through_adbc[1]["error"]


def test_columns_adbc_reads_otherwise_go_through_asyncpgs_cursor(
    postgres_srv: Any, pg: Any, table_name: str, caplog: Any
) -> None:
    pg(f"CREATE TABLE {table_name} (id bigint PRIMARY KEY, amount numeric, doc jsonb)")
    pg(f"""INSERT INTO {table_name} VALUES (1, 1.25, '{{"a": 1}}'), (2, NULL, NULL)""")
    conf = config(postgres_srv.url, table_name, "id long, amount double, doc string")
    with caplog.at_level(logging.INFO, logger="lookup_source"):
        rows = scan(conf, 1, adbc=True)
    assert "a column's type is read by asyncpg only" in caplog.text
    assert [(r["id"], r["amount"], r["doc"]) for r in rows] == [
        (1, 1.25, '{"a": 1}'),
        (2, None, None),
    ]


def test_a_store_that_does_not_answer_fails_the_scan_as_a_transient_error(
    postgres_srv: Any, typed: str
) -> None:
    conf = config(postgres_srv.url, typed)

    async def run() -> None:
        client = PostgresLookupClient(conf)
        await client.open()
        try:
            await client._connect()  # the catalog read: the columns are known
            arrow = client._arrow_scan(f"SELECT 1 FROM {typed}", [])
            assert arrow is not None
            arrow.uri = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"
            with pytest.raises(TransientError, match="adbc_driver_manager"):
                async for _ in arrow.batches():
                    pass
        finally:
            await client.close()

    asyncio.run(run())


def test_a_login_the_server_refuses_is_permanent_and_its_password_never_shown(
    postgres_srv: Any,
) -> None:
    parts = urlsplit(postgres_srv.url)
    uri = f"postgresql://nosuchrole@{parts.hostname}:{parts.port}/postgres?password=Sup3rSecret"
    scan = ArrowScan(uri, "SELECT 1", ["k"], [])

    async def run() -> None:
        async for _ in scan.batches():
            pass

    with pytest.raises(PermanentError) as raised:
        asyncio.run(run())
    shown = "".join(traceback.format_exception(raised.value))
    assert 'role "nosuchrole" does not exist' in shown and "Sup3rSecret" not in shown


def test_the_libpq_uri_carries_the_password_and_tls_files(monkeypatch: Any) -> None:
    monkeypatch.setenv("PG_SECRET", "s3cr et&")
    monkeypatch.setenv("KEY_SECRET", "kp")
    url = "postgresql://app@db:5432/shop?application_name=x"
    assert libpq_uri(url, {}) == url
    with_password = libpq_uri(url, {"postgres.password.env": "PG_SECRET"})
    assert with_password == f"{url}&password=s3cr+et%26"
    tls = libpq_uri(
        url,
        {
            "postgres.tls.ca-file": "/ca.pem",
            "postgres.tls.cert-file": "/c.pem",
            "postgres.tls.key-file": "/k.pem",
            "postgres.tls.key-password.env": "KEY_SECRET",
        },
    )
    assert tls is not None
    assert "sslmode=verify-full&sslrootcert=%2Fca.pem&sslcert=%2Fc.pem&sslkey=%2Fk.pem" in tls
    assert tls.endswith("&sslpassword=kp")
    unchecked = libpq_uri(
        url, {"postgres.tls.ca-file": "/ca.pem", "postgres.tls.check-hostname": False}
    )
    assert unchecked is not None and "sslmode=verify-ca" in unchecked
    # TLS trusting the system's CAs, as asyncpg does: left to asyncpg
    assert libpq_uri(url, {"postgres.tls.check-hostname": False}) is None
    assert libpq_uri("mysql://db/x", {}) is None


def test_inline_writes_the_bounds_in_as_integers() -> None:
    query = "SELECT a FROM t WHERE k >= $1 AND k < $2 OR j = $12"
    bounds = [5, -7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 99]
    assert inline(query, bounds) == "SELECT a FROM t WHERE k >= 5 AND k < -7 OR j = 99"
    with pytest.raises((TypeError, ValueError)):
        inline("SELECT $1", ["1; DROP TABLE t"])
