"""The Postgres connector against a real Postgres server."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
import uuid
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from asynclookup_postgres.catalog import split_table_name
from asynclookup_postgres.client import PostgresLookupClient

from lookup_source.errors import LookupFailedError, OptionError, SchemaError
from lookup_source.settings import parse_options
from lookup_source.spark.plan import LookupPlan
from tests.helpers import INT64, run_keys
from tests.servers import free_port

UUIDS = [uuid.UUID(int=i * 7919) for i in range(50)]


def lookup(
    url: str, schema: str, keys: list[Any], *, key_type: pa.DataType = INT64, **options: str
) -> list[dict[str, Any]]:
    return run_keys(
        {"connector": "postgres", "url": url, **options}, schema, keys, key_type=key_type
    )


@pytest.fixture
def users(pg: Any, table_name: str) -> str:
    pg(f"""CREATE TABLE {table_name} (
        id integer PRIMARY KEY, big bigint, name text, ref uuid, amount numeric(12, 3),
        seen timestamp, seen_tz timestamptz, active boolean, doc jsonb, born date,
        tags text[])""")
    pg.many(
        f"INSERT INTO {table_name} VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11)",
        [
            (
                i,
                i * 10_000_000_000,
                f"name '{i}'",
                UUIDS[i],
                Decimal(i) / 8,
                dt.datetime(2024, 1, 1, 12) + dt.timedelta(hours=i),
                dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(days=i),
                i % 2 == 0,
                f'{{"level": {i}, "labels": ["a", "b{i}"]}}',
                dt.date(2000, 1, 1) + dt.timedelta(days=i),
                [f"t{i}", "x"],
            )
            for i in range(50)
        ],
    )
    yield table_name
    pg(f"DROP TABLE IF EXISTS {table_name}")


def test_values_of_every_type(postgres_srv: Any, users: str) -> None:
    schema = (
        "id int, big bigint, name string, ref string, amount decimal(12,3), "
        "seen timestamp_ntz, seen_tz timestamp, active boolean, doc string, born date, "
        "tags array<string>"
    )
    keys = [*range(50), 77, None, 3]
    rows = lookup(
        postgres_srv.url,
        schema,
        keys,
        key_type=pa.int32(),
        **{"postgres.table": users, "batch.size": "16"},
    )
    assert [r["id"] for r in rows] == keys
    for row in rows:
        i = row["id"]
        if i is None or i >= 50:
            assert row["name"] is None and row["amount"] is None
            continue
        assert row["big"] == i * 10_000_000_000
        assert row["name"] == f"name '{i}'"
        assert row["ref"] == str(UUIDS[i])
        assert row["amount"] == Decimal(i) / 8
        assert row["seen"] == dt.datetime(2024, 1, 1, 12) + dt.timedelta(hours=i)
        assert row["seen_tz"] == dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(
            days=i
        )
        assert row["active"] is (i % 2 == 0)
        assert '"level": ' + str(i) in row["doc"]
        assert row["born"] == dt.date(2000, 1, 1) + dt.timedelta(days=i)
        assert row["tags"] == [f"t{i}", "x"]


def test_jsonb_into_a_struct_and_numeric_into_a_double(postgres_srv: Any, users: str) -> None:
    rows = lookup(
        postgres_srv.url,
        "id int, doc struct<level: int, labels: array<string>>, amount double",
        [4],
        key_type=pa.int32(),
        **{"postgres.table": users},
    )
    assert rows == [{"id": 4, "doc": {"level": 4, "labels": ["a", "b4"]}, "amount": 0.5}]


@pytest.mark.parametrize(
    ("key", "keys", "key_type"),
    [
        ("big", [30_000_000_000, 5], INT64),
        ("ref", [str(UUIDS[7]), str(uuid.UUID(int=1))], pa.string()),
        ("name", ["name '9'", "nobody"], pa.string()),
    ],
)
def test_lookups_by_bigint_uuid_and_text_keys(
    postgres_srv: Any, users: str, key: str, keys: list[Any], key_type: pa.DataType
) -> None:
    kind = {"big": "bigint", "ref": "string", "name": "string"}[key]
    rows = lookup(
        postgres_srv.url,
        f"{key} {kind}, id int",
        keys,
        key_type=key_type,
        **{"postgres.table": users},
    )
    assert rows[0]["id"] in (3, 7, 9) and rows[1]["id"] is None


@pytest.mark.parametrize(
    ("schema", "keys", "key_type", "found"),
    [
        ("id int, name string", [4, 60], pa.int32(), [4, None]),
        ("id smallint, name string", [4, 60], pa.int16(), [4, None]),
        ("big long, name string", [40_000_000_000, 7], INT64, [40_000_000_000, None]),
        ("name string, id int", ["name '4'", "name '60'"], pa.string(), ["name '4'", None]),
    ],
)
def test_keys_of_another_width_or_type_than_the_column_match(
    postgres_srv: Any,
    users: str,
    schema: str,
    keys: list[Any],
    key_type: pa.DataType,
    found: list[Any],
) -> None:
    """The rows returned are matched to the keys asked in the keys' own Arrow type (an integer
    column asked with int16 or int32 keys, a text column with strings)."""
    rows = lookup(postgres_srv.url, schema, keys, key_type=key_type, **{"postgres.table": users})
    key, value = schema.split(", ")[0].split()[0], schema.split(", ")[1].split()[0]
    assert [r[key] for r in rows] == keys
    if value == "name":
        assert [r["name"] for r in rows] == [None if f is None else "name '4'" for f in found]
    else:
        assert [r["id"] for r in rows] == [None if f is None else 4 for f in found]


def test_composite_keys(postgres_srv: Any, pg: Any, table_name: str) -> None:
    pg(
        f"CREATE TABLE {table_name} (tenant text, user_id bigint, plan text, "
        "PRIMARY KEY (tenant, user_id))"
    )
    pg.many(
        f"INSERT INTO {table_name} VALUES ($1, $2, $3)",
        [("acme", 1, "gold"), ("acme", 2, "free"), ("beta", 1, "pro")],
    )
    try:
        rows = lookup(
            postgres_srv.url,
            "tenant string, user_id long, plan string",
            [("acme", 1), ("beta", 1), ("beta", 2), ("acme", 2)],
            **{"postgres.table": table_name, "key.column": "tenant,user_id"},
        )
        assert [r["plan"] for r in rows] == ["gold", "pro", None, "free"]
    finally:
        pg(f"DROP TABLE {table_name}")


def test_a_key_holding_nul_fails_that_key_not_its_batch(postgres_srv: Any, users: str) -> None:
    keys = ["name '4'", "bad\x00key", "name '9'", None, "\x00", "name '60'"]
    rows = lookup(
        postgres_srv.url,
        "name string, id int",
        keys,
        key_type=pa.string(),
        **{"postgres.table": users, "on.error": "column", "batch.size": "500"},
    )
    assert [r["name"] for r in rows] == keys  # every row, in order, with its own key
    assert [r["id"] for r in rows] == [4, None, 9, None, None, None]
    for row in rows:
        nul = row["name"] is not None and "\x00" in row["name"]
        error = row["_lookup_error"]
        assert (error is not None) == nul, row
        if nul:
            assert "holds a NUL character, which Postgres text cannot hold" in error
    composite = lookup(
        postgres_srv.url,
        "name string, id int, big long",
        [("name '4'", 4), ("x\x00", 9)],
        **{"postgres.table": users, "on.error": "column", "key.column": "name,id"},
    )
    assert composite[0]["big"] is not None and composite[0]["_lookup_error"] is None
    assert "NUL" in composite[1]["_lookup_error"] and composite[1]["big"] is None


def test_a_key_the_column_cannot_take_fails_that_key_not_its_batch(
    postgres_srv: Any, users: str
) -> None:
    base = {"postgres.table": users, "on.error": "column", "retry.max-attempts": "1"}
    rows = lookup(
        postgres_srv.url,
        "ref string, id int",
        [str(UUIDS[3]), "not-a-uuid", str(UUIDS[7])],
        key_type=pa.string(),
        **{**base, "key.column": "ref"},
    )
    assert [r["id"] for r in rows] == [3, None, 7]
    assert [r["_lookup_error"] is not None for r in rows] == [False, True, False]
    assert "cannot be sent as the key column's type" in rows[1]["_lookup_error"]
    wide = lookup(postgres_srv.url, "id long, name string", [4, 2**40, 9], **base)
    assert [r["name"] for r in wide] == ["name '4'", None, "name '9'"]
    error = wide[1]["_lookup_error"]
    assert "out of int32 range" in error and "[4" not in error  # not the other keys


def test_keys_and_names_cannot_inject_sql(postgres_srv: Any, pg: Any, table_name: str) -> None:
    pg(f'CREATE TABLE {table_name} (k text PRIMARY KEY, "odd ""col""" text)')
    evil = ["'; DROP TABLE " + table_name + "; --", 'a"b', "x' OR '1'='1"]
    pg.many(f"INSERT INTO {table_name} VALUES ($1, $2)", [(k, f"v:{k}") for k in evil])
    try:
        rows = lookup(
            postgres_srv.url,
            'k string, `odd "col"` string',
            [*evil, "missing' OR 1=1"],
            key_type=pa.string(),
            **{"postgres.table": table_name},
        )
        assert [r['odd "col"'] for r in rows] == [f"v:{k}" for k in evil] + [None]
        with pytest.raises(LookupFailedError, match="does not exist"):
            lookup(
                postgres_srv.url,
                "k string, v string",
                ["a"],
                key_type=pa.string(),
                **{"postgres.table": f'"{table_name}; DROP TABLE {table_name}; --"'},
            )
        assert pg.fetch(f"SELECT count(*) FROM {table_name}")[0][0] == 3  # still there
    finally:
        pg(f"DROP TABLE {table_name}")


