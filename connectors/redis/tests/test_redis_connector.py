"""The Redis connector against a real Redis server."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from typing import Any

import pyarrow as pa
import pytest
from asynclookup_redis import RedisLookupClient

from lookup_source.engine.metrics import LookupMetrics
from lookup_source.errors import LookupFailedError, OptionError, SchemaError
from lookup_source.spark.plan import LookupPlan
from tests.helpers import INT64, run_keys
from tests.servers import RedisServer, free_port


def lookup(
    url: str,
    schema: str,
    keys: list[Any],
    *,
    key_type: pa.DataType = INT64,
    stats: list[LookupMetrics] | None = None,
    client_factory: Any = None,
    **options: str,
) -> list[dict[str, Any]]:
    """Run the engine with the Redis connector over one batch of keys; return the rows."""
    return run_keys(
        {"connector": "redis", "url": url, **options},
        schema,
        keys,
        key_type=key_type,
        stats=stats,
        client_factory=client_factory,
    )


def test_json_values_of_every_type(redis_srv: RedisServer, redis_db: Any, prefix: str) -> None:
    records = {
        i: {
            "name": f"user {i}",
            "tier": i % 3,
            "score": i / 4,
            "active": i % 2 == 0,
            "tags": [f"t{i}", "x"],
            "address": {"city": "Paris", "zip": 75000 + i},
            "created": f"2024-01-0{1 + i % 9}T12:00:00",
            "ignored": "extra fields are ignored",
        }
        for i in range(1, 201)
    }
    redis_db.mset({f"{prefix}user:{i}": json.dumps(r) for i, r in records.items()})
    schema = (
        "user_id long, name string, tier int, score double, active boolean, tags array<string>, "
        "address struct<city: string, zip: int>, created timestamp, absent string"
    )
    keys = [*range(1, 201), 999, 5, None]
    rows = lookup(
        redis_srv.url,
        schema,
        keys,
        **{"redis.key.pattern": f"{prefix}user:{{key}}", "batch.size": "37"},
    )
    assert [r["user_id"] for r in rows] == keys
    for row in rows:
        source = records.get(row["user_id"])
        if source is None:
            assert all(row[c] is None for c in ("name", "tier", "score", "tags", "address"))
            continue
        assert row["name"] == source["name"]
        assert row["tier"] == source["tier"]
        assert row["score"] == source["score"]
        assert row["active"] == source["active"]
        assert row["tags"] == source["tags"]
        assert row["address"] == source["address"]
        assert row["created"] == dt.datetime.fromisoformat(source["created"]).replace(
            tzinfo=dt.timezone.utc
        )
        assert row["absent"] is None


def test_hash_values_are_typed(redis_srv: RedisServer, redis_db: Any, prefix: str) -> None:
    for i in range(1, 51):
        redis_db.hset(f"{prefix}h:{i}", mapping={"name": f"n{i}", "tier": str(i), "vip": "true"})
    rows = lookup(
        redis_srv.url,
        "id long, name string, tier int, vip boolean, nope string",
        [1, 50, 51],
        **{"redis.key.pattern": f"{prefix}h:{{id}}", "redis.value.format": "hash"},
    )
    assert rows == [
        {"id": 1, "name": "n1", "tier": 1, "vip": True, "nope": None},
        {"id": 50, "name": "n50", "tier": 50, "vip": True, "nope": None},
        {"id": 51, "name": None, "tier": None, "vip": None, "nope": None},
    ]


def test_string_values_text_and_binary(redis_srv: RedisServer, redis_db: Any, prefix: str) -> None:
    redis_db.set(f"{prefix}s:a", "42")
    redis_db.set(f"{prefix}s:b", b"\xff\x00raw")
    pattern = {"redis.key.pattern": f"{prefix}s:{{key}}", "redis.value.format": "string"}
    rows = lookup(redis_srv.url, "k string, v int", ["a", "zz"], key_type=pa.string(), **pattern)
    assert rows == [{"k": "a", "v": 42}, {"k": "zz", "v": None}]
    rows = lookup(redis_srv.url, "k string, v binary", ["b"], key_type=pa.string(), **pattern)
    assert rows == [{"k": "b", "v": b"\xff\x00raw"}]
    rows = lookup(
        redis_srv.url,
        "k string, v string",
        ["b"],
        key_type=pa.string(),
        **{**pattern, "on.error": "column"},
    )
    assert rows[0]["v"] is None and "not UTF-8 text" in rows[0]["_lookup_error"]


def test_composite_keys(redis_srv: RedisServer, redis_db: Any, prefix: str) -> None:
    redis_db.set(f"{prefix}acme:7", json.dumps({"name": "acme seven"}))
    redis_db.set(f"{prefix}beta:7", json.dumps({"name": "beta seven"}))
    rows = lookup(
        redis_srv.url,
        "tenant string, user_id long, name string",
        [("acme", 7), ("beta", 7), ("acme", 8)],
        **{"key.column": "tenant,user_id", "redis.key.pattern": f"{prefix}{{tenant}}:{{user_id}}"},
    )
    assert [r["name"] for r in rows] == ["acme seven", "beta seven", None]


def test_odd_keys_reach_redis_verbatim(redis_srv: RedisServer, redis_db: Any, prefix: str) -> None:
    odd = ["", "a b", "ünïcödé", "quote'\"", "100%", "a/b", "{key}", "}{", "x" * 5000]
    for key in odd:
        redis_db.set(f"{prefix}{key}", json.dumps({"v": key}))
    rows = lookup(
        redis_srv.url,
        "k string, v string",
        odd,
        key_type=pa.string(),
        **{"redis.key.pattern": f"{prefix}{{key}}"},
    )
    assert [r["v"] for r in rows] == odd


def test_malformed_values_are_reported_per_key(
    redis_srv: RedisServer, redis_db: Any, prefix: str
) -> None:
    redis_db.set(f"{prefix}1", json.dumps({"name": "fine", "tier": 1}))
    redis_db.set(f"{prefix}2", "{not json")
    redis_db.set(f"{prefix}3", json.dumps([1, 2]))
    redis_db.set(f"{prefix}4", json.dumps({"name": "x", "tier": "high"}))
    redis_db.hset(f"{prefix}5", mapping={"name": "a hash"})
    options = {"redis.key.pattern": f"{prefix}{{key}}", "on.error": "column"}
    rows = {
        r["id"]: r
        for r in lookup(redis_srv.url, "id long, name string, tier int", [1, 2, 3, 4, 5], **options)
    }
    assert rows[1]["name"] == "fine" and rows[1]["_lookup_error"] is None
    assert rows[2]["_lookup_error"] == (
        f"key 2: Redis key '{prefix}2' does not hold valid JSON: '{{not json'"
    )
    assert rows[3]["_lookup_error"] == (
        f"key 3: Redis key '{prefix}3' holds a JSON array with a number in it; expected an "
        "object or an array of objects (one per match)"
    )
    assert "key 4: column 'tier' expects int, got str 'high'" in rows[4]["_lookup_error"]
    assert rows[4]["name"] is None
    # MGET answers nil for a key that holds a hash: it is missing, not an error
    assert rows[5]["name"] is None and rows[5]["_lookup_error"] is None
    with pytest.raises(LookupFailedError, match=r"redis lookup .* failed for 1 key .*valid JSON"):
        lookup(
            redis_srv.url,
            "id long, name string",
            [1, 2],
            **{"redis.key.pattern": f"{prefix}{{key}}"},
        )


def test_a_json_array_of_objects_is_several_matches(
    redis_srv: RedisServer, redis_db: Any, prefix: str
) -> None:
    redis_db.set(f"{prefix}1", json.dumps([{"name": "a", "tier": 1}, {"name": "b", "tier": 2}]))
    redis_db.set(f"{prefix}2", json.dumps([]))  # no match
    redis_db.set(f"{prefix}3", json.dumps({"name": "c", "tier": 3}))
    redis_db.set(f"{prefix}4", json.dumps("text"))
    redis_db.set(f"{prefix}5", json.dumps([{"name": "d"}, None]))
    options = {"redis.key.pattern": f"{prefix}{{key}}", "on.error": "column"}
    schema = "id long, name string, tier int"
    rows = lookup(redis_srv.url, schema, [3, 1, 2, 4, 5, 1], **options)
    assert [(r["id"], r["name"], r["tier"]) for r in rows] == [
        (3, "c", 3),
        (1, "a", 1),
        (1, "b", 2),
        (2, None, None),
        (4, None, None),
        (5, None, None),
        (1, "a", 1),
        (1, "b", 2),
    ]
    errors = {r["id"]: r["_lookup_error"] for r in rows}
    assert errors[1] is None and errors[2] is None and errors[3] is None
    assert "holds a JSON string; expected an object or an array of objects" in errors[4]
    assert "holds a JSON array with a null in it" in errors[5]
    # the fast path (all objects or arrays of objects) gives the same rows as the reference
    fast = lookup(redis_srv.url, schema, [3, 1, 2, 1], **options)
    assert fast == [r for r in rows if r["id"] in (1, 2, 3)]


def test_wrong_redis_type_in_hash_mode_is_a_per_key_error(
    redis_srv: RedisServer, redis_db: Any, prefix: str
) -> None:
    redis_db.hset(f"{prefix}1", mapping={"name": "hash"})
    redis_db.set(f"{prefix}2", "a string")
    rows = lookup(
        redis_srv.url,
        "id long, name string",
        [1, 2],
        **{
            "redis.key.pattern": f"{prefix}{{key}}",
            "redis.value.format": "hash",
            "on.error": "column",
        },
    )
    assert rows[0]["name"] == "hash"
    assert "WRONGTYPE" in rows[1]["_lookup_error"]


def test_password_authentication(redis_srv: RedisServer, redis_db: Any, prefix: str) -> None:
    user = f"u{prefix.rstrip(':')}"
    redis_db.execute_command("ACL", "SETUSER", user, "on", ">s3cret-pw", "~*", "+@all")
    try:
        redis_db.set(f"{prefix}1", json.dumps({"name": "authed"}))
        url = f"redis://{user}:s3cret-pw@{redis_srv.host}:{redis_srv.port}/{redis_srv.db}"
        rows = lookup(url, "id long, name string", [1], **{"redis.key.pattern": f"{prefix}{{key}}"})
        assert rows[0]["name"] == "authed"
        bad = f"redis://{user}:wrong-pw@{redis_srv.host}:{redis_srv.port}/{redis_srv.db}"
        with pytest.raises(LookupFailedError) as info:
            lookup(bad, "id long, name string", [1], **{"retry.initial-delay.ms": "500"})
        assert info.value.attempts == 1  # an authentication failure is never retried
        assert "wrong-pw" not in str(info.value)
        assert f"{user}:***@" in str(info.value)
    finally:
        redis_db.execute_command("ACL", "DELUSER", user)


def test_unreachable_server_fails_after_retries_naming_the_address() -> None:
    port = free_port()  # nothing listens there
    stats: list[LookupMetrics] = []
    with pytest.raises(LookupFailedError) as info:
        lookup(
            f"redis://127.0.0.1:{port}/0",
            "id long, name string",
            [1, 2, 3],
            stats=stats,
            **{
                "retry.max-attempts": "3",
                "retry.initial-delay.ms": "10",
                "retry.max-delay.ms": "20",
                "timeout.ms": "2000",
            },
        )
    message = str(info.value)
    assert f"redis lookup at redis://127.0.0.1:{port}/0 failed for 3 keys" in message
    assert "after 3 attempts" in message
    assert stats[0].retries == 2 and stats[0].failed_keys == 3


def test_dropped_connections_are_retried(
    redis_srv: RedisServer, redis_db: Any, prefix: str
) -> None:
    redis_db.mset({f"{prefix}{i}": json.dumps({"n": i}) for i in range(300)})
    calls = 0

    class KillingClient(RedisLookupClient):
        async def lookup_arrow(self, keys):  # type: ignore[no-untyped-def]
            nonlocal calls
            calls += 1
            if calls in (2, 4):  # cut every client connection under the running job
                redis_db.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
            return await super().lookup_arrow(keys)

    rows = lookup(
        redis_srv.url,
        "id long, n long",
        list(range(300)),
        client_factory=KillingClient,
        **{
            "redis.key.pattern": f"{prefix}{{key}}",
            "batch.size": "50",
            "capacity": "2",
            "retry.initial-delay.ms": "10",
        },
    )
    assert [r["n"] for r in rows] == list(range(300))


def test_server_restart_mid_job(redis_srv: RedisServer, redis_db: Any, prefix: str) -> None:
    if not redis_srv.restartable:
        pytest.skip("the Redis server is not owned by the tests")
    keys = list(range(2000))
    redis_db.mset({f"{prefix}{i}": json.dumps({"n": i}) for i in keys})
    calls = 0
    stats: list[LookupMetrics] = []

    class RestartingClient(RedisLookupClient):
        async def lookup_arrow(self, keys):  # type: ignore[no-untyped-def]
            nonlocal calls
            calls += 1
            if calls == 5:
                redis_srv.stop()
                threading.Timer(0.3, redis_srv.start).start()
            return await super().lookup_arrow(keys)

    try:
        rows = lookup(
            redis_srv.url,
            "id long, n long",
            keys,
            client_factory=RestartingClient,
            stats=stats,
            **{
                "redis.key.pattern": f"{prefix}{{key}}",
                "batch.size": "100",
                "capacity": "4",
                # about 25 s of retrying: a restart takes far less, also on a busy machine
                "retry.max-attempts": "30",
                "retry.initial-delay.ms": "100",
                "retry.max-delay.ms": "1000",
            },
        )
    finally:
        time.sleep(0.5)
    # the server keeps nothing on disk: keys looked up after the restart are missing, not wrong
    for row in rows:
        assert row["n"] in (row["id"], None)
    assert [r["id"] for r in rows] == keys
    assert stats[0].retries >= 1
    assert sum(r["n"] is not None for r in rows) >= 100  # what was fetched before the stop


def test_connections_are_closed_after_the_task(
    redis_srv: RedisServer, redis_db: Any, prefix: str
) -> None:
    def clients() -> int:
        return len(redis_db.client_list(_type="normal"))

    before = clients()
    lookup(
        redis_srv.url,
        "id long, n long",
        list(range(1000)),
        **{"redis.key.pattern": f"{prefix}{{key}}", "batch.size": "10", "capacity": "16"},
    )
    assert clients() == before


@pytest.mark.parametrize(
    ("options", "schema", "error", "message"),
    [
        ({"url": "http://x"}, "id long, v string", OptionError, "must start with redis://"),
        (
            {"redis.key.pattern": "u:{nope}"},
            "id long, v string",
            OptionError,
            "uses placeholder {nope}",
        ),
        ({"redis.key.pattern": "constant"}, "id long, v string", OptionError, "no placeholder"),
        (
            {"redis.key.pattern": "{a}", "key.column": "a,b"},
            "a long, b long, v string",
            OptionError,
            "must use every key column; missing b",
        ),
        ({"redis.key.pattern": "u:{key"}, "id long, v string", OptionError, "not a valid template"),
        (
            {"redis.value.format": "string"},
            "id long, v string, w string",
            SchemaError,
            "has 2 value columns",
        ),
    ],
)
def test_configuration_errors(options: dict[str, str], schema: str, error: type, message: str):
    with pytest.raises(error, match=message):
        LookupPlan.build({"connector": "redis", "url": "redis://h:1/0", **options}, schema)


def test_url_is_required() -> None:
    with pytest.raises(OptionError, match="option 'url': is required for connector redis"):
        LookupPlan.build({"connector": "redis"}, "id long, v string")


def test_values_of_ten_megabytes(redis_srv: RedisServer, redis_db: Any, prefix: str) -> None:
    blob = "x" * 10_000_000
    redis_db.set(f"{prefix}big", json.dumps({"blob": blob, "n": 1}))
    redis_db.set(f"{prefix}small", json.dumps({"blob": "s", "n": 2}))
    rows = lookup(
        redis_srv.url,
        "k string, blob string, n int",
        ["big", "small"],
        key_type=pa.string(),
        **{"redis.key.pattern": f"{prefix}{{key}}"},
    )
    assert len(rows[0]["blob"]) == 10_000_000 and rows[0]["blob"] == blob and rows[0]["n"] == 1
    assert rows[1] == {"k": "small", "blob": "s", "n": 2}


class ReferenceRedis(RedisLookupClient):
    """The Redis connector decoding every reply value by value: the reference path."""

    def _json_matches(self, keys, key_texts, replies):  # type: ignore[no-untyped-def]
        return self._reference(keys, self._decode_json(keys, key_texts, replies))

    def _string_matches(self, keys, key_texts, replies):  # type: ignore[no-untyped-def]
        return self._reference(keys, self._decode_strings(keys, key_texts, replies))

    def _hash_matches(self, keys, key_texts, replies):  # type: ignore[no-untyped-def]
        return self._reference(keys, self._decode_hashes(keys, key_texts, replies))


HASH_SCHEMA = (
    "k string, name string, tier int, score double, active boolean, raw binary, day date, "
    "at timestamp"
)
TYPED_SCHEMA = (
    "k string, name string, tier int, small tinyint, score double, ratio float, active boolean, "
    "raw binary, day date, at timestamp, local timestamp_ntz, amount decimal(10,2), "
    "tags array<string>, address struct<city: string, zip: int>"
)


def typed_record(i: int) -> dict[str, Any]:
    return {
        "name": ["Ada", "", "ünïcödé 漢字 😀", None, "x" * 300][i % 5],
        "tier": [1, -7, 2**31 - 1, None, 0][i % 5],
        "small": [1, -128, 127, None, 3][i % 5],
        "score": [0.5, -0.0, 1e300, None, 3][i % 5],
        "ratio": [1.7, 0.1, None, 2, -3.25][i % 5],
        "active": [True, False, None, True, False][i % 5],
        "raw": ["bytes", "", None, "é", "z"][i % 5],
        "day": ["2024-02-29", None, "1970-01-01", "2099-12-31", "2000-01-01"][i % 5],
        "at": [
            "2024-05-01T10:00:00",
            "2024-05-01T10:00:00+02:00",
            None,
            "2024-05-01 10:00:00.5",
            "1999-12-31T23:59:59Z",
        ][i % 5],
        "local": [
            "2024-05-01T10:00:00",
            None,
            "2024-05-01 10:00:00.25",
            "1970-01-01T00:00:00",
            "2024-01-01",
        ][i % 5],
        "amount": [1.25, "3.5", None, 2, "0.01"][i % 5],
        "tags": [["a", "b"], [], None, ["ü", None], ["x"]][i % 5],
        "address": [
            {"city": "Paris", "zip": 75001},
            {},
            None,
            {"city": None, "zip": 1},
            {"zip": 2},
        ][i % 5],
    }


@pytest.mark.parametrize("value_format", ["json", "hash", "string"])
def test_columnar_path_equals_the_reference_path(
    redis_srv: RedisServer, redis_db: Any, prefix: str, value_format: str
) -> None:
    """Every type, nulls, unicode, odd keys and malformed values: the columnar hot path and
    the value-by-value reference path give the same rows and the same errors."""
    odd = ["", "a b", "ünï", "quote'\"", "100%", "{key}", "x" * 500]
    keys = [f"k{i}" for i in range(60)] + odd + ["absent-1", "absent-2"]
    schema = TYPED_SCHEMA
    for i, key in enumerate(keys[:-2]):
        record = typed_record(i)
        if value_format == "json":
            text = json.dumps(record)
            if i % 17 == 3:
                text = "{not json"  # malformed
            elif i % 23 == 5:
                text = json.dumps({**record, "tier": "high"})  # a value that does not fit
            redis_db.set(f"{prefix}{key}", text)
        elif value_format == "hash":
            flat = {f: str(v) for f, v in record.items() if isinstance(v, (str, int, float, bool))}
            if i % 19 == 4:
                redis_db.set(f"{prefix}{key}", "not a hash")  # WRONGTYPE for HMGET
                continue
            if i % 13 == 6:
                flat = {"unrelated": "field"}  # an existing hash without the value fields
            redis_db.hset(f"{prefix}{key}", mapping=flat)
            schema = HASH_SCHEMA
        else:
            value = ["42", "-1", "x", "", "7.0"][i % 5] if i % 2 else str(i)
            redis_db.set(f"{prefix}{key}", value)
            schema = "k string, v int"
    options = {
        "redis.key.pattern": f"{prefix}{{key}}",
        "redis.value.format": value_format,
        "on.error": "column",
        "batch.size": "16",
    }
    fast = lookup(redis_srv.url, schema, keys, key_type=pa.string(), **options)
    slow = lookup(
        redis_srv.url, schema, keys, key_type=pa.string(), client_factory=ReferenceRedis, **options
    )
    assert [r["k"] for r in fast] == keys
    assert fast == slow
    errors = [r["_lookup_error"] for r in fast if r["_lookup_error"]]
    assert errors, "the data holds malformed values: some rows must report them"
    columns = [c for c in fast[0] if c not in ("k", "_lookup_error")]
    with_values = [r for r in fast if any(r[c] is not None for c in columns)]
    assert len(with_values) > len(keys) // 2  # most keys were read, not just reported
    assert all(r[c] is None for r in fast if r["k"].startswith("absent") for c in columns)


def test_composite_keys_columnar_equals_reference(
    redis_srv: RedisServer, redis_db: Any, prefix: str
) -> None:
    for tenant in ("acme", "bé ta", ""):
        for user in range(20):
            redis_db.set(
                f"{prefix}{tenant}:{user}", json.dumps({"name": f"{tenant}/{user}", "n": user})
            )
    keys = [(t, u) for t in ("acme", "bé ta", "", "none") for u in range(0, 25, 3)]
    options = {
        "key.column": "tenant,user_id",
        "redis.key.pattern": f"{prefix}{{tenant}}:{{user_id}}",
    }
    schema = "tenant string, user_id long, name string, n int"
    fast = lookup(redis_srv.url, schema, keys, **options)
    slow = lookup(redis_srv.url, schema, keys, client_factory=ReferenceRedis, **options)
    assert fast == slow
    assert [r["name"] for r in fast] == [
        f"{t}/{u}" if t != "none" and u < 20 else None for t, u in keys
    ]


def test_binary_keys_reach_redis_byte_for_byte(
    redis_srv: RedisServer, redis_db: Any, prefix: str
) -> None:
    raw = [b"\xff\x00bin", b"plain", "ünï".encode()]
    for i, key in enumerate(raw):
        redis_db.set(prefix.encode() + key, json.dumps({"v": i}))
    rows = lookup(
        redis_srv.url,
        "k binary, v int",
        [*raw, b"\xfe"],
        key_type=pa.binary(),
        **{"redis.key.pattern": f"{prefix}{{key}}"},
    )
    assert [r["v"] for r in rows] == [0, 1, 2, None]


def test_redis_password_from_the_environment(
    redis_srv: RedisServer, redis_db: Any, prefix: str, monkeypatch: Any
) -> None:
    user = f"env{prefix.rstrip(':')}"
    redis_db.execute_command("ACL", "SETUSER", user, "on", ">from-env-pw", "~*", "+@all")
    try:
        redis_db.set(f"{prefix}1", json.dumps({"name": "via env"}))
        monkeypatch.setenv("TEST_REDIS_PASSWORD", "from-env-pw")
        url = f"redis://{user}@{redis_srv.host}:{redis_srv.port}/{redis_srv.db}"
        rows = lookup(
            url,
            "id long, name string",
            [1],
            **{
                "redis.key.pattern": f"{prefix}{{key}}",
                "redis.password.env": "TEST_REDIS_PASSWORD",
            },
        )
        assert rows[0]["name"] == "via env"
    finally:
        redis_db.execute_command("ACL", "DELUSER", user)


def test_a_scan_reads_only_the_keys_a_lookup_reaches(
    redis_srv: RedisServer, redis_db: Any, prefix: str
) -> None:
    """``user:05`` reads as the long key 5, but a lookup of 5 asks ``user:5``: the scan leaves
    it out (``007`` too), so that Spark's join over the scan and lookups find the same rows."""
    from lookup_source.engine.scan import scan_batches

    for name, value in (("5", "five"), ("05", "padded"), ("007", "padded too"), ("8", "eight")):
        redis_db.set(f"{prefix}u:{name}", json.dumps({"name": value}))
    plan = LookupPlan.build(
        {"connector": "redis", "url": redis_srv.url, "redis.key.pattern": f"{prefix}u:{{key}}"},
        "user_id long, name string",
    )
    config = plan.connector_config()
    key_fields = tuple(pa.field(n, t) for n, t in zip(config.key_columns, config.key_types))
    value_fields = tuple(plan.value_arrow_fields())
    batches = scan_batches(RedisLookupClient, config, plan.options, key_fields, value_fields, 0, 1)
    rows = [r for batch in batches for r in batch.to_pylist()]
    assert sorted((r["user_id"], r["name"]) for r in rows) == [(5, "five"), (8, "eight")]
    looked_up = lookup(
        redis_srv.url,
        "user_id long, name string",
        [5, 7, 8],
        **{"redis.key.pattern": f"{prefix}u:{{key}}"},
    )
    assert [r["name"] for r in looked_up] == ["five", None, "eight"]


