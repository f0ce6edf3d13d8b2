"""The shared cache tier (``cache.shared.url``) on a real redis-server: a second job makes no
request to the store, two lookups never read each other's answers, every value type
round-trips, nothing secret is written, and a cache that is down or silent loses nothing.
What the tier trusts and refuses (tenants, forged and poisoned values) is
test_redis_shared_cache_trust.py."""

from __future__ import annotations

import datetime
import decimal
import time
from typing import Any

import pyarrow as pa
import pytest

from lookup_source.engine.kept.identity import LookupIdentity, function_state
from lookup_source.engine.kept.shared_cache import COOL_OFF_S, ValueCodec, namespace
from lookup_source.engine.runner import run_lookups
from lookup_source.functions import LookupFunction
from lookup_source.settings import CacheSettings, SharedCacheSettings, parse_options
from tests.fakes import FakeClient, FakeStore, key_batch, make_config, make_options, make_spec
from tests.servers import free_port

TABLE = {i: {"name": f"user-{i}", "n": i} for i in range(0, 300, 2)}  # odd keys are missing


def shared(url: str, **settings: Any) -> CacheSettings:
    """The shared tier at ``url``; its reads allowed 10 s unless a test sets their limit: these
    tests are about what the tier holds, and a busy machine can take the default 100 ms."""
    settings.setdefault("timeout_s", 10.0)
    return CacheSettings(shared=SharedCacheSettings(url=url, **settings))


def run(
    store: FakeStore,
    keys: list[Any],
    *,
    spec: Any = None,
    config: Any = None,
    batch: Any = key_batch,
    **options: Any,
) -> tuple[list[dict[str, Any]], Any]:
    spec = spec or make_spec(make_options(**options))
    metrics: list[Any] = []
    out = list(
        run_lookups(
            [batch(keys[i : i + 100]) for i in range(0, len(keys), 100)],
            spec,
            config or make_config(spec),
            client_factory=lambda c: FakeClient(c, store),
            on_metrics=metrics.append,
        )
    )
    return [r for b in out for r in b.to_pylist()], metrics[0]


def test_a_second_job_over_the_same_keys_asks_the_store_nothing(cache_url: str) -> None:
    keys = [*range(300), None, 5, 6]  # the last batch asks keys 5 and 6 again
    first_store = FakeStore(TABLE)
    first, m1 = run(first_store, keys, cache=shared(cache_url))
    assert m1.shared_misses + m1.shared_hits == 302 and m1.shared_errors == 0
    assert sum(len(r) for r in first_store.requests) == m1.shared_misses
    second_store = FakeStore(TABLE)
    second, m2 = run(second_store, keys, cache=shared(cache_url))
    assert second_store.requests == []  # every key, found or missing, from the shared tier
    assert second == first
    assert m2.shared_hits == 302 and m2.shared_misses == 0 and m2.requests == 0
    assert m2.missing_keys == m1.missing_keys == 151
    expected = [(k, TABLE.get(k, {}).get("name")) for k in keys]
    assert [(r["k"], r["name"]) for r in second] == expected


def test_misses_are_not_kept_when_told_and_the_ttl_is_set(cache_url: str, redis_db: Any) -> None:
    settings = shared(cache_url, missing_keys=False, ttl_s=30.0)
    run(FakeStore(TABLE), list(range(20)), cache=settings)
    names = list(redis_db.scan_iter(match="asynclookup:*"))
    assert len(names) == 10  # the ten keys found, not the ten missing
    assert all(0 < redis_db.pttl(name) <= 30_000 for name in names)
    again = FakeStore(TABLE)
    rows, metrics = run(again, list(range(20)), cache=settings)
    assert sorted(k for r in again.requests for k in r) == list(range(1, 20, 2))
    assert metrics.shared_hits == 10 and metrics.shared_misses == 10
    assert [r["name"] for r in rows] == [TABLE.get(k, {}).get("name") for k in range(20)]


def test_two_lookups_with_different_settings_never_read_each_others_answers(
    cache_url: str,
) -> None:
    spec = make_spec(make_options(cache=shared(cache_url)))
    config = make_config(spec)
    run(FakeStore(TABLE), list(range(50)), spec=spec, config=config)
    other_table = {k: {"name": f"other-{k}", "n": -k} for k in range(50)}
    variants = [
        make_config(spec).__class__(**{**config.__dict__, "url": "fake://elsewhere:1"}),
        make_config(spec).__class__(**{**config.__dict__, "options": {"fake.table": "b"}}),
    ]
    for variant in variants:
        store = FakeStore(other_table)
        rows, metrics = run(store, list(range(50)), spec=spec, config=variant)
        assert metrics.shared_hits == 0 and sum(map(len, store.requests)) == 50
        assert [r["name"] for r in rows] == [f"other-{k}" for k in range(50)]
    # another value schema: another namespace too
    wider = make_spec(
        make_options(cache=shared(cache_url)),
        values=(("name", pa.string()), ("n", pa.int64()), ("extra", pa.string())),
    )
    store = FakeStore(other_table)
    rows, metrics = run(store, list(range(50)), spec=wider)
    assert metrics.shared_hits == 0
    # a namespace of its own: nothing shared either
    named = make_spec(make_options(cache=shared(cache_url, namespace="tenant-b")))
    store = FakeStore(other_table)
    rows, metrics = run(store, list(range(50)), spec=named)
    assert metrics.shared_hits == 0 and rows[1]["name"] == "other-1"


