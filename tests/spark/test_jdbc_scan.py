"""strategy=scan and broadcast through Spark's own JDBC reader (``scan.reader``), against the real
Postgres (and one with TLS): the same rows as lookups on every type, the choice and its reason,
the password never in a plan, and the data source where the driver is not there."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lookup_source import OptionError, lookup_join, lookup_metrics
from lookup_source.spark import table_read
from lookup_source.spark.internals import plan_text
from lookup_source.spark.versions import BROADCAST
from tests.fixtures import JDBC_JAR
from tests.helpers import needs
from tests.spark.test_strategy import TYPES, events, rows
from tests.spark.test_strategy import postgres as source_options
from tests.tls import Pki, make_pki

pytestmark = pytest.mark.skipif(
    not os.path.exists(JDBC_JAR),
    reason=f"no Postgres JDBC driver at {JDBC_JAR} (apt-get install libpostgresql-jdbc-java)",
)


def postgres(server: Any, table: str, **extra: str) -> dict[str, str]:
    """The typed table's options, the reader chosen by scan.reader (auto unless given)."""
    return source_options(server, table, **{"scan.reader": "auto", **extra})


def physical(frame: Any) -> str:
    return str(frame._jdf.queryExecution().executedPlan().toString())


@pytest.mark.parametrize(("strategy", "how"), [("scan", "left"), ("broadcast", "inner")])
def test_spark_jdbc_reader_gives_what_lookups_give_on_every_type(
    spark: Any,
    postgres_srv: Any,
    typed: str,
    strategy: str,
    how: str,
) -> None:
    input_ = events(spark)
    looked = lookup_join(
        input_, "uid", schema=TYPES, options=postgres(postgres_srv, typed), how=how
    )
    options = postgres(postgres_srv, typed, strategy=strategy, **{"scan.reader": "jdbc"})
    scanned = lookup_join(input_, "uid", schema=TYPES, options=options, how=how)
    assert scanned.schema == looked.schema
    assert rows(scanned) == rows(looked)
    plan = physical(scanned)
    assert "JDBCRelation" in plan or "Scan JDBC" in plan, plan
    assert "BatchScan asynclookup" not in plan and "ArrowEvalPythonUDTF" not in plan, plan
    reason = lookup_metrics(scanned).strategy_reason
    assert (
        reason
        == f"strategy={strategy}; the table read by Spark's JDBC reader (org.postgresql.Driver)"
    )


def test_auto_takes_the_jdbc_reader_and_says_so(
    spark: Any,
    postgres_srv: Any,
    pg: Any,
    typed: str,
) -> None:
    pg(f"ANALYZE {typed}")
    out = lookup_join(
        events(spark), "uid", schema=TYPES, options=postgres(postgres_srv, typed, strategy="auto")
    )
    metrics = lookup_metrics(out)
    assert metrics.strategy == "broadcast"
    assert metrics.strategy_reason.endswith(
        "; the table read by Spark's JDBC reader (org.postgresql.Driver)"
    )
    assert "Scan JDBC" in physical(out) or "JDBCRelation" in physical(out)