@pytest.mark.parametrize("form", ["string", "hash"])
def test_a_semi_or_anti_join_asks_only_whether_keys_exist(
    redis_srv: RedisServer, redis_db: Any, prefix: str, form: str
) -> None:
    """With no value column asked for (a semi or anti join's plan), the lookup is ``EXISTS``:
    a value the schema could not read does not matter, and no value is read at all."""
    from lookup_source.engine.runner import run_lookups

    if form == "string":
        redis_db.set(f"{prefix}e:1", "not a number")
    else:
        redis_db.hset(f"{prefix}e:1", mapping={"n": "not a number"})
    options = {
        "connector": "redis",
        "url": redis_srv.url,
        "redis.key.pattern": f"{prefix}e:{{key}}",
        "redis.value.format": form,
    }
    plan = LookupPlan.build(options, "k long, n int")
    keys = pa.record_batch({"k": pa.array([1, 2, None, 1], pa.int64())})
    for how, expected in (("semi", [1, 1]), ("anti", [2, None])):
        existence = plan.for_how(how)
        assert existence.value_fields == ()  # what the store is asked for: nothing but the key
        out = run_lookups(
            [keys], existence.engine_spec(("k",), how=how), existence.connector_config()
        )
        assert [r["k"] for b in out for r in b.to_pylist()] == expected
    with pytest.raises(LookupFailedError, match="not a number"):  # the values, asked: unreadable
        list(run_lookups([keys], plan.engine_spec(("k",), how="left"), plan.connector_config()))
    json_plan = LookupPlan.build({**options, "redis.value.format": "json"}, "k long, n int")
    assert json_plan.for_how("semi").value_fields  # a JSON array may hold no match: read it


def test_table_facts_say_whether_a_key_matches_the_pattern(
    redis_srv: RedisServer, redis_db: Any, prefix: str
) -> None:
    """A SQL ``NOT IN``'s answer depends on whether the table holds any row: ``SCAN`` until
    the first key matching the pattern (a key of another pattern is not a row)."""
    from lookup_source.connector_api.client import TableFacts
    from lookup_source.engine.scan import table_facts

    plan = LookupPlan.build(
        {"connector": "redis", "url": redis_srv.url, "redis.key.pattern": f"{prefix}f:{{key}}"},
        "k long, name string",
    )
    config = plan.connector_config()
    redis_db.set(f"{prefix}other:1", "{}")
    assert table_facts(RedisLookupClient, config) == TableFacts(null_key=False, any_row=False)
    redis_db.set(f"{prefix}f:1", json.dumps({"name": "one"}))
    assert table_facts(RedisLookupClient, config) == TableFacts(null_key=False, any_row=True)