def test_nothing_secret_is_written(cache_url: str, redis_db: Any) -> None:
    spec = make_spec(make_options(cache=shared(cache_url)))
    config = make_config(spec)  # its URL holds the password "secret"
    config = config.__class__(
        **{**config.__dict__, "options": {"fake.api-token": "tok-123", "fake.table": "users"}}
    )
    run(FakeStore(TABLE), list(range(10)), spec=spec, config=config)
    names = list(redis_db.scan_iter(match="asynclookup:*"))
    assert names
    for name in names:
        assert b"secret" not in name and b"tok-123" not in name
        assert b"secret" not in redis_db.get(name) and b"tok-123" not in redis_db.get(name)
    # the token is in the identity (by a keyed digest): another token shares nothing
    other = config.__class__(
        **{**config.__dict__, "options": {"fake.api-token": "tok-999", "fake.table": "users"}}
    )
    assert namespace(LookupIdentity.of(config)) != namespace(LookupIdentity.of(other))
    assert namespace(LookupIdentity.of(config)) == namespace(LookupIdentity.of(config))
    store = FakeStore(TABLE)
    _, metrics = run(store, list(range(10)), spec=spec, config=other)
    assert metrics.shared_hits == 0 and sum(map(len, store.requests)) == 10


ALL_TYPES = (
    ("s", pa.string()),
    ("i", pa.int32()),
    ("l", pa.int64()),
    ("f", pa.float64()),
    ("b", pa.bool_()),
    ("d", pa.decimal128(12, 3)),
    ("day", pa.date32()),
    ("ts", pa.timestamp("us", tz="UTC")),
    ("ntz", pa.timestamp("us")),
    ("bin", pa.binary()),
    ("tags", pa.list_(pa.string())),
    ("inner", pa.struct([("x", pa.int64()), ("y", pa.list_(pa.float64()))])),
    ("attrs", pa.map_(pa.string(), pa.int64())),
)


def test_every_value_type_and_several_matches_round_trip(cache_url: str) -> None:
    def record(k: int, copy: int) -> dict[str, Any]:
        return {
            "s": f"ü-{k}-{copy}",
            "i": k,
            "l": 2**40 + k,
            "f": k / 3,
            "b": k % 2 == 0,
            "d": decimal.Decimal(f"{k}.125"),
            "day": datetime.date(2024, 1, 1) + datetime.timedelta(days=k),
            "ts": datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc),
            "ntz": datetime.datetime(2024, 1, 1, 12, 30, k),
            "bin": bytes([0, 255, k]),
            "tags": ["a", None, str(copy)],
            "inner": {"x": k, "y": [1.5, None]},
            "attrs": [("a", k), ("b", None)],
        }

    table = {k: [record(k, 0), record(k, 1)] if k % 3 == 0 else record(k, 0) for k in range(30)}
    table[7] = {**record(7, 0), "s": None, "tags": None, "inner": None, "attrs": None}
    spec = make_spec(make_options(cache=shared(cache_url)), values=ALL_TYPES)
    first, _ = run(FakeStore(table), list(range(30)), spec=spec)
    store = FakeStore(table)
    second, metrics = run(store, list(range(30)), spec=spec)
    assert store.requests == [] and metrics.shared_hits == 30
    assert second == first
    assert len(second) == 40  # 10 keys with two matches
    codec = ValueCodec([pa.field(n, t) for n, t in ALL_TYPES], b"k" * 32, 1 << 20)
    one = pa.RecordBatch.from_pylist([record(3, 0)], schema=codec.schema)
    value = codec.encode(b"name", one, 2**40)
    assert value is not None and len(value) < 720  # compact: the IPC message, zstd, a tag


def test_composite_and_odd_keys(cache_url: str) -> None:
    table = {("a", 1): {"name": "a1", "n": 1}, ("é:b", 2): {"name": "b2", "n": 2}}

    def batch(keys: list[Any]) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays(
            [pa.array([k[0] for k in keys]), pa.array([k[1] for k in keys], type=pa.int64())],
            names=["g", "k"],
        )

    spec = make_spec(make_options(cache=shared(cache_url)), key_columns=("g", "k"))
    keys = [("a", 1), ("é:b", 2), ("a", 2), ("", 0)]
    first, _ = run(FakeStore(table), keys, spec=spec, batch=batch)
    store = FakeStore(table)
    second, _ = run(store, keys, spec=spec, batch=batch)
    assert store.requests == [] and second == first
    assert [r["name"] for r in second] == ["a1", "b2", None, None]