@needs(BROADCAST)  # the data source's scan: PySpark 4.0+
def test_without_the_driver_the_data_source_reads_and_jdbc_says_why(
    spark: Any,
    postgres_srv: Any,
    typed: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(table_read, "driver_loadable", lambda spark, driver: False)
    scanned = lookup_join(
        events(spark), "uid", schema=TYPES, options=postgres(postgres_srv, typed, strategy="scan")
    )
    reason = lookup_metrics(scanned).strategy_reason
    assert "the table read through the asynclookup data source (the JDBC driver " in reason
    assert "is not on Spark's classpath" in reason
    assert "JDBC" not in physical(scanned).replace("asynclookup", "")
    with pytest.raises(OptionError, match="option 'scan.reader': is jdbc, but the JDBC driver"):
        lookup_join(
            events(spark),
            "uid",
            schema=TYPES,
            options=postgres(postgres_srv, typed, strategy="scan", **{"scan.reader": "jdbc"}),
        )
    # a store without JDBC: auto reads through the source, jdbc says why not
    with pytest.raises(OptionError, match="scan.reader': is jdbc, but the redis connector"):
        lookup_join(
            events(spark),
            "uid",
            schema="uid long, name string",
            options={
                "connector": "redis",
                "url": "redis://127.0.0.1:9/0",
                "strategy": "scan",
                "scan.reader": "jdbc",
            },
        )


SECRET = "S3CRETPASSWORDV4LUE"


def test_the_password_never_appears_in_a_plan(
    spark: Any,
    postgres_srv: Any,
    typed: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The password, read on the driver for the JDBC reader, is in no explain mode's text
    (the tests' Postgres trusts any password)."""
    monkeypatch.setenv("JDBC_TEST_PASSWORD", SECRET)
    options = postgres(
        postgres_srv,
        typed,
        strategy="scan",
        **{"scan.reader": "jdbc", "postgres.password.env": "JDBC_TEST_PASSWORD"},
    )
    scanned = lookup_join(events(spark), "uid", schema=TYPES, options=options)
    assert scanned.count() > 0
    for mode in ("simple", "extended", "formatted", "cost", "codegen"):
        assert SECRET not in plan_text(scanned, mode), mode


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(Path(tmp_path_factory.mktemp("jdbc-pki")))


@pytest.fixture(scope="module")
def tls_users(pki: Pki) -> Iterator[dict[str, str]]:
    """A Postgres with TLS (the test CA) holding users 0..49, and a client key in PKCS-8 DER,
    the form pgjdbc reads."""
    import asyncio
    import ssl

    from cryptography.hazmat.primitives import serialization

    from tests.servers import postgres_tls_server

    os.chmod(pki.client_key, 0o600)  # libpq (the data source's scan) refuses a readable key
    key = serialization.load_pem_private_key(Path(pki.client_key).read_bytes(), None)
    der = Path(pki.directory) / "client.pk8"
    der.write_bytes(
        key.private_bytes(
            serialization.Encoding.DER,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    with postgres_tls_server(pki) as server:
        context = ssl.create_default_context(cafile=pki.ca)
        context.load_cert_chain(pki.client_cert, pki.client_key)

        async def seed() -> None:
            import asyncpg

            db = await asyncpg.connect(
                f"postgresql://postgres@localhost:{server.port}/postgres", ssl=context
            )
            await db.execute("CREATE TABLE tls_users (id bigint PRIMARY KEY, name text)")
            await db.execute(
                "INSERT INTO tls_users SELECT g, 'user ' || g FROM generate_series(0, 49) g"
            )
            await db.close()

        asyncio.run(seed())
        yield {
            "connector": "postgres",
            "url": f"postgresql://postgres@localhost:{server.port}/postgres",
            "postgres.table": "tls_users",
            "postgres.tls.ca-file": pki.ca,
            "postgres.tls.cert-file": pki.client_cert,
            "postgres.tls.key-file": pki.client_key,
            "postgres.tls.jdbc-key-file": str(der),
        }


def test_tls_and_a_client_certificate_through_the_jdbc_reader(
    spark: Any, tls_users: dict[str, str], pki: Pki
) -> None:
    schema = "id long, name string"
    input_ = spark.range(60)
    looked = lookup_join(input_, "id", schema=schema, options=tls_users)
    scanned = lookup_join(
        input_,
        "id",
        schema=schema,
        options={**tls_users, "strategy": "scan", "scan.reader": "jdbc"},
    )
    assert rows(scanned) == rows(looked)
    assert sorted(rows(scanned))[49] == (49, "user 49") and sorted(rows(scanned))[55][1] is None
    assert "read by Spark's JDBC reader" in lookup_metrics(scanned).strategy_reason
    if not BROADCAST.available():  # PySpark 3.5: no data source to fall back to
        return
    # a client key in PEM alone has no pgjdbc form: auto reads through the source, says why
    pem = {k: v for k, v in tls_users.items() if k != "postgres.tls.jdbc-key-file"}
    pem["strategy"] = "scan"
    fallback = lookup_join(input_, "id", schema=schema, options=pem)
    assert rows(fallback) == rows(looked)
    assert "pgjdbc reads a client key in PKCS-8 DER or PKCS-12, not PEM" in (
        lookup_metrics(fallback).strategy_reason
    )
