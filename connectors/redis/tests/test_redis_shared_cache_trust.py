"""What the shared cache tier trusts, tried as a probe would, on a real redis-server: tenants
that differ only in a secret never share answers; a value is believed only when its tag proves
it was written by a lookup with the same identity for that very key; a poisoned, forged,
oversized or moved value is a miss and a metric, never a crash or a wrong row; a hit lives in
the worker's cache no longer than it had left in the tier."""

from __future__ import annotations

import asyncio
import functools
import struct
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from lookup_source.connector_api import ConnectorConfig
from lookup_source.connector_api.options import declared_options
from lookup_source.engine.clock import Clocks
from lookup_source.engine.kept.identity import LookupIdentity, function_state
from lookup_source.engine.kept.shared_cache import (
    TAG_BYTES,
    RejectedValue,
    SharedTier,
    ValueCodec,
    namespace,
)
from lookup_source.engine.metrics import LookupMetrics
from lookup_source.engine.request.answers import MISSING
from lookup_source.registry import resolve_connector
from lookup_source.service import BackgroundHttpServer
from tests.helpers import run_keys
from tests.servers import RedisServer

FIELDS = [pa.field("name", pa.string()), pa.field("n", pa.int64())]
KEY = b"k" * 32
SECRET_A, SECRET_B = "tenant-A-secret", "tenant-B-secret"


def config(url: str = "https://api.example.com/users/{key}", **options: Any) -> ConnectorConfig:
    return ConnectorConfig(
        connector="http",
        url=url,
        key_columns=("id",),
        value_columns=("name", "n"),
        value_types=(pa.string(), pa.int64()),
        options=options,
        key_types=(pa.int64(),),
    )


HTTP_OPTIONS = declared_options(resolve_connector("http"))  # which of them are secrets


def tier_of(cfg: ConnectorConfig, **given: Any) -> bytes:
    return namespace(LookupIdentity.of(cfg, declared=HTTP_OPTIONS, **given))


# -- the namespace knows who is asking ---------------------------------------------------------


