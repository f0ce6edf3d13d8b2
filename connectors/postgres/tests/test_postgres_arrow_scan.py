"""The scan read by the ADBC driver (COPY into Arrow) against a real Postgres: the same rows and
values as asyncpg's cursor once in the declared types (as the engine puts them), the same
errors, and asyncpg's cursor where ADBC would differ."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
import traceback
from typing import Any
from urllib.parse import urlsplit

import pytest
from asynclookup_postgres import arrow_scan
from asynclookup_postgres.arrow_scan import ArrowScan, libpq_uri
from asynclookup_postgres.client import PostgresLookupClient
from asynclookup_postgres.query import scan_filter

from lookup_source.connector_api.values import conform_matches
from lookup_source.errors import ConnectorError, PermanentError, TransientError
from lookup_source.spark.plan import LookupPlan
from tests.servers import free_port

SCHEMA = "id long, small int, score double, ratio float, active boolean, name string, blob binary"


@pytest.fixture
def typed(pg: Any, table_name: str) -> Any:
    pg(f"""CREATE TABLE {table_name} (id bigint PRIMARY KEY, small smallint, score double
        precision, ratio real, active boolean, name varchar(40), blob bytea)""")
    pg(f"""INSERT INTO {table_name} SELECT g, g % 300, g / 3.0, g / 7.0, g % 2 = 0,
        'name ' || g || ' é + a%20b', decode(lpad(to_hex(g), 8, '0'), 'hex')
        FROM generate_series(-20, 2979) g""")
    pg(f"INSERT INTO {table_name} (id) VALUES (5000)")  # every value null
    pg(f"ANALYZE {table_name}")
    yield table_name
    pg(f"DROP TABLE IF EXISTS {table_name}")


async def drain(scan: ArrowScan) -> None:
    """Read ``scan`` to its end."""
    async for _ in scan.batches():
        pass


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
    assert (first["id"], first["name"]) == (-20, "name -20 é + a%20b")
    assert first["blob"] == b"\xff\xff\xff\xec"
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
    """numeric and json, and dates and timestamps: the driver turns infinity into garbage."""
    pg(f"""CREATE TABLE {table_name} (id bigint PRIMARY KEY, amount numeric, doc jsonb,
        valid_to date, seen timestamp)""")
    pg(f"""INSERT INTO {table_name} VALUES (1, 1.25, '{{"a": 1}}', 'infinity', '-infinity'),
        (2, NULL, NULL, '2024-02-29', '2024-01-01 12:00')""")
    conf = config(
        postgres_srv.url,
        table_name,
        "id long, amount double, doc string, valid_to date, seen timestamp",
    )
    with caplog.at_level(logging.INFO, logger="lookup_source"):
        rows = scan(conf, 1, adbc=True)
    assert "a column's type is read by asyncpg only" in caplog.text
    assert rows == scan(conf, 1, adbc=False)
    assert [(r["id"], r["amount"], r["doc"]) for r in rows] == [
        (1, 1.25, '{"a": 1}'),
        (2, None, None),
    ]
    assert rows[1]["valid_to"] == dt.date(2024, 2, 29)
    assert rows[0]["valid_to"] in (None, dt.date(9999, 12, 31))  # never a date from garbage


def test_a_quoted_name_holding_a_dollar_reads_its_own_table(
    postgres_srv: Any, pg: Any, table_name: str
) -> None:
    """The bounds are written in where the query is built, never replaced in its text."""
    odd, other = f'"{table_name}$1"', f"{table_name}4"
    pg(f'CREATE TABLE {odd} (id bigint PRIMARY KEY, "k$1" text)')
    pg(f'CREATE TABLE {other} (id bigint PRIMARY KEY, "k$1" text)')
    pg(f"INSERT INTO {odd} VALUES (1, 'mine'), (2, 'mine too')")
    pg(f"INSERT INTO {other} VALUES (99, 'another table')")
    try:
        conf = config(postgres_srv.url, f"{table_name}$1", "id long, `k$1` string")
        for splits in (True, False):
            rows = scan(conf, 4, adbc=True, splits=splits)
            assert [(r["id"], r["k$1"]) for r in rows] == [(1, "mine"), (2, "mine too")]
    finally:
        pg(f"DROP TABLE {odd}")
        pg(f"DROP TABLE {other}")


def test_a_store_that_does_not_answer_fails_the_scan_as_a_transient_error(
    postgres_srv: Any, typed: str
) -> None:
    conf = config(postgres_srv.url, typed)

    async def run() -> None:
        client = PostgresLookupClient(conf)
        await client.open()
        try:
            await client._connect()  # the catalog read: the columns are known
            arrow = client._arrow_scan(f"SELECT 1 FROM {typed}")
            assert arrow is not None
            dead = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"
            arrow.target = libpq_uri(dead, {})
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
    scan = ArrowScan(libpq_uri(uri, {}), "SELECT 1", ["k"], [])

    with pytest.raises(PermanentError) as raised:
        asyncio.run(drain(scan))
    shown = "".join(traceback.format_exception(raised.value))
    assert 'role "nosuchrole" does not exist' in shown and "Sup3rSecret" not in shown


def test_the_libpq_uri_carries_the_password_and_tls_files(monkeypatch: Any) -> None:
    monkeypatch.setenv("PG_SECRET", "s3cr et&+")
    monkeypatch.setenv("KEY_SECRET", "kp")
    url = "postgresql://app@db:5432/shop?application_name=a%20b"
    plain = libpq_uri(url, {}, timeout_s=7.5)
    assert plain.uri == (
        "postgresql://db:5432/shop?application_name=a%20b&user=app&client_encoding=UTF8"
        "&options=-c%20default_transaction_read_only%3Don&connect_timeout=8&keepalives=1"
    )
    with_password = libpq_uri(url, {"postgres.password.env": "PG_SECRET"})
    assert with_password.uri is not None and "&password=s3cr%20et%26%2B&" in with_password.uri
    assert with_password.secrets == ("s3cr et&+",)
    in_url = libpq_uri("postgresql://u:Sup3r%25zz@h/db", {})
    assert in_url.uri is not None and "password=Sup3r%25zz" in in_url.uri  # decoded, re-encoded
    tls = libpq_uri(
        url,
        {
            "postgres.tls.ca-file": "/c a.pem",
            "postgres.tls.cert-file": "/c.pem",
            "postgres.tls.key-file": "/k.pem",
            "postgres.tls.key-password.env": "KEY_SECRET",
        },
    )
    assert tls.uri is not None
    assert (
        "sslmode=verify-full&sslrootcert=%2Fc%20a.pem&sslcert=%2Fc.pem&sslkey=%2Fk.pem" in tls.uri
    )
    assert "&sslpassword=kp&" in tls.uri and tls.secrets == ("kp",)
    unchecked = libpq_uri(
        url, {"postgres.tls.ca-file": "/ca.pem", "postgres.tls.check-hostname": False}
    )
    assert unchecked.uri is not None and "sslmode=verify-ca" in unchecked.uri
    socket = libpq_uri("postgresql:///db?host=/var/run/postgresql", {})
    assert socket.uri is not None and socket.uri.startswith("postgresql:///db?host=%2Fvar")
    # what libpq would read otherwise than asyncpg: left to asyncpg, with the reason
    assert "system's CAs" in libpq_uri(url, {"postgres.tls.check-hostname": False}).why
    assert "search_path" in libpq_uri("postgresql://h/db?search_path=app", {}).why
    assert libpq_uri("mysql://db/x", {}).uri is None
    monkeypatch.delenv("KEY_SECRET")
    missing = {"postgres.tls.ca-file": "/ca.pem", "postgres.tls.cert-file": "/c.pem"}
    missing["postgres.tls.key-password.env"] = "KEY_SECRET"
    assert libpq_uri(url, missing).why == "KEY_SECRET is not set"


def test_a_password_libpq_cannot_parse_is_never_shown(postgres_srv: Any) -> None:
    parts = urlsplit(postgres_srv.url)
    target = libpq_uri(f"postgresql://u:Sup3rSecret%zz@{parts.hostname}:{parts.port}/x", {})
    target = dataclasses.replace(target, uri=target.uri.replace("%25zz", "%zz"))  # as given
    scan = ArrowScan(target, "SELECT 1", ["k"], [])

    with pytest.raises(ConnectorError) as raised:
        asyncio.run(drain(scan))
    shown = "".join(traceback.format_exception(raised.value))
    assert "Sup3rSecret" not in shown, shown


def test_the_scan_filter_writes_bounds_as_parameters_or_integers() -> None:
    assert scan_filter('"k"', (None, 5), 0, 2) == (' WHERE ("k" < $1 OR "k" IS NULL)', [5])
    assert scan_filter('"k"', (5, 9), 1, 3, literal=True) == (' WHERE "k" >= 5 AND "k" < 9', [])
    assert scan_filter('"k"', (9, None), 2, 3) == (' WHERE "k" >= $1', [9])
    assert scan_filter('"k"', None, 1, 1) == ("", [])
    hashed = scan_filter('"k$1"', None, 3, 4, literal=True)[0]
    assert hashed.endswith(", 4) = 3") and '"k$1"' in hashed
    with pytest.raises((TypeError, ValueError)):
        scan_filter('"k"', ("1; DROP TABLE t", None), 0, 2, literal=True)  # type: ignore[arg-type]


def test_no_size_is_estimated_for_a_key_that_compares_otherwise_in_postgres(
    postgres_srv: Any, pg: Any, table_name: str
) -> None:
    """A uuid key declared a string in Spark: a scan joined by Spark would miss the keys a
    lookup matches (upper case), so strategy=auto gets no size and keeps lookups."""
    pg(f"CREATE TABLE {table_name} (id uuid PRIMARY KEY, name text)")
    conf = config(postgres_srv.url, table_name, "id string, name string")
    assert PostgresLookupClient.exact_key_match(conf)  # the Spark types alone cannot tell

    async def estimate() -> Any:
        client = PostgresLookupClient(conf)
        await client.open()
        try:
            return await client.estimate_rows()
        finally:
            await client.close()

    with pytest.raises(PermanentError, match=r"key column's type \(uuid\) compares otherwise"):
        asyncio.run(estimate())


def test_a_connection_cut_mid_scan_fails_the_scan_never_ends_it_short(
    postgres_srv: Any, pg: Any, table_name: str, monkeypatch: Any
) -> None:
    """A scan whose server goes away between two batches raises (Spark then retries the task):
    it never ends as if the table had no more rows."""
    pg(f"CREATE TABLE {table_name} (id bigint PRIMARY KEY, name text)")
    pg(f"INSERT INTO {table_name} SELECT g, repeat('x', 200) FROM generate_series(1, 200000) g")
    monkeypatch.setattr(arrow_scan, "BATCH_BYTES", 64 << 10)  # many batches
    conf = config(postgres_srv.url, table_name, "id long, name string")

    async def run() -> int:
        client = PostgresLookupClient(conf)
        await client.open()
        seen = 0
        try:
            async for keys, _ in client.scan_arrow(0, 1):
                seen += keys.num_rows
                if seen == keys.num_rows:  # after the first batch: cut the scan's connection
                    await asyncio.to_thread(
                        pg,
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE query LIKE 'COPY%' AND pid <> pg_backend_pid()",
                    )
        finally:
            await client.close()
        return seen

    # libpq says it on one line ("terminating connection...") or over several ("server closed
    # the connection unexpectedly\n\tThis probably means the server terminated..."), by version
    with pytest.raises(ConnectorError, match=r"(?s)adbc_driver_manager .*(terminat|closed)"):
        seen = asyncio.run(run())
        pytest.fail(f"the scan ended after {seen:,} of 200,000 rows without an error")
