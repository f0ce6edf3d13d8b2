"""SQL JOINs against lookup tables run as lookups (the SQL extension), against real Postgres,
Redis and HTTP servers: for every case the rewrite takes, the rows with it on equal the rows
with it off (Spark's scan and join, where the store can scan) and the rows computed from the
store's own content; every case it must leave to Spark is left there, with its reason."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web
from pyspark.sql import functions as F

from lookup_source import lookup_metrics, register_data_source, register_lookup_table
from lookup_source.service import BackgroundHttpServer
from lookup_source.spark.internals import clear_decisions, jvm_decisions, plan_text
from lookup_source.spark.versions import SQL_JOINS
from tests.helpers import needs, run_postgres
from tests.spark.sql_rewrite import decided, rewrite, rows, same_both_ways

pytestmark = needs(SQL_JOINS)

USERS = 60  # users 0..59 in every store; user 13's values are all null (a match all the same)
NO_VALUES = 13


def user(uid: int) -> tuple[Any, Any]:
    return (None, None) if uid == NO_VALUES else (f"user {uid}", uid % 3)


EVENTS = [  # event_id, user_id (nulls, misses, repeats), uid_int, flag
    (e, None if e % 10 == 9 else e % 70, None if e % 10 == 9 else e % 70, e % 2) for e in range(100)
]
ORDERS = [(3, "a"), (3, "b"), (3, "c"), (5, "d"), (5, "e"), (8, "f")]  # one-to-many


@pytest.fixture(scope="module")
def tables(spark: Any, postgres_srv: Any) -> Iterator[dict[str, str]]:
    """Postgres tables registered as lookup tables, and the events as a view."""
    import uuid

    suffix = uuid.uuid4().hex[:8]
    users, orders, accounts = f"sj_users_{suffix}", f"sj_orders_{suffix}", f"sj_acc_{suffix}"
    values = ", ".join(
        f"({u}, {'NULL' if u == NO_VALUES else repr(f'user {u}')}, "
        f"{'NULL' if u == NO_VALUES else u % 3})"
        for u in range(USERS)
    )
    run_postgres(
        postgres_srv.url,
        f"CREATE TABLE {users} (user_id bigint PRIMARY KEY, name text, tier int)",
        f"INSERT INTO {users} VALUES {values}",
        f"CREATE TABLE {orders} (order_id serial PRIMARY KEY, user_id bigint, item text)",
        "INSERT INTO {} (user_id, item) VALUES {}".format(
            orders, ", ".join(f"({u}, '{i}')" for u, i in ORDERS)
        ),
        f"CREATE TABLE {accounts} (owner text, region text, acct bigint, "
        "PRIMARY KEY (region, acct))",
        f"INSERT INTO {accounts} SELECT 'owner ' || r || '/' || a, r, a "
        "FROM unnest(ARRAY['eu', 'us']) r, generate_series(0, 4) a",
    )
    base = {"connector": "postgres", "url": postgres_srv.url}
    names = {"users": f"users_{suffix}", "orders": f"orders_{suffix}", "acc": f"acc_{suffix}"}
    register_lookup_table(
        spark,
        names["users"],
        schema="user_id long, name string, tier int",
        options={**base, "postgres.table": users},
    )
    register_lookup_table(
        spark,
        names["orders"],
        schema="user_id long, item string",
        options={**base, "postgres.table": orders, "key.column": "user_id"},
    )
    register_lookup_table(  # the store describes it: a composite primary key, not first
        spark, names["acc"], options={**base, "postgres.table": accounts}
    )
    events = spark.createDataFrame(
        EVENTS, "event_id long, user_id long, uid_int int, flag int"
    ).withColumn("region", F.lit("eu"))
    names["events"] = f"events_{suffix}"
    events.createOrReplaceTempView(names["events"])
    names["pg_users"] = users
    yield names
    run_postgres(
        postgres_srv.url, f"DROP TABLE {users}", f"DROP TABLE {orders}", f"DROP TABLE {accounts}"
    )


def expected_join(how: str, *, event_filter: Any = None) -> Counter[tuple[Any, ...]]:
    out: Counter[tuple[Any, ...]] = Counter()
    for event_id, uid, _, flag in EVENTS:
        if event_filter is not None and not event_filter(event_id, flag):
            continue
        if uid is not None and uid < USERS:
            out[(event_id, uid, uid, *user(uid))] += 1
        elif how == "left":
            out[(event_id, uid, None, None, None)] += 1
    return out


@pytest.mark.parametrize("how", ["inner", "left"])
def test_a_join_is_the_lookup_and_gives_spark_joins_rows(
    spark: Any, tables: dict[str, str], how: str
) -> None:
    sql = (
        f"SELECT e.event_id, e.user_id, u.user_id, u.name, u.tier FROM {tables['events']} e "
        f"{how.upper()} JOIN {tables['users']} u ON e.user_id = u.user_id"
    )
    got = same_both_ways(spark, sql)
    assert got == expected_join(how)
    # a matched row whose values are all null keeps its key: it is a match
    assert (13, 13, 13, None, None) in got
    assert decided(spark, sql)[-1][:3] == ("lookup", tables["users"], decided(spark, sql)[-1][2])


def test_the_table_on_the_left_of_an_inner_join(spark: Any, tables: dict[str, str]) -> None:
    sql = (
        f"SELECT e.event_id, e.user_id, u.user_id, u.name, u.tier FROM {tables['users']} u "
        f"JOIN {tables['events']} e ON u.user_id = e.user_id"
    )
    assert same_both_ways(spark, sql) == expected_join("inner")


def test_the_dataframe_api(spark: Any, tables: dict[str, str]) -> None:
    events, users = spark.table(tables["events"]), spark.table(tables["users"])
    with rewrite(spark, True):
        using = events.join(users, "user_id", "left").select("event_id", "user_id", "name", "tier")
        by_condition = events.join(users, events.user_id == users.user_id).select(
            events.event_id, events.user_id, users.user_id, users.name, users.tier
        )
        assert "ArrowEvalPythonUDTF" in plan_text(using, "simple")
        left = rows(using)
        inner = rows(by_condition)
    assert left == Counter(
        {(e, u, n, t): c for (e, u, _, n, t), c in expected_join("left").items()}
    )
    assert inner == expected_join("inner")
    with rewrite(spark, False):
        assert rows(events.join(users, "user_id", "left").select(*using.columns)) == left


def test_a_composite_key_the_store_described(spark: Any, tables: dict[str, str]) -> None:
    """The accounts table's key is (region, acct), its columns owner, region, acct: the key is
    the store's primary key, not the schema's first column."""
    sql = (
        f"SELECT e.event_id, a.owner FROM {tables['events']} e JOIN {tables['acc']} a "
        "ON a.acct = e.user_id AND e.region = a.region"
    )
    got = same_both_ways(spark, sql)
    assert got == Counter(
        {(e, f"owner eu/{u}"): 1 for e, u, _, _ in EVENTS if u is not None and u < 5}
    )
    partial = f"SELECT * FROM {tables['events']} e JOIN {tables['acc']} a ON a.acct = e.user_id"
    outcome, _, _, reason = decided(spark, partial)[-1]
    assert outcome == "spark" and "missing region" in reason


def test_a_key_compared_through_a_cast(spark: Any, tables: dict[str, str]) -> None:
    """An int column against the long key (Spark widens the int), and a string column
    against it (Spark casts the text to a number, as it does without the rewrite, failing the
    query on a text that is no number under ANSI mode): the same rows either way."""
    widened = (
        f"SELECT e.event_id, u.name FROM {tables['events']} e "
        f"JOIN {tables['users']} u ON e.uid_int = u.user_id"
    )
    got = same_both_ways(spark, widened)
    assert sum(got.values()) == sum(1 for _, u, _, _ in EVENTS if u is not None and u < USERS)
    texts = spark.createDataFrame([("7",), ("007",), (" 8",), (None,), ("100",)], "t string")
    texts.createOrReplaceTempView("sj_texts")
    as_text = f"SELECT t.t, u.name FROM sj_texts t LEFT JOIN {tables['users']} u ON t.t = u.user_id"
    assert same_both_ways(spark, as_text) == Counter(
        {
            ("7", "user 7"): 1,
            ("007", "user 7"): 1,
            (" 8", "user 8"): 1,
            (None, None): 1,
            ("100", None): 1,
        }
    )


def test_a_narrower_key_than_the_input(
    spark: Any, postgres_srv: Any, tables: dict[str, str]
) -> None:
    """A table keyed by int, joined on a long column: Spark widens the key, the rewrite asks
    for the input's values that are ints (a value out of the int range matches nothing)."""
    register_lookup_table(
        spark,
        "sj_narrow",
        schema="user_id int, name string",
        options={
            "connector": "postgres",
            "url": postgres_srv.url,
            "postgres.table": tables["pg_users"],
        },
    )
    big = spark.createDataFrame([(1,), (2**32 + 1,), (None,), (59,)], "id long")
    big.createOrReplaceTempView("sj_big")
    sql = "SELECT b.id, n.user_id, n.name FROM sj_big b LEFT JOIN sj_narrow n ON b.id = n.user_id"
    assert same_both_ways(spark, sql) == Counter(
        {
            (1, 1, "user 1"): 1,
            (2**32 + 1, None, None): 1,
            (None, None, None): 1,
            (59, 59, "user 59"): 1,
        }
    )