@pytest.mark.parametrize(
    "variant",
    [
        "authorization",
        "api-key header",
        "query api_key",
        "url password",
        "url user",
        "env value",
        "certificate content",
        "plain header",
        "shared secret",
    ],
)
def test_lookups_that_differ_only_in_a_secret_never_share_a_namespace(
    variant: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert = tmp_path / "client.pem"

    def tenant(secret: str) -> bytes:
        if variant == "authorization":
            return tier_of(config(**{"http.header.authorization": f"Bearer {secret}"}))
        if variant == "api-key header":
            return tier_of(config(**{"http.header.x-api-key": secret}))
        if variant == "query api_key":
            return tier_of(config(f"https://api.example.com/users/{{key}}?api_key={secret}"))
        if variant == "url password":
            return tier_of(config(f"https://me:{secret}@api.example.com/users/{{key}}"))
        if variant == "url user":
            return tier_of(config(f"https://{secret}@api.example.com/users/{{key}}"))
        if variant == "env value":  # the same variable name, another value on the executor
            monkeypatch.setenv("API_TOKEN", secret)
            return tier_of(config(**{"http.header.x-token.env": "API_TOKEN"}))
        if variant == "certificate content":  # the same path, another certificate
            cert.write_text(f"-----BEGIN CERTIFICATE-----\n{secret}\n")
            return tier_of(config(**{"http.tls.cert-file": str(cert)}))
        if variant == "plain header":
            return tier_of(config(**{"http.header.x-custom": f"token-{secret}"}))
        monkeypatch.setenv("TIER_SECRET", secret)
        return tier_of(config(), secret=secret)

    a, b, a_again = tenant(SECRET_A), tenant(SECRET_B), tenant(SECRET_A)
    assert a != b and a == a_again  # stable for the same tenant, apart for another
    for prefix in (a, b):
        assert SECRET_A.encode() not in prefix and SECRET_B.encode() not in prefix
        assert b"tenant" not in prefix


def test_a_namespace_only_narrows() -> None:
    alice = config(**{"http.header.authorization": "Bearer A"})
    bob = config(**{"http.header.authorization": "Bearer B"})
    same = {"scope": "team"}
    assert tier_of(alice, **same) != tier_of(bob, **same)  # a namespace cannot widen it
    assert tier_of(alice, **same) != tier_of(alice)  # and it narrows it
    # what does not decide an answer keeps lookups together: capacity, batch size, timeouts
    sized = ConnectorConfig(**{**alice.__dict__, "capacity": 7, "batch_size": 3})
    assert tier_of(sized) == tier_of(alice)
    assert "Bearer" not in LookupIdentity.of(alice, declared=HTTP_OPTIONS).public


class Fetcher:
    """A callable object carrying its endpoint and token, as users write them."""

    def __init__(self, base: str, token: str) -> None:
        self.base, self.token = base, token

    async def __call__(self, key: Any) -> Any:
        return {"name": f"{self.base}/{key}"}


async def fetch_with(key: Any, *, token: str, base: str = "https://a") -> Any:
    return {"name": f"{base}/{key}/{token}"}


def test_a_functions_state_is_its_identity() -> None:
    a, b = Fetcher("https://a", "tokA"), Fetcher("https://b", "tokB")
    assert function_state(a) != function_state(b)
    assert function_state(a) == function_state(Fetcher("https://a", "tokA"))  # another job
    pa_, pb = functools.partial(fetch_with, token="A"), functools.partial(fetch_with, token="B")
    assert function_state(pa_) != function_state(pb)

    def closing_over(tokens: list[str]) -> Any:
        async def fetch(key: Any) -> Any:
            return {"name": tokens[0]}

        return fetch

    assert function_state(closing_over(["A"])) != function_state(closing_over(["B"]))
    assert function_state(closing_over(["A"])) == function_state(closing_over(["A"]))

    async def with_default(key: Any, token: str = "A") -> Any:
        return {"name": token}

    changed = functools.update_wrapper(lambda: None, with_default)  # another object, same code
    assert function_state(with_default) != function_state(changed)
    bound_a, bound_b = a.__call__, b.__call__
    assert function_state(bound_a) != function_state(bound_b)
    cfg = config()
    assert tier_of(cfg, function=a) != tier_of(cfg, function=b)


# -- two tenants through one tier, end to end ---------------------------------------------------


class TenantApi(BackgroundHttpServer):
    """Answers each tenant (by its bearer token) with its own rows; counts what it served."""

    def __init__(self) -> None:
        self.served: list[str] = []
        app = web.Application()
        app.router.add_get("/users/{id}", self.user)
        super().__init__(app)

    async def user(self, request: web.Request) -> web.StreamResponse:
        tenant = request.headers.get("Authorization", "").removeprefix("Bearer ")
        self.served.append(tenant)
        if tenant not in ("A", "B"):
            return web.json_response({"error": "who are you"}, status=403)
        user = int(request.match_info["id"])
        return web.json_response({"name": f"{tenant}'s user {user}", "n": user})


def test_tenant_b_never_gets_tenant_as_rows(cache_url: str) -> None:
    with TenantApi() as api:
        stats: list[LookupMetrics] = []

        def as_tenant(token: str) -> list[str | None]:
            options = {
                "connector": "http",
                "url": f"{api.base_url}/users/{{key}}",
                "http.header.Authorization": f"Bearer {token}",
                "cache.shared.url": cache_url,
                "cache.shared.timeout.ms": "10000",  # a busy machine's late read: no miss
                "on.error": "column",
                "retry.max-attempts": "1",
            }
            rows = run_keys(options, "id long, name string, n long", [1, 2, 3], stats=stats)
            return [row["name"] for row in rows]

        assert as_tenant("A") == ["A's user 1", "A's user 2", "A's user 3"]
        assert as_tenant("A") == ["A's user 1", "A's user 2", "A's user 3"]  # from the tier
        assert stats[1].shared_hits == 3 and api.served == ["A"] * 3
        assert as_tenant("B") == ["B's user 1", "B's user 2", "B's user 3"]  # asked itself
        assert stats[2].shared_hits == 0 and api.served[3:] == ["B"] * 3
        assert as_tenant("C") == [None, None, None]  # refused by the service, not the tier's
        assert stats[3].shared_hits == 0


# -- a value proves where it came from ---------------------------------------------------------


def _rows(*names: str) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(
        [{"name": name, "n": i} for i, name in enumerate(names)], schema=pa.schema(FIELDS)
    )


def _reseal(codec: ValueCodec, name: bytes, body: bytes) -> bytes:
    """A value whose body was changed by someone who holds the lookup's identity (its tag
    right): what only validation can catch."""
    return codec._sealed(name, body)


def test_a_value_written_without_the_identity_or_moved_is_a_miss() -> None:
    codec = ValueCodec(FIELDS, KEY, 1 << 20)
    value = codec.encode(b"ns:1", _rows("Ada"), 2**42)
    assert value is not None
    rows, expires = codec.decode(b"ns:1", value)
    assert rows.to_pylist() == [{"name": "Ada", "n": 0}] and expires == 2**42
    forger = ValueCodec(FIELDS, b"x" * 32, 1 << 20)  # well formed, written by another tenant
    with pytest.raises(RejectedValue, match="tag does not match"):
        codec.decode(b"ns:1", forger.encode(b"ns:1", _rows("Mallory"), 2**42) or b"")
    with pytest.raises(RejectedValue, match="tag does not match"):
        codec.decode(b"ns:2", value)  # key 1's value planted under key 2
    tampered = bytearray(value)
    tampered[-1] ^= 1
    with pytest.raises(RejectedValue, match="tag does not match"):
        codec.decode(b"ns:1", bytes(tampered))
    missing = codec.encode_missing(b"ns:1", 2**42)
    assert codec.decode(b"ns:1", missing) == (MISSING, 2**42)
    with pytest.raises(RejectedValue):
        codec.decode(b"ns:2", missing)


def test_lying_offsets_a_claimed_size_and_bounds_are_misses_not_crashes() -> None:
    codec = ValueCodec(FIELDS, KEY, 1 << 16)
    rows = _rows("Ada", "Bob")
    message = rows.serialize().to_pybytes()
    offsets_at = message.find(struct.pack("<iii", 0, 3, 6))  # the name column's offsets
    assert offsets_at > 0
    for lie in (0x7FFFFF00, 300, -5):  # beyond the data, into the worker's memory, negative
        poisoned = bytearray(message)
        poisoned[offsets_at + 8 : offsets_at + 12] = struct.pack("<i", lie)
        packed = codec._codec.compress(bytes(poisoned), asbytes=True)
        body = b"\x01" + struct.pack("<Q", 2**42) + struct.pack("<I", len(poisoned)) + packed
        with pytest.raises(RejectedValue, match="malformed"):
            codec.decode(b"ns:1", _reseal(codec, b"ns:1", body))
    claimed = b"\x01" + struct.pack("<Q", 2**42) + struct.pack("<I", 0xFFFFFFF0) + b"\x28\xb5"
    with pytest.raises(RejectedValue, match="claiming 4,294,967,280 bytes"):
        codec.decode(b"ns:1", _reseal(codec, b"ns:1", claimed))
    with pytest.raises(RejectedValue, match="out of bounds"):
        codec.decode(b"ns:1", b"\x02" + b"\0" * (1 << 17))
    big = _rows("x" * (1 << 17))
    assert codec.encode(b"ns:1", big, 2**42) is None  # larger than the bound: not written


def test_a_value_arrow_itself_compressed_is_refused_before_it_inflates() -> None:
    """A forged value whose Arrow message uses Arrow's own body compression: 100,000,000
    rows in a message of a few KiB, under every size bound; refused before Arrow inflates
    any buffer (it took a worker to 8.5 GiB)."""
    import io

    import numpy as np

    codec = ValueCodec([pa.field("n", pa.int64())], KEY, 4 << 20)
    rows = 100_000_000
    batch = pa.record_batch([pa.array(np.zeros(rows, dtype="int64"))], names=["n"])
    sink = io.BytesIO()
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.ipc.new_stream(sink, batch.schema, options=options) as writer:
        writer.write_batch(batch)
    reader = pa.ipc.MessageReader.open_stream(pa.BufferReader(sink.getvalue()))
    reader.read_next_message()  # the schema
    message = reader.read_next_message().serialize()
    assert message.size < 100_000
    packed = codec._codec.compress(message, asbytes=True)
    body = b"\x01" + struct.pack("<Q", 2**62) + struct.pack("<I", message.size) + packed
    with pytest.raises(RejectedValue, match="compressed by Arrow itself"):
        codec.decode(b"ns:1", _reseal(codec, b"ns:1", body))


VALID = ValueCodec(FIELDS, KEY, 1 << 16)
SAMPLE = VALID.encode(b"ns:7", _rows("Ada", "Bob", "ü"), 2**42) or b""


@settings(max_examples=300, deadline=None)
@given(
    data=st.binary(max_size=600)
    | st.builds(
        lambda cuts, flips: _mutated(SAMPLE, cuts, flips),
        st.integers(0, 40),
        st.lists(st.tuples(st.integers(0, len(SAMPLE) - 1), st.integers(1, 255)), max_size=6),
    ),
    reseal=st.booleans(),
)
def test_the_decoder_gives_a_value_or_a_miss_never_a_crash(data: bytes, reseal: bool) -> None:
    if reseal and len(data) > 1 + TAG_BYTES:  # past the tag: down to Arrow's validation
        data = _reseal(VALID, b"ns:7", data[1 + TAG_BYTES :])
    try:
        value, _ = VALID.decode(b"ns:7", data)
    except RejectedValue:
        return
    if value is not MISSING:
        assert value.schema == VALID.schema
        value.validate(full=True)
        assert len(value.to_pylist()) == value.num_rows


def _mutated(value: bytes, cut: int, flips: list[tuple[int, int]]) -> bytes:
    out = bytearray(value[: len(value) - cut] if cut < len(value) else value)
    for at, bits in flips:
        if at < len(out):
            out[at] ^= bits
    return bytes(out)


# -- time -------------------------------------------------------------------------------------


def test_a_hit_keeps_the_time_it_had_left(redis_srv: RedisServer, cache_url: str) -> None:
    from asynclookup_redis.shared import RedisSharedCache

    from lookup_source.engine.request.answers import RecordAnswer

    now = [1_000.0]

    async def scenario() -> tuple[Any, Any]:
        store = RedisSharedCache(RedisSharedCache.config_for(cache_url))
        await store.open()
        try:
            identity = LookupIdentity.of(config(), scope="time")

            def tier() -> SharedTier:
                return SharedTier(
                    store,
                    identity,
                    FIELDS,
                    LookupMetrics(),
                    ttl_s=10.0,
                    timeout_s=1.0,
                    cache_missing=True,
                    max_value_bytes=1 << 20,
                    clocks=Clocks(wall=lambda: now[0]),
                )

            writer = tier()
            writer.store(RecordAnswer([{"name": "one", "n": 1}, None], [1, 2], FIELDS))
            await writer.aclose(flush=True)
            now[0] += 7.0  # 3 s left
            soon = await tier().lookup([1, 2, 3])
            now[0] += 4.0  # past its time by the writer's clock (Redis keeps it 10 s)
            late = await tier().lookup([1, 2])
            return soon, late
        finally:
            await store.close()

    soon, late = asyncio.run(scenario())
    assert soon.hits == 2 and soon.misses == 1 and soon.missing == 1
    assert soon.ttl_s == pytest.approx(3.0, abs=0.002)
    assert late.hits == 0 and late.misses == 2


def test_a_reader_believes_no_longer_than_its_own_ttl_and_no_miss_it_would_not_keep(
    cache_url: str,
) -> None:
    from asynclookup_redis.shared import RedisSharedCache

    from lookup_source.engine.request.answers import RecordAnswer

    identity = LookupIdentity.of(config(), scope="readers")

    async def scenario() -> tuple[Any, Any]:
        store = RedisSharedCache(RedisSharedCache.config_for(cache_url))
        await store.open()
        try:

            def tier(ttl_s: float, missing: bool) -> SharedTier:
                return SharedTier(
                    store,
                    identity,
                    FIELDS,
                    LookupMetrics(),
                    ttl_s=ttl_s,
                    timeout_s=1.0,
                    cache_missing=missing,
                    max_value_bytes=1 << 20,
                )

            writer = tier(365 * 86_400.0, True)  # a year, misses kept
            writer.store(RecordAnswer([{"name": "one", "n": 1}, None], [1, 2], FIELDS))
            await writer.aclose(flush=True)
            fresh = await tier(1.0, True).lookup([1, 2])  # wants answers of a second at most
            strict = await tier(60.0, False).lookup([1, 2])  # keeps no misses
            return fresh, strict
        finally:
            await store.close()

    fresh, strict = asyncio.run(scenario())
    assert fresh.hits == 2 and fresh.ttl_s is not None and fresh.ttl_s <= 1.0
    assert strict.hits == 1 and strict.missing == 0 and strict.misses == 1


def test_the_worker_cache_keeps_a_hit_no_longer_than_it_had_left() -> None:
    from lookup_source.engine.kept.cache import PartialCache

    now = [0.0]
    cache = PartialCache(100, ttl_s=60.0, clock=lambda: now[0])
    cache.put_many([(1, "from the tier")], ttl_s=3.0)
    cache.put_many([(2, "from the store")])
    now[0] = 2.9
    assert cache.get_many([1, 2]) == {1: "from the tier", 2: "from the store"}
    now[0] = 3.1
    assert cache.get_many([1, 2]) == {2: "from the store"}
    forever = PartialCache(100, ttl_s=0.0, clock=lambda: now[0])
    forever.put_many([(1, "tier")], ttl_s=3.0)
    now[0] = 10.0
    assert forever.get_many([1]) == {}  # a cache without expiry still honours the tier's