def test_lookup_query_uses_the_primary_key_index(postgres_srv: Any, users: str) -> None:
    plan = LookupPlan.build(
        {"connector": "postgres", "url": postgres_srv.url, "postgres.table": users},
        "big bigint, name string",
    )
    client = PostgresLookupClient(plan.connector_config())

    async def explain() -> str:
        await client.open()
        try:
            async with (await client._connect()).acquire() as connection:
                await connection.execute(f"CREATE INDEX ON {users} (big)")
                await connection.execute("SET enable_seqscan = off")
                rows = await connection.fetch("EXPLAIN " + client._query.sql, [1, 2])
                return "\n".join(r[0] for r in rows)
        finally:
            await client.close()

    plan_text = asyncio.run(explain())
    assert "Index" in plan_text and "::text" not in plan_text


def test_custom_query(postgres_srv: Any, users: str) -> None:
    query = f"SELECT id, upper(name) AS shout FROM {users} WHERE id = ANY($1) AND active"
    rows = lookup(
        postgres_srv.url,
        "id int, shout string",
        [2, 3, 4],
        key_type=pa.int32(),
        **{"postgres.query": query},
    )
    assert [r["shout"] for r in rows] == ["NAME '2'", None, "NAME '4'"]
    with pytest.raises(LookupFailedError, match="returns no column 'nope'"):
        lookup(
            postgres_srv.url,
            "id int, nope string",
            [2],
            key_type=pa.int32(),
            **{"postgres.query": query},
        )