def test_conditions_beside_the_key(spark: Any, tables: dict[str, str]) -> None:
    events, users = tables["events"], tables["users"]
    # inner: a condition on the table's values filters the lookup's rows; one on the input
    # alone filters the input before it is looked up
    inner = (
        f"SELECT e.event_id, e.user_id, u.user_id, u.name, u.tier FROM {events} e "
        f"JOIN {users} u ON e.user_id = u.user_id AND u.tier < 2 AND e.flag = 0"
    )
    got = same_both_ways(spark, inner)
    assert got == Counter(
        {
            r: c
            for r, c in expected_join("inner", event_filter=lambda e, f: f == 0).items()
            if r[4] is not None and r[4] < 2
        }
    )
    # left: a condition on the input alone leaves its failing rows unmatched, with nulls
    left = (
        f"SELECT e.event_id, e.user_id, u.user_id, u.name, u.tier FROM {events} e "
        f"LEFT JOIN {users} u ON e.user_id = u.user_id AND e.flag = 0"
    )
    expected = Counter()
    for (e, uid, key, name, tier), count in expected_join("left").items():
        expected[(e, uid, key, name, tier) if e % 2 == 0 else (e, uid, None, None, None)] += count
    assert same_both_ways(spark, left) == expected
    # left: a comparison of the table's value (a row is matched by any of its key's matches
    # that pass it): judged by the table function on each pair, as lookups
    on_values = (
        f"SELECT e.event_id, u.name FROM {events} e LEFT JOIN {users} u "
        "ON e.user_id = u.user_id AND u.tier = 1"
    )
    outcome, _, _, reason = decided(spark, on_values)[-1]
    assert outcome == "lookup" and reason.endswith("as lookups"), reason
    assert same_both_ways(spark, on_values) == Counter(
        (e, user(u)[0] if u is not None and u < USERS and user(u)[1] == 1 else None)
        for e, u, _, _ in EVENTS
    )
    # any other condition on the table's values: Spark's join, against the lookups of the
    # input's keys
    computed = on_values.replace("u.tier = 1", "upper(u.name) LIKE 'USER 1%'")
    outcome, _, _, reason = decided(spark, computed)[-1]
    assert outcome == "lookup" and "Spark's join against the lookups of its keys" in reason
    assert same_both_ways(spark, computed) == Counter(
        (e, user(u)[0] if u is not None and u < USERS and str(u).startswith("1") else None)
        for e, u, _, _ in EVENTS
    )


