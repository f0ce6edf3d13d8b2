"""Redis connector (redis-py asyncio, hiredis).

``connector=redis``, ``url`` as redis-py accepts it (``redis://[user:password@]host:port/db``,
``rediss://`` for TLS, ``unix://``). Keys are formatted with ``redis.key.pattern``; values are
read with MGET (``json``, ``string``) or a pipeline of HMGET (``hash``), ``batch.size`` keys
per round trip, over a pool of at most ``capacity`` connections.

The hot path is columnar: key texts are built in Arrow, the command is packed by hiredis, the
replies are decoded by msgspec (``json``) or Arrow casts (``string``, ``hash``) straight into
typed columns. A request whose replies the fast path does not take as they are (a malformed
value, a type that does not fit) is decoded again value by value, to name the key and the
column at fault.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from asynclookup_redis.scan import any_key, count_keys, reachable_keys
from asynclookup_redis.values import RedisValues
from lookup_source.connector_api import (
    ConnectorConfig,
    ConnectorError,
    KeyTemplate,
    LookupClient,
    Matches,
    OptionError,
    OptionSpec,
    PermanentError,
    SchemaError,
    TableFacts,
    TlsSettings,
    TransientError,
    choice,
    handshake_check,
    parse_required_text,
    password_env_option,
    password_from_env,
    pooled,
    require_url,
    tls_option_specs,
    translated_errors,
    value_batch,
)

_pack: Any
try:
    from hiredis import pack_command as _pack
except ImportError:  # pragma: no cover - hiredis is in the redis extra
    _pack = None


def _driver_info() -> dict[str, Any]:
    """The client's name and version, known once: redis-py would otherwise read its package
    metadata for every connection it opens."""
    import redis

    version = getattr(redis, "__version__", None)
    try:
        from redis.driver_info import DriverInfo
    except ImportError:  # redis-py < 7: the older keyword
        return {"lib_version": version}
    return {"driver_info": DriverInfo(lib_version=version)}


def _arguments(texts: list[str]) -> list[str] | list[bytes]:
    """Redis keys as command arguments: as they are, or as bytes when a binary key holds bytes
    that are not UTF-8 (its text carries them as surrogate escapes)."""
    try:
        "".join(texts).encode("utf-8")
    except UnicodeEncodeError:
        return [t.encode("utf-8", "surrogateescape") for t in texts]
    return texts


def _disconnect(connection: Any) -> Any:
    return connection.disconnect()


def _handshake_check(url: str, tls: TlsSettings) -> AbstractAsyncContextManager[None]:
    """What explains a ``rediss://`` connection reset before any request succeeded (a client
    certificate the server wants or refuses, under TLS 1.3); nothing for ``redis://``, or when
    the URL's own ``ssl_*`` parameters make a context this cannot rebuild."""
    if "?" in url and not tls.configured:
        return nullcontext()
    return handshake_check("redis", url, tls.context, scheme="rediss", default_port=6379)


def classify(error: Exception) -> type[ConnectorError] | ConnectorError | None:
    """What a redis-py exception means to the engine (see ``translated_errors``)."""
    from redis import exceptions as rex

    if isinstance(error, (rex.BusyLoadingError, rex.TryAgainError)):
        return TransientError  # the server is still loading its data set, or busy
    if isinstance(
        error,
        (rex.AuthenticationError, rex.AuthorizationError, rex.NoPermissionError, rex.ResponseError),
    ):
        return PermanentError  # a wrong password, a missing ACL or a bad command
    if isinstance(error, (rex.ConnectionError, rex.TimeoutError)):
        return TransientError
    return None


_REDIS_ERRORS = translated_errors("redis", classify, tls="redis")


KEY_PATTERN: OptionSpec[str] = OptionSpec(
    "redis.key.pattern",
    parse_required_text,
    "{key}",
    "How a key becomes a Redis key: `user:{key}`; composite keys name their columns, "
    "`{tenant}:{user_id}`.",
)
VALUE_FORMAT: OptionSpec[str] = OptionSpec(
    "redis.value.format",
    choice("json", "hash", "string"),
    "json",
    "`json` (a JSON object per key), `hash` (a Redis hash per key) or `string` (the raw "
    "value into the single value column).",
)


log = logging.getLogger("lookup_source")