def test_scan_in_partitions_returns_every_row_once(postgres_srv: Any, users: str) -> None:
    plan = LookupPlan.build(
        {"connector": "postgres", "url": postgres_srv.url, "postgres.table": users},
        "id int, name string",
    )

    async def scan(part: int, parts: int) -> list[Any]:
        client = PostgresLookupClient(plan.connector_config())
        await client.open()
        try:
            return [pair async for pair in client.scan(part, parts)]
        finally:
            await client.close()

    parts = [asyncio.run(scan(i, 3)) for i in range(3)]
    assert all(parts)  # every bucket gets rows
    ids = sorted(key for part in parts for key, _ in part)
    assert ids == list(range(50))
    assert all(record["name"] == f"name '{key}'" for part in parts for key, record in part)


def test_schema_inference(postgres_srv: Any, users: str, pg: Any) -> None:
    options = parse_options(
        {"connector": "postgres", "url": postgres_srv.url, "postgres.table": users}
    )
    ddl, keys = PostgresLookupClient.infer_schema(options.for_connector())
    assert keys == ("id",)
    assert ddl == (
        "`id` int, `big` bigint, `name` string, `ref` string, `amount` decimal(38,10), "
        "`seen` timestamp_ntz, `seen_tz` timestamp, `active` boolean, `doc` string, "
        "`born` date, `tags` array<string>"
    )
    pg(f"ALTER TABLE {users} ADD COLUMN spot point")
    with pytest.raises(SchemaError, match="column 'spot' has Postgres type point"):
        PostgresLookupClient.infer_schema(options.for_connector())