def test_a_where_on_the_input_is_applied_before_the_lookup(
    spark: Any, tables: dict[str, str]
) -> None:
    sql = (
        f"SELECT u.tier, count(*) AS n FROM {tables['events']} e JOIN {tables['users']} u "
        "ON e.user_id = u.user_id WHERE e.event_id < 30 GROUP BY u.tier"
    )
    got = same_both_ways(spark, sql)
    expected: Counter[Any] = Counter()
    for e, uid, _, _ in EVENTS:
        if e < 30 and uid is not None and uid < USERS:
            expected[user(uid)[1]] += 1
    assert got == Counter({(tier, n): 1 for tier, n in expected.items()})
    with rewrite(spark, True):
        optimized = spark.sql(sql)._jdf.queryExecution().optimizedPlan().toString()
    lookup = optimized.index("ArrowEvalPythonUDTF")
    assert "event_id" in optimized[lookup:].split("Filter", 1)[1], optimized  # below it


def test_one_to_many_and_repeated_keys(spark: Any, tables: dict[str, str]) -> None:
    sql = (
        f"SELECT e.event_id, o.item FROM {tables['events']} e "
        f"LEFT JOIN {tables['orders']} o ON e.user_id = o.user_id"
    )
    got = same_both_ways(spark, sql)
    items: dict[int, list[str]] = {}
    for uid, item in ORDERS:
        items.setdefault(uid, []).append(item)
    expected: Counter[Any] = Counter()
    for e, uid, _, _ in EVENTS:
        for item in items.get(uid, [None]) if uid is not None else [None]:
            expected[(e, item)] += 1
    assert got == expected


def test_two_lookup_tables_and_a_self_join(spark: Any, tables: dict[str, str]) -> None:
    two = (
        f"SELECT e.event_id, u.name, o.item FROM {tables['events']} e "
        f"JOIN {tables['users']} u ON e.user_id = u.user_id "
        f"LEFT JOIN {tables['orders']} o ON o.user_id = u.user_id"
    )
    got = same_both_ways(spark, two)
    assert sum(got.values()) == sum(
        max(1, sum(1 for o, _ in ORDERS if o == uid))
        for _, uid, _, _ in EVENTS
        if uid is not None and uid < USERS
    )
    assert len([d for d in decided(spark, two) if d[0] == "lookup"]) == 2
    self_join = (
        f"SELECT a.user_id, b.name FROM {tables['users']} a "
        f"JOIN {tables['users']} b ON a.user_id = b.user_id"
    )
    # a self-join stays Spark's (the DataFrame API resolves a self-join's condition on its own
    # join, which must stay one): the same rows
    assert "a self-join" in decided(spark, self_join)[-1][3]
    assert same_both_ways(spark, self_join, rewritten=False) == Counter(
        {(u, user(u)[0]): 1 for u in range(USERS)}
    )


def test_a_filtered_lookup_table(spark: Any, tables: dict[str, str]) -> None:
    events, users = tables["events"], tables["users"]
    on_values = f"(SELECT user_id, upper(name) AS n FROM {users} WHERE tier = 1)"
    inner = f"SELECT e.event_id, u.n FROM {events} e JOIN {on_values} u ON e.user_id = u.user_id"
    assert same_both_ways(spark, inner) == Counter(
        {
            (e, f"USER {u}"): 1
            for e, u, _, _ in EVENTS
            if u is not None and u < USERS and u != NO_VALUES and u % 3 == 1
        }
    )
    # a LEFT JOIN against a filter on values: each pair judged by the table function
    left = inner.replace(" JOIN ", " LEFT JOIN ")
    assert decided(spark, left)[-1][3].endswith("as lookups")
    assert same_both_ways(spark, left) == Counter(
        (e, f"USER {u}" if u is not None and u < USERS and u != NO_VALUES and u % 3 == 1 else None)
        for e, u, _, _ in EVENTS
    )
    # a LEFT JOIN against a filter on the key, and a computed column: rewritten, exactly
    on_key = f"(SELECT user_id, coalesce(name, 'none') AS n FROM {users} WHERE user_id < 20)"
    keyed = f"SELECT e.event_id, u.n FROM {events} e LEFT JOIN {on_key} u ON e.user_id = u.user_id"
    got = same_both_ways(spark, keyed)
    assert got == Counter(
        {
            (e, (user(u)[0] or "none") if u is not None and u < 20 else None): 1
            for e, u, _, _ in EVENTS
        }
    )