class RedisLookupClient(LookupClient):
    """Looks keys up in Redis.

    Options:

    - ``redis.key.pattern`` [``{key}``]: how a lookup key becomes a Redis key, e.g.
      ``user:{key}``; composite keys name their columns: ``{tenant}:{user_id}``.
    - ``redis.value.format`` [``json``]: ``json`` (one JSON object per key; fields map to value
      columns by name), ``hash`` (one Redis hash per key; fields map by name), ``string`` (the
      raw value goes into the single value column).
    """

    name: ClassVar[str] = "redis"
    # engine CPU per key, MGET of 500, 100,000 keys outside Spark, two warm runs each:
    # 1.30-1.31 µs on uvloop, 1.37-1.38 on asyncio (771k and 725k keys/s)
    preferred_loop: ClassVar[str] = "uvloop"
    honours_cancellation: ClassVar[bool] = True  # checked by the fault tests (slow answers)
    default_batch_size: ClassVar[int] = 500
    supports_scan: ClassVar[bool] = True
    # docs/benchmarks.md, "The join strategy": 5.6 core-µs per input row looked up (uniform
    # keys), less the floor's 1; "Plans": 200,000 keys scanned in 0.96 s on 2 cores (SCAN and
    # MGET), where lookups of the same keys took 0.43 s
    lookup_cost_us: ClassVar[float | None] = 4.6
    scan_cost_us: ClassVar[float | None] = 9.5
    option_specs: ClassVar[tuple[OptionSpec, ...]] = (
        KEY_PATTERN,
        password_env_option("redis"),
        VALUE_FORMAT,
        *tls_option_specs("redis", "the Redis server"),
    )

    def __init__(self, config: ConnectorConfig) -> None:
        super().__init__(config)
        self._template = KeyTemplate(KEY_PATTERN.name, KEY_PATTERN.get(config), config.key_columns)
        self._format = VALUE_FORMAT.get(config)
        self._redis: Any = None
        self._pool: Any = None
        self._handshake: AbstractAsyncContextManager[None] = nullcontext()
        self._values = RedisValues(config, self.value_fields, self._format)
        self._hmget_fields = [name.encode("utf-8") for name in config.value_columns]

    # -- validation ----------------------------------------------------------------------------

    @classmethod
    def validate_config(cls, config: ConnectorConfig) -> None:
        require_url(
            "url",
            config.url,
            ("redis://", "rediss://", "unix://"),
            connector="redis",
            example="redis://localhost:6379/0",
        )
        tls = TlsSettings.from_options("redis", config.options)
        if tls.configured and not str(config.url).startswith("rediss://"):
            raise OptionError(tls.first_option, "applies to TLS: use a rediss:// URL")
        KeyTemplate.validate(KEY_PATTERN.name, KEY_PATTERN.get(config), config.key_columns)
        if VALUE_FORMAT.get(config) == "string" and len(config.value_columns) > 1:
            raise SchemaError(
                "redis.value.format=string puts each value into one column, but the schema has "
                f"{len(config.value_columns)} value columns ({', '.join(config.value_columns)})"
            )

    # -- life cycle ----------------------------------------------------------------------------

    async def open(self) -> None:
        with _REDIS_ERRORS:
            self._open()

    def _open(self) -> None:
        from redis.asyncio import BlockingConnectionPool, Redis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        assert self.config.url is not None
        extra: dict[str, Any] = {}
        password = password_from_env("redis", self.config.options)
        if password is not None:
            extra["password"] = password
        tls = TlsSettings.from_options("redis", self.config.options)
        self._handshake = _handshake_check(self.config.url, tls)
        if tls.configured:  # else the rediss:// URL's own ssl_* parameters, if any
            tls.context()  # a missing file or a wrong key password: said here, not retried
            extra["ssl_check_hostname"] = tls.check_hostname
            if tls.ca_file:
                extra["ssl_ca_certs"] = tls.ca_file
            if tls.cert_file:
                extra.update(
                    ssl_certfile=tls.cert_file,
                    ssl_keyfile=tls.key_file,
                    ssl_password=tls.key_password(),
                )
        self._pool = BlockingConnectionPool.from_url(
            self.config.url,
            **extra,
            **_driver_info(),
            max_connections=max(1, self.config.capacity),
            timeout=None,
            # the engine retries with the configured policy and counts it: no hidden retries
            retry=Retry(NoBackoff(), 0),
        )
        self._redis = Redis(connection_pool=self._pool, decode_responses=False)

    async def close(self) -> None:
        if self._redis is not None:
            redis, self._redis = self._redis, None
            await redis.aclose(close_connection_pool=True)

    # -- the wire ------------------------------------------------------------------------------

    async def _execute(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """Send ``commands`` in one round trip on a pooled connection; return their replies
        (an error reply is returned as its exception, in its place)."""
        if _pack is not None:
            return await self._send(b"".join(_pack(tuple(c)) for c in commands), len(commands))
        return await self._send(None, len(commands), commands)  # pragma: no cover

    async def _send(
        self, packed: bytes | None, count: int, commands: Sequence[Sequence[Any]] = ()
    ) -> list[Any]:
        """Send commands already in the Redis protocol, read ``count`` replies. A connection
        whose exchange failed or was cancelled is in doubt: it is disconnected, never reused."""
        from redis.exceptions import ResponseError

        pool = self._pool
        if pool is None:
            raise RuntimeError("RedisLookupClient used before open()")
        async with pooled(pool.get_connection(), pool.release, _disconnect) as connection:
            if packed is None:  # pragma: no cover - without hiredis
                packed = b"".join(connection.pack_commands(commands))
            await connection.send_packed_command(packed, check_health=False)
            replies: list[Any] = []
            for _ in range(count):
                try:
                    replies.append(await connection.read_response())
                except ResponseError as error:
                    replies.append(error)
            return replies

    # -- lookups -------------------------------------------------------------------------------

    async def lookup_arrow(self, keys: pa.RecordBatch) -> Matches:
        async with self._handshake:
            with _REDIS_ERRORS:
                return await self._fetch(keys, self._template.render_all(keys))

    @classmethod
    def answers_existence(cls, config: ConnectorConfig) -> bool:
        """A string or a hash exists or not (``EXISTS``); a JSON value may hold no match at all
        (an empty array), which only reading it tells."""
        return VALUE_FORMAT.get(config) != "json"

    async def _fetch(self, keys: pa.RecordBatch, redis_keys: list[str]) -> Matches:
        """Read the Redis keys ``redis_keys`` of the lookup keys ``keys`` (whether each exists,
        when no value column is asked for)."""
        if not self.config.value_columns:
            replies = await self._execute([("EXISTS", key) for key in _arguments(redis_keys)])
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
            present = np.flatnonzero(np.asarray(replies, dtype=np.int64) > 0)
            return Matches(present, value_batch([], [], len(present)))
        if self._format == "hash":
            return await self._fetch_hashes(keys, redis_keys)
        (replies,) = await self._execute([("MGET", *_arguments(redis_keys))])
        if isinstance(replies, Exception):
            raise replies
        if self._format == "json":
            return self._values.json(redis_keys, replies)
        return self._values.strings(redis_keys, replies)

    async def _fetch_hashes(self, keys: pa.RecordBatch, redis_keys: list[str]) -> Matches:
        fields = self._hmget_fields
        arguments = _arguments(redis_keys)
        replies = await self._execute([("HMGET", key, *fields) for key in arguments])
        empty = [i for i, reply in enumerate(replies) if isinstance(reply, list) and not any(reply)]
        if empty:  # an existing hash without the value fields is found, with nulls
            exists = await self._execute([("EXISTS", arguments[i]) for i in empty])
            for i, flag in zip(empty, exists):
                if isinstance(flag, Exception):
                    raise flag
                if not flag:
                    replies[i] = None
        for reply in replies:
            if isinstance(reply, Exception) and classify(reply) is TransientError:
                raise reply
        return self._values.hashes(redis_keys, replies)

    # -- scans ---------------------------------------------------------------------------------

    async def table_facts(self) -> TableFacts:
        """A Redis key is never null; whether a key matches the pattern (``SCAN`` until the
        first one)."""
        if self._redis is None:
            raise RuntimeError("RedisLookupClient.table_facts() called before open()")
        async with self._handshake:
            with _REDIS_ERRORS:
                return TableFacts(
                    null_key=False, any_row=await any_key(self._redis, self._template)
                )

    async def estimate_rows(self) -> int | None:
        """The keys matching ``redis.key.pattern`` (:func:`~asynclookup_redis.scan.count_keys`:
        counted, or estimated from a sample of ``SCAN`` in a large database)."""
        async with self._handshake:
            with _REDIS_ERRORS:
                return await self._estimate_rows()

    async def _estimate_rows(self) -> int | None:
        if self._redis is None:
            raise RuntimeError("RedisLookupClient.estimate_rows() called before open()")
        return await count_keys(self._redis, self._template)

    async def scan_arrow(
        self, partition: int = 0, partitions: int = 1, *, split: Any = None
    ) -> AsyncIterator[tuple[pa.RecordBatch, Matches]]:
        """Every key matching ``redis.key.pattern`` whose hash falls in ``partition``; the key
        columns come back as the text the Redis key holds (the scan converts them). No
        ``split``: a SCAN cursor walks the whole keyspace whatever the part."""
        async with self._handshake:
            with _REDIS_ERRORS:
                if self._redis is None:
                    raise RuntimeError("RedisLookupClient.scan_arrow() called before open()")
                glob, regex = self._template.scan_pattern()
                names = list(self.config.key_columns)
                seen: set[bytes] = set()
                parts: list[tuple[str, ...]] = []
                texts: list[str] = []

                async def flush() -> tuple[pa.RecordBatch, Matches]:
                    columns = [pa.array(list(c), type=pa.string()) for c in zip(*parts)]
                    keys = reachable_keys(
                        pa.RecordBatch.from_arrays(columns, names=names),
                        texts,
                        self.config,
                        self._template,
                    )
                    found = await self._fetch(keys, list(texts))
                    parts.clear()
                    texts.clear()
                    return keys, found

                async for raw in self._redis.scan_iter(match=glob, count=1_000):
                    other_part = partitions > 1 and zlib.crc32(raw) % partitions != partition
                    if raw in seen or other_part:
                        continue
                    seen.add(raw)
                    text = raw.decode("utf-8", errors="surrogateescape")
                    match = regex.fullmatch(text)
                    if match is None:
                        continue
                    parts.append(match.groups())
                    texts.append(text)
                    if len(parts) >= self.config.batch_size:
                        yield await flush()
                if parts:
                    yield await flush()


__all__ = ["RedisLookupClient", "classify"]