def test_unreachable_server_and_missing_password_variable(monkeypatch: Any) -> None:
    port = free_port()
    with pytest.raises(LookupFailedError) as info:
        lookup(
            f"postgresql://app:pw@127.0.0.1:{port}/db",
            "id long, v string",
            [1],
            **{"postgres.table": "t", "retry.initial-delay.ms": "10"},
        )
    assert f"postgresql://app:***@127.0.0.1:{port}/db" in str(info.value)
    assert "pw@" not in str(info.value)
    monkeypatch.delenv("NO_SUCH_PG_PASSWORD", raising=False)
    with pytest.raises(Exception, match=r"NO_SUCH_PG_PASSWORD.*not set on this executor"):
        lookup(
            f"postgresql://app@127.0.0.1:{port}/db",
            "id long, v string",
            [1],
            **{"postgres.table": "t", "postgres.password.env": "NO_SUCH_PG_PASSWORD"},
        )


def test_inferring_a_schema_reads_the_secret_on_the_driver_and_says_so(
    monkeypatch: Any, postgres_srv: Any, users: str
) -> None:
    from lookup_source.connector_api.secrets import read_on_driver
    from lookup_source.errors import MissingSecretError
    from lookup_source.spark.plan import INFERRING

    monkeypatch.delenv("NO_SUCH_PG_PASSWORD", raising=False)
    options = parse_options(
        {
            "connector": "postgres",
            "url": postgres_srv.url,
            "postgres.table": users,
            "postgres.password.env": "NO_SUCH_PG_PASSWORD",
        }
    )
    with pytest.raises(MissingSecretError) as info, read_on_driver(INFERRING):
        PostgresLookupClient.infer_schema(options.for_connector())
    assert info.value.option == "postgres.password.env"
    assert str(info.value) == (
        "option 'postgres.password.env' names environment variable 'NO_SUCH_PG_PASSWORD', "
        "which is not set on the driver, where the schema is inferred from the store (or give "
        "the schema, and only the executors need the variable): set it in the driver's "
        "environment too"
    )
    monkeypatch.setenv("NO_SUCH_PG_PASSWORD", "anything")  # trust auth: any password
    with read_on_driver(INFERRING):
        ddl, keys = PostgresLookupClient.infer_schema(options.for_connector())
    assert keys == ("id",) and ddl.startswith("`id` int")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"postgres.table": "t", "url": "mysql://h/db"}, "must start with postgresql://"),
        ({"url": "postgresql://h/db"}, "set exactly one of postgres.table and postgres.query"),
        ({"url": "postgresql://h/db", "postgres.table": "a.b.c"}, "use table or schema.table"),
        ({"url": "postgresql://h/db", "postgres.table": '"unclosed'}, "unclosed quote"),
    ],
)
def test_configuration_errors(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse_options({"connector": "postgres", **options})


def test_split_table_name() -> None:
    assert split_table_name("Users") == ("users",)
    assert split_table_name('s."Mixed.Case"') == ("s", "Mixed.Case")
    assert split_table_name('"a""b"') == ('a"b',)


@pytest.mark.parametrize(
    ("column_type", "stored", "asked", "found"),
    [
        # equality that is not byte equality: the server says which asked key a row answers
        ("citext", ["Ada", "BOB"], ["ada", "Bob", "carl"], ["Ada", "BOB", None]),
        ("char(5)", ["ab", "abcde"], ["ab", "abcde", "abc"], ["ab", "abcde", None]),
        ("uuid", [str(UUIDS[1]), str(UUIDS[2])], [str(UUIDS[1]).upper(), str(UUIDS[2])], [1, 2]),
    ],
)
def test_keys_whose_equality_is_not_byte_equality(
    postgres_srv: Any,
    pg: Any,
    table_name: str,
    column_type: str,
    stored: list[str],
    asked: list[str],
    found: list[Any],
) -> None:
    if column_type == "citext":
        pg("CREATE EXTENSION IF NOT EXISTS citext")
    pg(f"CREATE TABLE {table_name} (k {column_type} PRIMARY KEY, v text)")
    try:
        pg.many(
            f"INSERT INTO {table_name} VALUES ($1::text::{column_type}, $2)",
            [(k, f"value of {i + 1}") for i, k in enumerate(stored)],
        )
        rows = lookup(
            postgres_srv.url,
            "k string, v string",
            asked,
            key_type=pa.string(),
            **{"postgres.table": table_name},
        )
        expected = [
            None if f is None else f"value of {f if isinstance(f, int) else stored.index(f) + 1}"
            for f in found
        ]
        assert [r["k"] for r in rows] == asked  # each row keeps the key it asked with
        assert [r["v"] for r in rows] == expected
    finally:
        pg(f"DROP TABLE {table_name}")


@pytest.mark.parametrize("source", ["table", "query"])
def test_a_key_with_several_rows_gives_every_row(
    postgres_srv: Any, pg: Any, table_name: str, source: str
) -> None:
    pg(f"CREATE TABLE {table_name} (uid bigint, item text)")
    try:
        pg.many(
            f"INSERT INTO {table_name} VALUES ($1, $2)", [(1, "a"), (2, "only"), (1, "b"), (1, "c")]
        )
        option = (
            {"postgres.table": table_name}
            if source == "table"
            else {"postgres.query": f"SELECT uid, item FROM {table_name} WHERE uid = ANY($1)"}
        )
        rows = lookup(postgres_srv.url, "uid long, item string", [1, 3, 2], **option)
        assert sorted((r["uid"], r["item"]) for r in rows) == [
            (1, "a"),
            (1, "b"),
            (1, "c"),
            (2, "only"),
            (3, None),
        ]
        assert [r["uid"] for r in rows] == [1, 1, 1, 3, 2]  # in input order, matches together
    finally:
        pg(f"DROP TABLE {table_name}")


def _with_client(config: Any, work: Any) -> Any:
    async def run() -> Any:
        client = PostgresLookupClient(config)
        await client.open()
        try:
            return await work(client)
        finally:
            await client.close()

    return asyncio.run(run())


def _scan_all(config: Any, parts: int, splits: Any = None) -> list[Any]:
    """Every part of a scan of ``parts``: by key range (``splits``) or by hash."""

    async def scan(client: Any) -> list[list[Any]]:
        out = []
        for part in range(parts):
            chunks = (
                client.scan_arrow(part, parts, split=splits[part])
                if splits
                else client.scan_arrow(part, parts)
            )
            out.append([k.as_py() for keys, _ in [c async for c in chunks] for k in keys[0]])
        return out

    return list(_with_client(config, scan))


def _rows_read(pg: Any, table: str) -> int:
    """Rows the server has read from ``table`` (sequential and index), once its statistics
    have settled."""
    seen = -1
    for _ in range(50):
        pg("SELECT pg_stat_clear_snapshot()")
        row = pg.fetch(
            "SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) AS n "
            "FROM pg_stat_user_tables WHERE relname = $1",
            table,
        )[0]
        if row["n"] == seen:
            return int(seen)
        seen = row["n"]
        time.sleep(0.2)
    return int(seen)


def test_a_scan_by_key_ranges_reads_each_row_once(
    postgres_srv: Any, pg: Any, table_name: str
) -> None:
    pg(f"CREATE TABLE {table_name} (id bigint PRIMARY KEY, name text)")
    keys = [k * 7 - 30_000 for k in range(20_000)]  # negative and positive, with gaps
    pg.many(f"INSERT INTO {table_name} VALUES ($1, $2)", [(k, f"n{k}") for k in keys])
    pg(f"ANALYZE {table_name}")
    plan = LookupPlan.build(
        {"connector": "postgres", "url": postgres_srv.url, "postgres.table": table_name},
        "id long, name string",
    )
    config = plan.connector_config()
    splits = _with_client(config, lambda client: client.scan_splits(4))
    assert splits[0][0] is None and splits[-1][1] is None  # open at both ends
    assert [s[1] for s in splits[:-1]] == [s[0] for s in splits[1:]]  # contiguous
    pg(f"INSERT INTO {table_name} VALUES (-99999, 'below'), (99999999, 'above')")  # after the plan

    start = _rows_read(pg, table_name)
    parts = _scan_all(config, 4, splits)
    by_range = _rows_read(pg, table_name) - start
    assert all(parts)
    assert sorted(k for part in parts for k in part) == sorted([*keys, -99999, 99999999])
    assert -99999 in parts[0] and 99999999 in parts[-1]
    print(f"rows read: by range {by_range:,}, by hash", end=" ")
    assert by_range <= len(keys) + 2  # the table read once

    start = _rows_read(pg, table_name)
    hashed = _scan_all(config, 4)
    by_hash = _rows_read(pg, table_name) - start
    assert sorted(k for part in hashed for k in part) == sorted([*keys, -99999, 99999999])
    print(f"{by_hash:,}")
    assert by_hash >= 4 * len(keys)  # what ranges save: each part read the whole table


def test_scan_splits_only_for_one_integer_key(postgres_srv: Any, pg: Any, table_name: str) -> None:
    pg(f"CREATE TABLE {table_name} (code text PRIMARY KEY, name text)")
    plan = LookupPlan.build(
        {"connector": "postgres", "url": postgres_srv.url, "postgres.table": table_name},
        "code string, name string",
    )

    splits = _with_client(plan.connector_config(), lambda client: client.scan_splits(4))
    assert splits is None  # a text key: split by hash


def test_a_connection_left_mid_protocol_by_a_restart_is_retried() -> None:
    from asynclookup_postgres.client import classify
    from asyncpg import exceptions as pgx

    from lookup_source.connector_api import translate_error
    from lookup_source.errors import TransientError

    error = pgx.InternalClientError(
        "cannot switch to state 12; another operation (2) is in progress"
    )
    assert isinstance(translate_error("asyncpg", classify, error), TransientError)


def pooled_client(url: str, **options: str) -> PostgresLookupClient:
    """A client whose query answers with the backend that ran it, after 0.1 s."""
    query = (
        "SELECT k AS id, pg_backend_pid()::text AS name FROM unnest($1::int[]) AS k, pg_sleep(0.1)"
    )
    plan = LookupPlan.build(
        {"connector": "postgres", "url": url, "postgres.query": query, "capacity": "10", **options},
        "id int, name string",
    )
    return PostgresLookupClient(plan.connector_config())


def test_a_cluster_budget_bounds_the_pool_and_closes_idle_connections(
    postgres_srv: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asynclookup_postgres.client as client_module
    import asyncpg

    monkeypatch.setattr(client_module, "BUDGET_IDLE_CLOSE_S", 0.5)
    application = f"budget{uuid.uuid4().hex[:8]}"
    url = (
        f"{postgres_srv.url}{'&' if '?' in postgres_srv.url else '?'}application_name={application}"
    )

    async def scenario(client: PostgresLookupClient) -> tuple[int, int, int]:
        await client.open()
        try:
            answers = await asyncio.gather(*(client.lookup([i]) for i in range(10)))
            backends = {record["name"] for answer in answers for record in answer.values()}
            busy = await count()
            # idle past the budget's 0.5 s (patched): the pool closes them and their backends
            # leave pg_stat_activity (waited for: a busy machine is late, a pool that never
            # closes them stays at 2)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            await asyncio.sleep(1.5)
            while (left := await count()) and loop.time() < deadline:
                await asyncio.sleep(0.2)
            return len(backends), busy, left
        finally:
            await client.close()

    async def count() -> int:
        connection = await asyncpg.connect(postgres_srv.url)
        try:
            return int(
                await connection.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                    application,
                )
            )
        finally:
            await connection.close()

    budgeted = pooled_client(url, **{"budget.max-in-flight": "2"})
    assert budgeted.pool_size == 2
    used, open_after, open_later = asyncio.run(scenario(budgeted))
    assert used == 2 and open_after == 2 and open_later == 0
    unbounded = pooled_client(url)
    assert unbounded.pool_size == 10 and unbounded.idle_close_s == 300.0
    used, _, open_later = asyncio.run(scenario(unbounded))
    assert used == 10 and open_later == 10  # kept for asyncpg's 300 s


@pytest.mark.parametrize(
    ("column_type", "stored", "asked", "store", "spark"),
    [
        (
            "citext",
            ["Ada", "BOB"],
            ["ada", "Ada", "carl"],
            ["Ada", "Ada", None],
            [None, "Ada", None],
        ),
        ("ci", ["EU", "us"], ["eu", "EU", "US"], ["EU", "EU", "us"], [None, "EU", None]),
        (
            "char(5)",
            ["ab", "abcde"],
            ["ab", "ab   ", "abcde"],
            ["ab", "ab", "abcde"],
            [None, "ab", "abcde"],
        ),
        (
            "uuid",
            [str(UUIDS[1])],
            [str(UUIDS[1]).upper(), str(UUIDS[1])],
            [str(UUIDS[1])] * 2,
            [None, str(UUIDS[1])],
        ),
    ],
)
def test_spark_equality_keeps_the_rows_whose_own_key_is_the_asked_one(
    postgres_srv: Any,
    pg: Any,
    table_name: str,
    column_type: str,
    stored: list[str],
    asked: list[str],
    store: list[Any],
    spark: list[Any],
) -> None:
    """``key.equality=spark`` (a SQL JOIN's): a key that the store's ``=`` matches with another
    (case, padding, a uuid's spelling) finds only its own row; ``store``: the store's rows."""
    if column_type == "citext":
        pg("CREATE EXTENSION IF NOT EXISTS citext")
    if column_type == "ci":  # a nondeterministic collation: case-insensitive text
        pg(
            "CREATE COLLATION IF NOT EXISTS asynclookup_ci "
            "(provider = icu, locale = 'und-u-ks-level2', deterministic = false)"
        )
        column_type = "text COLLATE asynclookup_ci"
    pg(f"CREATE TABLE {table_name} (k {column_type}, id int, v text, PRIMARY KEY (k, id))")
    try:
        pg.many(
            f"INSERT INTO {table_name} VALUES ($1::text::{column_type.split()[0]}, 1, $2)",
            [(k, k) for k in stored],
        )
        for equality, expected in (("store", store), ("spark", spark)):
            options = {"postgres.table": table_name, "key.equality": equality}
            one = lookup(
                postgres_srv.url,
                "k string, v string",
                asked,
                key_type=pa.string(),
                **options,
                **{"key.column": "k"},
            )
            assert [r["v"] for r in one] == expected, (equality, one)
            assert [r["k"] for r in one] == asked  # each row keeps the key it asked with
            # a composite key: the server says which asked key a row answers
            two = lookup(
                postgres_srv.url,
                "k string, id int, v string",
                [(a, 1) for a in asked],
                **options,
                **{"key.column": "k,id"},
            )
            assert [r["v"] for r in two] == expected, (equality, two)
    finally:
        pg(f"DROP TABLE {table_name}")


@pytest.mark.parametrize("on_unfit", ["error", "miss"])
def test_keys_the_column_cannot_hold_are_unfit(
    postgres_srv: Any, pg: Any, table_name: str, on_unfit: str
) -> None:
    """Beyond int4, a NUL in text, longer than a ``name``: no row can have such a key. Under
    ``on.unfit-key=miss`` (a SQL JOIN's) it is a miss, counted; under ``error`` a failed key
    that says why; the batch's other keys are answered either way."""
    from lookup_source.engine.metrics import LookupMetrics

    pg(f"CREATE TABLE {table_name} (i int, n name, t text, v text, PRIMARY KEY (i, n))")
    try:
        pg(f"INSERT INTO {table_name} VALUES (1, 'a', 'a', 'one'), (2, 'b', 'b', 'two')")
        options = {
            "postgres.table": table_name,
            "on.unfit-key": on_unfit,
            "on.error": "column",
            "retry.max-attempts": "1",
        }
        cases = [
            ("i", "i long, v string", [1, 2**31, 2, -(2**31) - 1], INT64, [0, 1, 0, 1]),
            ("n", "n string, v string", ["a", "x" * 64, "b"], pa.string(), [0, 1, 0]),
            ("t", "t string, v string", ["a", "a\x00", "b"], pa.string(), [0, 1, 0]),
        ]
        for column, schema, keys, kind, unfit in cases:
            stats: list[LookupMetrics] = []
            rows = run_keys(
                {"connector": "postgres", "url": postgres_srv.url, **options, "key.column": column},
                schema,
                keys,
                key_type=kind,
                stats=stats,
            )
            assert [r["v"] for r in rows] == [
                None if bad else {1: "one", 2: "two", "a": "one", "b": "two"}[k]
                for k, bad in zip(keys, unfit)
            ]
            errors = [r["_lookup_error"] is not None for r in rows]
            assert errors == (
                [bool(b) for b in unfit] if on_unfit == "error" else [False] * len(keys)
            )
            assert sum(s.unfit_keys for s in stats) == sum(unfit)
        composite = run_keys(
            {"connector": "postgres", "url": postgres_srv.url, **options, "key.column": "i,n"},
            "i int, n string, v string",
            [(1, "a"), (2, "y" * 70), (2, "b")],
        )
        assert [r["v"] for r in composite] == ["one", None, "two"]
    finally:
        pg(f"DROP TABLE {table_name}")


def test_a_semi_or_anti_join_selects_the_key_alone(
    postgres_srv: Any, pg: Any, table_name: str
) -> None:
    """With no value column asked for (a semi or anti join's plan), the lookup selects the key
    alone: a value the schema could not read does not matter."""
    from lookup_source.engine.runner import run_lookups

    pg(f"CREATE TABLE {table_name} (k bigint, v text)")
    try:
        pg(f"INSERT INTO {table_name} VALUES (1, 'not a number'), (1, 'x'), (3, 'y')")
        options = {"connector": "postgres", "url": postgres_srv.url, "postgres.table": table_name}
        plan = LookupPlan.build({**options, "key.column": "k"}, "k long, v int")
        keys = pa.record_batch({"k": pa.array([1, 2, 3, None], pa.int64())})
        for how, expected in (("semi", [1, 3]), ("anti", [2, None])):
            existence = plan.for_how(how)
            assert existence.value_fields == ()
            spec = existence.engine_spec(("k",), how=how)
            out = run_lookups([keys], spec, existence.connector_config())
            assert [r["k"] for b in out for r in b.to_pylist()] == expected
        with pytest.raises(LookupFailedError, match="not a number"):
            list(run_lookups([keys], plan.engine_spec(("k",), how="semi"), plan.connector_config()))
    finally:
        pg(f"DROP TABLE {table_name}")