@pytest.mark.parametrize(
    ("join", "reason"),
    [
        ("RIGHT JOIN {u} u ON e.user_id = u.user_id", "RIGHT OUTER"),
        ("FULL JOIN {u} u ON e.user_id = u.user_id", "FULL OUTER"),
        ("JOIN {u} u ON e.user_id < u.user_id", "does not equate every key column"),
        ("JOIN {u} u ON e.user_id = u.tier", "does not equate every key column"),
        ("CROSS JOIN {u} u", "CROSS"),
    ],
)
def test_joins_left_to_spark(spark: Any, tables: dict[str, str], join: str, reason: str) -> None:
    sql = f"SELECT e.event_id, u.user_id FROM {tables['events']} e " + join.format(
        u=tables["users"]
    )
    outcome, _, _, why = decided(spark, sql)[-1]
    assert outcome == "spark" and reason in why, why
    got = same_both_ways(spark, sql, rewritten=False)
    assert sum(got.values()) > 0


def test_a_left_join_with_the_table_on_the_left_and_a_hint(
    spark: Any, tables: dict[str, str]
) -> None:
    table_left = (
        f"SELECT u.user_id, e.event_id FROM {tables['users']} u "
        f"LEFT JOIN {tables['events']} e ON u.user_id = e.user_id"
    )
    assert "keeps every table row" in decided(spark, table_left)[-1][3]
    got = same_both_ways(spark, table_left, rewritten=False)
    assert {u for u, _ in got} == set(range(USERS))
    hinted = (
        f"SELECT /*+ BROADCAST(u) */ e.event_id, u.name FROM {tables['events']} e "
        f"JOIN {tables['users']} u ON e.user_id = u.user_id"
    )
    assert "join hint" in decided(spark, hinted)[-1][3]


def test_the_rewrite_can_be_turned_off(spark: Any, tables: dict[str, str]) -> None:
    sql = f"SELECT * FROM {tables['events']} e JOIN {tables['users']} u ON e.user_id = u.user_id"
    with rewrite(spark, False):
        plan = plan_text(spark.sql(sql), "simple")
    assert "BatchScan asynclookup" in plan and "ArrowEvalPythonUDTF" not in plan


def test_explain_shows_the_lookup(spark: Any, tables: dict[str, str]) -> None:
    sql = (
        f"SELECT e.event_id, u.name FROM {tables['events']} e "
        f"JOIN {tables['users']} u ON e.user_id = u.user_id"
    )
    text = spark.sql(f"EXPLAIN {sql}").collect()[0][0]
    assert "ArrowEvalPythonUDTF" in text and f"{tables['users']}_lookup_" in text, text


# -- HTTP: a store that cannot scan ------------------------------------------------------------