def test_a_value_that_is_not_the_tiers_is_a_miss(cache_url: str, redis_db: Any) -> None:
    spec = make_spec(make_options(cache=shared(cache_url)))
    run(FakeStore(TABLE), [2, 4], spec=spec)
    for name in redis_db.scan_iter(match="asynclookup:*"):
        redis_db.set(name, b"\x01garbage")
    store = FakeStore(TABLE)
    rows, metrics = run(store, [2, 4], spec=spec)
    assert [r["name"] for r in rows] == ["user-2", "user-4"]
    assert store.requests == [[2, 4]] and metrics.shared_misses == 2
    assert metrics.shared_rejected == 2


@pytest.mark.parametrize("down", ["closed", "silent"])
def test_a_cache_that_is_down_loses_nothing(down: str, request: pytest.FixtureRequest) -> None:
    if down == "closed":
        url = f"redis://127.0.0.1:{free_port()}/0"
    else:
        silent = request.getfixturevalue("silent_port")
        url = f"redis://127.0.0.1:{silent}/0"
    keys = list(range(300))
    store = FakeStore(TABLE)
    started = time.monotonic()
    rows, metrics = run(store, keys, cache=shared(url, timeout_s=0.1))
    took = time.monotonic() - started
    assert [r["name"] for r in rows] == [TABLE.get(k, {}).get("name") for k in keys]
    assert sum(len(r) for r in store.requests) == 300
    # one read fails (refused, or no answer in 100 ms); the tier is then left alone
    assert metrics.shared_errors == 1 and metrics.shared_hits == 0
    assert took < COOL_OFF_S


def test_a_functions_namespace_is_its_code_not_its_job() -> None:
    async def geocode(key: Any) -> Any:
        return {"name": str(key)}

    async def other(key: Any) -> Any:
        return {"name": str(key) + "!"}

    first = LookupFunction.of(fetch=geocode)
    again = LookupFunction.of(fetch=geocode)
    assert first.token != again.token
    assert function_state(first.function) == function_state(again.function)
    assert function_state(geocode) != function_state(other)


def test_the_url_is_checked_when_the_options_are_parsed() -> None:
    base = {"connector": "redis", "url": "redis://h"}
    with pytest.raises(Exception, match="cache.shared.url.*memcached"):
        parse_options({**base, "cache.shared.url": "memcached://h:1"})
    with pytest.raises(Exception, match="cache.shared.url.*cache.mode=full"):
        parse_options({**base, "cache.shared.url": "redis://h", "cache.mode": "full"})
    parsed = parse_options({**base, "cache.shared.url": "redis://:pw@h:1/2"})
    assert "pw" not in repr(parsed.cache)


def test_a_store_failing_mid_job_writes_nothing_wrong_and_leaves_nothing_running(
    cache_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    import gc

    from lookup_source.errors import LookupFailedError, PermanentError

    store = FakeStore(TABLE)
    store.fail_keys = {150: PermanentError("the store broke")}
    spec = make_spec(make_options(cache=shared(cache_url), max_attempts=1))
    with pytest.raises(LookupFailedError, match="the store broke"):
        run(store, list(range(300)), spec=spec)
    gc.collect()
    assert "Task was destroyed but it is pending" not in caplog.text
    # what the first job did write is right: a second job over every key, the broken one
    # answered now, gets every row from the tier or the store, each with its own key
    again = FakeStore(TABLE)
    rows, metrics = run(again, list(range(300)), spec=spec)
    assert [(r["k"], r["name"]) for r in rows] == [
        (k, TABLE.get(k, {}).get("name")) for k in range(300)
    ]
    assert metrics.shared_hits + metrics.shared_misses == 300
    assert sum(len(r) for r in again.requests) == metrics.shared_misses  # the rest: the tier


@pytest.mark.parametrize("loops", [("uvloop", "asyncio"), ("asyncio", "uvloop")])
def test_tasks_on_two_loop_kinds_each_read_the_tier_on_their_own_loop(
    cache_url: str, loops: tuple[str, str]
) -> None:
    """A worker keeps a loop of each kind per thread: the tier's client is kept on the loop
    of the task that uses it (an HTTP lookup prefers uvloop, a function asyncio), never used
    from another kind's loop."""
    pytest.importorskip("uvloop", reason="the uvloop extra is not installed")
    from lookup_source.engine.kept.worker import forget_worker

    spec = make_spec(make_options(cache=shared(cache_url)))
    keys = list(range(40))
    forget_worker()
    try:
        for round_, loop in enumerate([*loops, *loops]):
            store = FakeStore(TABLE)

            def factory(config: Any, store: FakeStore = store) -> FakeClient:
                return FakeClient(config, store)

            factory.identity = "kept"  # type: ignore[attr-defined]  # kept by the worker
            factory.preferred_loop = loop  # type: ignore[attr-defined]
            metrics: list[Any] = []
            out = run_lookups(
                [key_batch(keys)],
                spec,
                make_config(spec),
                client_factory=factory,
                on_metrics=metrics.append,
                keep_client=True,
            )
            rows = [r for b in out for r in b.to_pylist()]
            assert [r["name"] for r in rows] == [TABLE.get(k, {}).get("name") for k in keys]
            assert metrics[0].shared_errors == 0, (round_, loop)
            assert metrics[0].shared_hits == (40 if round_ else 0), (round_, loop)
    finally:
        forget_worker()