class KeyRecorder(BackgroundHttpServer):
    """GET /users/{key}: users 0..USERS-1; records every key asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        app = web.Application()
        app.router.add_get("/users/{key}", self._get)
        super().__init__(app)

    async def _get(self, request: web.Request) -> web.Response:
        key = request.match_info["key"]
        self.asked.append(key)
        if not key.isdigit() or int(key) >= USERS:
            return web.json_response({}, status=404)
        name, tier = user(int(key))
        return web.json_response({"name": name, "tier": tier})


@pytest.fixture(scope="module")
def api(spark: Any) -> Iterator[KeyRecorder]:
    with KeyRecorder() as service:
        register_lookup_table(
            spark,
            "sj_api_users",
            schema="user_id long, name string, tier int",
            options={"connector": "http", "url": f"{service.base_url}/users/{{key}}"},
        )
        yield service


def test_an_http_table_answers_asking_only_the_input_keys(
    spark: Any, tables: dict[str, str], api: KeyRecorder
) -> None:
    sql = (
        f"SELECT e.event_id, e.user_id, u.user_id, u.name, u.tier FROM {tables['events']} e "
        "LEFT JOIN sj_api_users u ON e.user_id = u.user_id"
    )
    api.asked.clear()
    with rewrite(spark, True):
        got = rows(spark.sql(sql))
    assert got == expected_join("left")
    distinct = {str(u) for _, u, _, _ in EVENTS if u is not None}
    assert set(api.asked) == distinct  # the input's keys, never a null one
    assert len(api.asked) <= len(distinct) * 2  # each task asks a key once (2 tasks at most)
    with rewrite(spark, False), pytest.raises(Exception, match="cannot scan a whole table"):
        spark.sql(sql).collect()
    # a WHERE on the input: its rows that fail it are never looked up
    api.asked.clear()
    with rewrite(spark, True):
        spark.sql(sql + " WHERE e.event_id < 5").collect()
    assert set(api.asked) == {"0", "1", "2", "3", "4"}


def test_semi_anti_and_value_conditions_against_an_http_table(
    spark: Any, tables: dict[str, str], api: KeyRecorder
) -> None:
    """An HTTP table cannot be scanned (Spark's own join fails): EXISTS, NOT EXISTS, IN, NOT IN,
    LEFT SEMI, LEFT ANTI and a LEFT JOIN comparing a value answer as lookups, asking only the
    input's keys, with the rows the store's content gives."""
    events = tables["events"]
    known = {e for e, u, _, _ in EVENTS if u is not None and u < USERS}
    cases = {
        f"SELECT e.event_id FROM {events} e WHERE EXISTS "
        "(SELECT 1 FROM sj_api_users u WHERE u.user_id = e.user_id)": known,
        f"SELECT e.event_id FROM {events} e WHERE NOT EXISTS "
        "(SELECT 1 FROM sj_api_users u WHERE u.user_id = e.user_id)": set(range(100)) - known,
        f"SELECT e.event_id FROM {events} e WHERE e.user_id IN "
        "(SELECT user_id FROM sj_api_users)": known,
        f"SELECT e.event_id FROM {events} e LEFT SEMI JOIN sj_api_users u "
        "ON e.user_id = u.user_id AND e.flag = 1": {e for e in known if e % 2},
        f"SELECT e.event_id FROM {events} e LEFT ANTI JOIN sj_api_users u "
        "ON e.user_id = u.user_id": set(range(100)) - known,
        # NOT IN: a service holds no null key and is taken to hold keys: a null value is not
        # NOT IN it
        f"SELECT e.event_id FROM {events} e WHERE e.user_id NOT IN "
        "(SELECT user_id FROM sj_api_users)": {
            e for e, u, _, _ in EVENTS if u is not None and u >= USERS
        },
    }
    distinct = {str(u) for _, u, _, _ in EVENTS if u is not None}
    for sql, expected in cases.items():
        api.asked.clear()
        with rewrite(spark, True):
            frame = spark.sql(sql)
            assert "ArrowEvalPythonUDTF" in plan_text(frame, "simple"), sql
            got = [r[0] for r in frame.collect()]
        assert sorted(got) == sorted(expected), sql
        assert set(api.asked) <= distinct and api.asked, sql  # the input's keys only
    valued = (
        f"SELECT e.event_id, u.name FROM {events} e LEFT JOIN sj_api_users u "
        "ON e.user_id = u.user_id AND u.tier = 2"
    )
    with rewrite(spark, True):
        got = rows(spark.sql(valued))
    assert got == Counter(
        (e, user(u)[0] if u is not None and u < USERS and user(u)[1] == 2 else None)
        for e, u, _, _ in EVENTS
    )


def test_a_table_of_your_own_function(spark: Any, tables: dict[str, str]) -> None:
    async def profile(uid: int) -> dict[str, Any] | None:
        if uid >= USERS:
            return None
        name, tier = user(uid)
        return {"name": name, "tier": tier}

    register_lookup_table(
        spark, "sj_fn_users", schema="user_id long, name string, tier int", fetch=profile
    )
    sql = (
        f"SELECT e.event_id, e.user_id, u.user_id, u.name, u.tier FROM {tables['events']} e "
        "LEFT JOIN sj_fn_users u ON e.user_id = u.user_id"
    )
    with rewrite(spark, True):
        assert rows(spark.sql(sql)) == expected_join("left")
    with pytest.raises(Exception, match="cannot be read as a table"):
        spark.sql("SELECT * FROM sj_fn_users").collect()


# -- relations no register_lookup_table made ---------------------------------------------------


def test_a_view_made_in_sql_and_a_read_dataframe(
    spark: Any, postgres_srv: Any, tables: dict[str, str]
) -> None:
    """CREATE TEMPORARY VIEW ... USING asynclookup (the store describes the table) and a
    spark.read.format("asynclookup") DataFrame: the extension makes their table function."""
    spark.sql(
        "CREATE OR REPLACE TEMPORARY VIEW sj_sql_acc USING asynclookup OPTIONS ("
        f"connector 'postgres', url '{postgres_srv.url}', `postgres.table` "
        f"'{tables['pg_users'].replace('users', 'acc')}')"
    )
    sql = (
        f"SELECT e.event_id, a.owner FROM {tables['events']} e "
        "LEFT JOIN sj_sql_acc a ON e.region = a.region AND e.user_id = a.acct"
    )
    got = same_both_ways(spark, sql)
    assert got == Counter(
        {(e, f"owner eu/{u}" if u is not None and u < 5 else None): 1 for e, u, _, _ in EVENTS}
    )
    function = decided(spark, sql)[-1][2]
    assert function.startswith("asynclookup_join_")
    users = (
        spark.read.format("asynclookup")
        .schema("user_id long, name string, tier int")
        .options(
            connector="postgres", url=postgres_srv.url, **{"postgres.table": tables["pg_users"]}
        )
        .load()
    )
    events = spark.table(tables["events"])
    with rewrite(spark, True):
        joined = events.join(users, "user_id").select("event_id", "user_id", "name")
        assert "ArrowEvalPythonUDTF" in plan_text(joined, "simple")
        got = rows(joined)
    assert got == Counter({(e, u, n): c for (e, u, _, n, _), c in expected_join("inner").items()})
    keyed = users.where("user_id = 1")  # a read of given keys is not the whole table
    keyed_read = (
        spark.read.format("asynclookup")
        .schema("user_id long, name string")
        .options(
            connector="postgres",
            url=postgres_srv.url,
            keys="[1, 2]",
            **{"postgres.table": tables["pg_users"]},
        )
        .load()
    )
    with rewrite(spark, True):
        only = rows(events.join(keyed_read, "user_id").select("event_id", "name"))
    assert {n for _, n in only} == {"user 1", "user 2"}
    assert keyed.count() == 1


# -- strategy ------------------------------------------------------------------------------------


def test_strategy_decides_in_sql_too(spark: Any, postgres_srv: Any, tables: dict[str, str]) -> None:
    base = {"connector": "postgres", "url": postgres_srv.url, "postgres.table": tables["pg_users"]}
    schema = "user_id long, name string, tier int"
    sql = "SELECT e.event_id, u.name FROM {e} e JOIN {u} u ON e.user_id = u.user_id"
    register_lookup_table(spark, "sj_scan", schema=schema, options={**base, "strategy": "scan"})
    query = sql.format(e=tables["events"], u="sj_scan")
    assert decided(spark, query)[-1][3].startswith("strategy=scan")
    same_both_ways(spark, query, rewritten=False)
    # auto: the limit worked out from the table's size (60 rows: a scan and a join cost less
    # than lookups past about 20 input rows), compared with Spark's estimate of the input
    run_postgres(postgres_srv.url, f"ANALYZE {tables['pg_users']}")
    register_lookup_table(spark, "sj_auto", schema=schema, options={**base, "strategy": "auto"})
    spark.range(10).selectExpr("id AS event_id", "id % 70 AS user_id").createOrReplaceTempView(
        "sj_few"
    )
    small = sql.format(e="sj_few", u="sj_auto")
    outcome, _, _, why = decided(spark, small)[-1]
    assert outcome == "lookup" and "strategy=auto: lookups: the input ~10 rows" in why, why
    assert "lookups up to 20 " in why, why
    spark.range(100_000).selectExpr("id AS event_id", "id % 70 AS user_id").createOrReplaceTempView(
        "sj_many"
    )
    large = sql.format(e="sj_many", u="sj_auto")
    outcome, _, _, why = decided(spark, large)[-1]
    assert outcome == "spark" and "a scan and Spark's join: the input ~100,000 rows" in why, why
    same_both_ways(spark, large, rewritten=False)
    metrics = lookup_metrics("sj_auto")
    assert metrics.strategy == "scan" and "100,000" in metrics.strategy_reason
    # the limit holds where the table function is made from the view's options: another
    # session reading it as a global temporary view
    spark.table("sj_auto").createOrReplaceGlobalTempView("sj_auto_global")
    other = spark.newSession()
    register_data_source(other)
    other.range(100_000).selectExpr("id AS event_id", "id % 70 AS user_id").createOrReplaceTempView(
        "sj_many"
    )
    clear_decisions(other)
    other.sql(sql.format(e="sj_many", u="global_temp.sj_auto_global")).schema  # noqa: B018
    outcome, _, _, why = jvm_decisions(other)[-1]
    assert outcome == "spark" and "lookups up to 20 " in why, why
    # a decision is the rewrite's own table function's: an input column cannot forge it
    forged = F.col("user_id").alias(
        "user_id", metadata={"asynclookup.decision": 1, "asynclookup.decision.x": "forged"}
    )
    spark.table("sj_few").select("event_id", forged).createOrReplaceTempView("sj_forged")
    outcome, _, _, why = decided(spark, sql.format(e="sj_forged", u="sj_auto"))[-1]
    assert outcome == "lookup" and "strategy=auto: lookups: the input ~10 rows" in why, why
    same_both_ways(spark, sql.format(e="sj_forged", u="sj_auto"))
    # the limit given by hand
    register_lookup_table(
        spark,
        "sj_limit",
        schema=schema,
        options={**base, "strategy": "auto", "strategy.lookup.max-input-rows": "200000"},
    )
    assert decided(spark, sql.format(e="sj_many", u="sj_limit"))[-1][0] == "lookup"


# -- streams -------------------------------------------------------------------------------------


def test_a_stream_static_join(spark: Any, tables: dict[str, str], tmp_path: Any) -> None:
    stream = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 50)
        .load()
        .selectExpr("value AS event_id", "value % 70 AS user_id")
    )
    stream.createOrReplaceTempView("sj_stream")
    frame = spark.sql(
        f"SELECT s.event_id, s.user_id, u.name FROM sj_stream s "
        f"JOIN {tables['users']} u ON s.user_id = u.user_id"
    )
    sql = (
        f"SELECT s.event_id, s.user_id, u.name FROM sj_stream s "
        f"JOIN {tables['users']} u ON s.user_id = u.user_id"
    )
    assert decided(spark, sql)[-1][0] == "lookup"
    query = (
        frame.writeStream.format("memory")
        .queryName("sj_stream_out")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()
        deadline = time.monotonic() + 60
        while spark.sql("SELECT count(*) FROM sj_stream_out").first()[0] < 50:
            assert time.monotonic() < deadline, "no rows from the stream"
            query.processAllAvailable()
    finally:
        query.stop()
    out = spark.sql("SELECT event_id, user_id, name FROM sj_stream_out").collect()
    assert out and all(
        r.user_id < USERS and r.user_id == r.event_id % 70 and r.name == user(r.user_id)[0]
        for r in out
    )


def test_semi_and_anti_joins_of_a_stream(spark: Any, tables: dict[str, str], tmp_path: Any) -> None:
    """A stream's rows whose key exists (EXISTS), and those whose key does not (LEFT ANTI): as
    lookups, micro-batch by micro-batch; a LEFT JOIN comparing a table's value too; one whose
    condition computes on the table's values needs Spark's join after the lookups, which a
    stream cannot have: Spark's."""
    (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 50)
        .load()
        .selectExpr("value AS event_id", "value % 70 AS user_id")
        .createOrReplaceTempView("sj_semi_stream")
    )
    users = tables["users"]
    semi = (
        "SELECT s.event_id, s.user_id FROM sj_semi_stream s WHERE EXISTS "
        f"(SELECT 1 FROM {users} u WHERE u.user_id = s.user_id)"
    )
    anti = (
        f"SELECT s.event_id, s.user_id FROM sj_semi_stream s LEFT ANTI JOIN {users} u "
        "ON s.user_id = u.user_id"
    )
    valued = (
        f"SELECT s.event_id, u.name FROM sj_semi_stream s LEFT JOIN {users} u "
        "ON s.user_id = u.user_id AND u.tier = 1"
    )
    computed = valued.replace("u.tier = 1", "upper(u.name) LIKE 'USER 1%'")
    assert decided(spark, semi)[-1][0] == "lookup"
    assert decided(spark, anti)[-1][0] == "lookup"
    assert decided(spark, valued)[-1][0] == "lookup"
    outcome, _, _, why = decided(spark, computed)[-1]
    assert outcome == "spark" and "stream" in why, why
    for name, sql, kept in (
        ("sj_semi_out", semi, lambda uid: uid < USERS),
        ("sj_anti_out", anti, lambda uid: uid >= USERS),
    ):
        query = (
            spark.sql(sql)
            .writeStream.format("memory")
            .queryName(name)
            .option("checkpointLocation", str(tmp_path / name))
            .trigger(processingTime="500 milliseconds")
            .start()
        )
        try:
            deadline = time.monotonic() + 60
            query.processAllAvailable()
            while spark.sql(f"SELECT count(*) FROM {name}").first()[0] < 5:
                assert time.monotonic() < deadline, f"no rows from {name}"
                query.processAllAvailable()
        finally:
            query.stop()
        out = spark.sql(f"SELECT event_id, user_id FROM {name}").collect()
        assert out and all(r.user_id == r.event_id % 70 and kept(r.user_id) for r in out)
        ids = [r.event_id for r in out]
        assert len(ids) == len(set(ids))  # each row once


def test_two_sessions_of_one_jvm(spark: Any, postgres_srv: Any, tables: dict[str, str]) -> None:
    """spark.newSession() registers the data source and its own lookup tables, reads and
    joins them as lookups; neither session sees the other's tables, decisions or metrics."""
    other = spark.newSession()
    name = "sj_other_users"
    register_lookup_table(
        other,
        name,
        schema="user_id long, name string, tier int",
        options={
            "connector": "postgres",
            "url": postgres_srv.url,
            "postgres.table": tables["pg_users"],
        },
    )
    assert other.table(name).where("user_id = 7").collect()[0]["name"] == "user 7"
    assert (
        other.read.format("asynclookup")
        .options(
            connector="postgres", url=postgres_srv.url, **{"postgres.table": tables["pg_users"]}
        )
        .load()
        .count()
        == USERS
    )
    assert not spark.catalog.tableExists(name)  # temporary views are per session
    other.createDataFrame([(1, 7), (2, 99), (3, None)], "e long, uid long").createOrReplaceTempView(
        "sj_other_events"
    )
    sql = f"SELECT o.e, u.name FROM sj_other_events o LEFT JOIN {name} u ON o.uid = u.user_id"
    clear_decisions(other)
    clear_decisions(spark)
    frame = other.sql(sql)
    assert "ArrowEvalPythonUDTF" in plan_text(frame, "simple")
    assert sorted(tuple(r) for r in frame.collect()) == [(1, "user 7"), (2, None), (3, None)]
    assert jvm_decisions(other)[-1][0] == "lookup"
    assert jvm_decisions(spark) == []  # the first session's decisions are its own
    assert lookup_metrics(name, spark=other).rows == 3
    assert lookup_metrics(name, spark=other).strategy == "lookup"
    with pytest.raises(KeyError, match="registered in this session"):
        lookup_metrics(name, spark=spark)
    # the first session still joins its own tables as lookups
    assert (
        decided(
            spark,
            f"SELECT * FROM {tables['events']} e JOIN {tables['users']} u ON e.user_id = u.user_id",
        )[-1][0]
        == "lookup"
    )


# -- what must stay Spark's: the store's equality, collations, errors, hidden columns ---------


def test_a_key_the_store_matches_otherwise_gives_spark_rows(
    spark: Any, postgres_srv: Any, pg: Any, table_name: str
) -> None:
    """A char(4) key (Postgres pads it, and matches 'ab' to 'ab  '): Spark's join compares the
    scanned 'ab  ' with 'ab' and finds nothing. The lookups compare each row's own key with
    the asked one as Spark does: the rewritten JOIN gives Spark's rows."""
    pg(f"CREATE TABLE {table_name}_codes (code char(4) PRIMARY KEY, label text)")
    pg(f"INSERT INTO {table_name}_codes VALUES ('ab', 'x'), ('cdef', 'y')")
    register_lookup_table(
        spark,
        "sj_codes",
        schema="code string, label string",
        options={
            "connector": "postgres",
            "url": postgres_srv.url,
            "postgres.table": f"{table_name}_codes",
        },
    )
    spark.createDataFrame([("ab",), ("cdef",), ("zz",)], "c string").createOrReplaceTempView(
        "sj_code_input"
    )
    sql = "SELECT i.c, k.label FROM sj_code_input i LEFT JOIN sj_codes k ON i.c = k.code"
    assert decided(spark, sql)[-1][0] == "lookup"
    got = same_both_ways(spark, sql)
    assert got == Counter({("ab", None): 1, ("cdef", "y"): 1, ("zz", None): 1})
    padded = "SELECT i.c, k.label FROM (SELECT 'ab  ' AS c) i JOIN sj_codes k ON i.c = k.code"
    assert same_both_ways(spark, padded) == Counter({("ab  ", "x"): 1})
    pg(f"DROP TABLE {table_name}_codes")


def test_collations_floats_and_raising_conditions(
    spark: Any, postgres_srv: Any, tables: dict[str, str]
) -> None:
    events, acc, users = tables["events"], tables["acc"], tables["users"]
    # a comparison under a collation: Spark's equality is not the store's
    collated = (
        f"SELECT e.event_id, a.owner FROM (SELECT event_id, user_id, 'EU' AS region FROM "
        f"{events}) e JOIN {acc} a ON e.region COLLATE UTF8_LCASE = a.region "
        "AND e.user_id = a.acct"
    )
    assert decided(spark, collated)[-1][0] == "spark"
    assert sum(same_both_ways(spark, collated, rewritten=False).values()) == sum(
        1 for _, u, _, _ in EVENTS if u is not None and u < 5
    )
    # a double key: Spark equates NaN with NaN and -0.0 with 0.0, a store compares text
    spark.read.format("asynclookup").schema("score double, name string").options(
        connector="redis", url="redis://127.0.0.1:9/0", **{"redis.key.pattern": "s:{key}"}
    ).load().createOrReplaceTempView("sj_double")
    doubled = f"SELECT e.event_id, d.name FROM {events} e JOIN sj_double d ON e.user_id = d.score"
    outcome, _, _, why = decided(spark, doubled)[-1]
    assert outcome == "spark" and "a double key compares otherwise" in why, why
    # a LEFT JOIN's condition on the input that may raise (user 60 has no row, so Spark never
    # evaluates it there): Spark's join evaluates it, against the lookups of the input's keys
    raising = (
        f"SELECT e.event_id, u.name FROM {events} e LEFT JOIN {users} u "
        "ON e.user_id = u.user_id AND 10 DIV (e.user_id - 60) <> 7"
    )
    outcome, _, _, why = decided(spark, raising)[-1]
    assert outcome == "lookup" and "Spark's join against the lookups" in why, why
    assert same_both_ways(spark, raising) == Counter(
        (e, user(u)[0] if u is not None and u < USERS and 10 // (u - 60) != 7 else None)
        for e, u, _, _ in EVENTS
    )


def test_hidden_columns_and_watermarks(spark: Any, tables: dict[str, str], tmp_path: Any) -> None:
    """A query that reads the input's hidden _metadata keeps Spark's join; a stream's
    watermark passes through the lookup (a windowed aggregation in append mode after it)."""
    spark.createDataFrame(
        EVENTS[:20], "event_id long, user_id long, uid_int int, flag int"
    ).write.parquet(str(tmp_path / "events.parquet"))
    files = f"parquet.`{tmp_path / 'events.parquet'}`"
    hidden = (
        f"SELECT e.event_id, e._metadata.file_name IS NOT NULL AS named, u.name FROM {files} e "
        f"JOIN {tables['users']} u ON e.user_id = u.user_id"
    )
    assert "hidden column _metadata" in decided(spark, hidden)[-1][3]
    assert sum(same_both_ways(spark, hidden, rewritten=False).values()) == 18
    plain = hidden.replace("e._metadata.file_name IS NOT NULL AS named, ", "")
    assert sum(same_both_ways(spark, plain).values()) == 18
    stream = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", 20)
        .option("advanceMillisPerBatch", 10_000)
        .load()
        .selectExpr("timestamp AS ts", "value % 70 AS user_id")
        .withWatermark("ts", "1 second")
    )
    stream.createOrReplaceTempView("sj_marked")
    windowed = spark.sql(
        f"SELECT window(s.ts, '10 seconds') AS w, count(u.name) AS n FROM sj_marked s "
        f"JOIN {tables['users']} u ON s.user_id = u.user_id GROUP BY window(s.ts, '10 seconds')"
    )
    query = (
        windowed.writeStream.outputMode("append")
        .format("memory")
        .queryName("sj_windows")
        .option("checkpointLocation", str(tmp_path / "windows"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 60
        while spark.sql("SELECT count(*) FROM sj_windows").first()[0] < 2:
            assert time.monotonic() < deadline and query.exception() is None, query.exception()
            time.sleep(0.2)
    finally:
        query.stop()
    assert all(0 < r.n <= 20 for r in spark.sql("SELECT * FROM sj_windows").collect())
