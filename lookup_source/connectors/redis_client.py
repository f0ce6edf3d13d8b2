"""Redis connector (redis-py asyncio).

``connector=redis``, ``url`` as redis-py accepts it (``redis://[user:password@]host:port/db``,
``rediss://`` for TLS, ``unix://``). Keys are formatted with ``redis.key.pattern``; values are
read with MGET (``json``, ``string``) or a pipeline of HGETALL (``hash``), ``batch.size`` keys
per round trip, over a pool of at most ``capacity`` connections.
"""

from __future__ import annotations

import json
import re
import string
import zlib
from collections.abc import AsyncIterator, Sequence
from typing import Any, ClassVar

import pyarrow as pa

from lookup_source.connectors.base import (
    ConnectorConfig,
    Key,
    LookupClient,
    LookupResult,
    secret_from_env,
)
from lookup_source.connectors.templates import KeyTemplate
from lookup_source.errors import OptionError, PermanentError, RecordError, SchemaError
from lookup_source.options import OptionSpec, choice, parse_required_text, parse_text

_EXCERPT = 80


def _excerpt(raw: bytes) -> str:
    text = raw[:_EXCERPT].decode("utf-8", errors="replace")
    return text + ("..." if len(raw) > _EXCERPT else "")


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
    honours_cancellation: ClassVar[bool] = True  # checked by the fault tests (slow answers)
    default_batch_size: ClassVar[int] = 500
    supports_scan: ClassVar[bool] = True
    option_specs: ClassVar[tuple[OptionSpec, ...]] = (
        OptionSpec(
            "redis.key.pattern",
            parse_required_text,
            "{key}",
            "How a key becomes a Redis key: `user:{key}`; composite keys name their columns, "
            "`{tenant}:{user_id}`.",
        ),
        OptionSpec(
            "redis.password.env",
            parse_text,
            None,
            "Name of an environment variable, on the executors, holding the password (it "
            "overrides one in the URL), so the secret never sits in an option.",
        ),
        OptionSpec(
            "redis.value.format",
            choice("json", "hash", "string"),
            "json",
            "`json` (a JSON object per key), `hash` (a Redis hash per key) or `string` (the raw "
            "value into the single value column).",
        ),
    )

    def __init__(self, config: ConnectorConfig) -> None:
        super().__init__(config)
        self._template = KeyTemplate(
            "redis.key.pattern",
            config.options.get("redis.key.pattern", "{key}"),
            config.key_columns,
        )
        self._format: str = config.options.get("redis.value.format", "json")
        self._redis: Any = None
        self._fields = config.value_columns
        self._binary_fields = frozenset(
            name
            for name, kind in zip(config.value_columns, config.value_types)
            if pa.types.is_binary(kind) or pa.types.is_large_binary(kind)
        )
        self._raw_bytes = len(self._fields) == 1 and self._fields[0] in self._binary_fields

    # -- validation ----------------------------------------------------------------------------

    @classmethod
    def validate_config(cls, config: ConnectorConfig) -> None:
        if not config.url:
            raise OptionError(
                "url", "is required for connector redis, e.g. redis://localhost:6379/0"
            )
        if not config.url.startswith(("redis://", "rediss://", "unix://")):
            raise OptionError(
                "url", f"must start with redis://, rediss:// or unix://, got {config.display_url!r}"
            )
        KeyTemplate.validate(
            "redis.key.pattern",
            config.options.get("redis.key.pattern", "{key}"),
            config.key_columns,
        )
        if config.options.get("redis.value.format") == "string" and len(config.value_columns) != 1:
            raise SchemaError(
                "redis.value.format=string puts each value into one column, but the schema has "
                f"{len(config.value_columns)} value columns ({', '.join(config.value_columns)})"
            )

    # -- life cycle ----------------------------------------------------------------------------

    async def open(self) -> None:
        from redis.asyncio import BlockingConnectionPool, Redis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        assert self.config.url is not None
        extra: dict[str, Any] = {}
        variable = self.config.options.get("redis.password.env")
        if variable:
            extra["password"] = secret_from_env("redis.password.env", variable)
        pool = BlockingConnectionPool.from_url(
            self.config.url,
            **extra,
            max_connections=max(1, self.config.capacity),
            timeout=None,
            # the engine retries with the configured policy and counts it: no hidden retries
            retry=Retry(NoBackoff(), 0),
        )
        self._redis = Redis(connection_pool=pool, decode_responses=False)

    async def close(self) -> None:
        if self._redis is not None:
            redis, self._redis = self._redis, None
            await redis.aclose(close_connection_pool=True)

    # -- lookups -------------------------------------------------------------------------------

    def redis_key(self, key: Key) -> str:
        """The Redis key for a lookup key (a scalar, or a tuple for composite keys)."""
        return self._template.render(key)

    async def lookup(self, keys: Sequence[Key]) -> LookupResult:
        return await self._fetch(keys, [self.redis_key(key) for key in keys])

    def _scan_pattern(self) -> tuple[str, re.Pattern[str]]:
        """The SCAN MATCH glob of the key template, and a regex that parses keys back."""
        glob: list[str] = []
        regex: list[str] = []
        fields = list(string.Formatter().parse(self._template.template))
        for position, (literal, name, _, _) in enumerate(fields):
            glob.append(re.sub(r"([*?\[\]\\])", r"\\\1", literal))
            regex.append(re.escape(literal))
            if name is not None:
                glob.append("*")
                last = position == len(fields) - 1
                regex.append("(.*)" if last else "(.*?)")
        return "".join(glob), re.compile("".join(regex), re.DOTALL)

    async def scan(self, partition: int = 0, partitions: int = 1) -> AsyncIterator[tuple[Key, Any]]:
        """Every key matching ``redis.key.pattern`` whose hash falls in ``partition``."""
        if self._redis is None:
            raise RuntimeError("RedisLookupClient.scan() called before open()")
        glob, regex = self._scan_pattern()
        width = len(self.config.key_columns)
        seen: set[bytes] = set()
        pending: list[tuple[Key, str]] = []

        async def flush() -> dict[Key, Any]:
            keys = [key for key, _ in pending]
            found = await self._fetch(keys, [redis_key for _, redis_key in pending])
            pending.clear()
            return dict(found)

        async for raw in self._redis.scan_iter(match=glob, count=1_000):
            if raw in seen or (partitions > 1 and zlib.crc32(raw) % partitions != partition):
                continue
            seen.add(raw)
            text = raw.decode("utf-8", errors="surrogateescape")
            match = regex.fullmatch(text)
            if match is None:
                continue
            key: Key = match.group(1) if width == 1 else match.groups()
            pending.append((key, text))
            if len(pending) >= self.config.batch_size:
                for pair in (await flush()).items():
                    yield pair
        if pending:
            for pair in (await flush()).items():
                yield pair

    async def _fetch(self, keys: Sequence[Key], redis_keys: list[str]) -> LookupResult:
        if self._redis is None:
            raise RuntimeError("RedisLookupClient.lookup() called before open()")
        if self._format == "hash":
            pipe = self._redis.pipeline(transaction=False)
            for redis_key in redis_keys:
                pipe.hgetall(redis_key)
            replies = await pipe.execute(raise_on_error=False)
            return self._decode_hashes(keys, redis_keys, replies)
        replies = await self._redis.mget(redis_keys)
        if self._format == "json":
            return self._decode_json(keys, redis_keys, replies)
        return self._decode_strings(keys, redis_keys, replies)

    def _decode_json(
        self, keys: Sequence[Key], redis_keys: list[str], replies: list[bytes | None]
    ) -> LookupResult:
        out: dict[Key, Any] = {}
        for key, redis_key, raw in zip(keys, redis_keys, replies):
            if raw is None:
                continue
            try:
                record = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                out[key] = RecordError(
                    f"Redis key {redis_key!r} does not hold valid JSON: {_excerpt(raw)!r}"
                )
                continue
            if not isinstance(record, dict):
                out[key] = RecordError(
                    f"Redis key {redis_key!r} holds a JSON {type(record).__name__}, "
                    "expected an object with the value columns as fields"
                )
                continue
            out[key] = record
        return out

    def _decode_strings(
        self, keys: Sequence[Key], redis_keys: list[str], replies: list[bytes | None]
    ) -> LookupResult:
        column = self._fields[0]
        out: dict[Key, Any] = {}
        for key, redis_key, raw in zip(keys, redis_keys, replies):
            if raw is None:
                continue
            if self._raw_bytes:
                out[key] = {column: raw}
                continue
            try:
                out[key] = {column: raw.decode("utf-8")}
            except UnicodeDecodeError:
                out[key] = RecordError(
                    f"Redis key {redis_key!r} holds bytes that are not UTF-8 text; declare "
                    f"column '{column}' as binary to read them raw"
                )
        return out

    def _decode_hashes(
        self, keys: Sequence[Key], redis_keys: list[str], replies: list[Any]
    ) -> LookupResult:
        out: dict[Key, Any] = {}
        for key, redis_key, reply in zip(keys, redis_keys, replies):
            if isinstance(reply, Exception):
                if self.is_retryable(reply):
                    raise reply
                out[key] = RecordError(f"Redis key {redis_key!r}: {reply}")
                continue
            if not reply:
                continue
            record: dict[str, Any] = {}
            for field, raw in reply.items():
                name = field.decode("utf-8", errors="replace")
                if name in self._fields:
                    record[name] = (
                        raw
                        if name in self._binary_fields
                        else raw.decode("utf-8", errors="replace")
                    )
            out[key] = record
        return out

    def is_retryable(self, error: BaseException) -> bool:
        from redis import exceptions as rex

        if isinstance(
            error,
            (
                rex.AuthenticationError,
                rex.AuthorizationError,
                rex.NoPermissionError,
                rex.ResponseError,
            ),
        ):
            # a wrong password, missing ACL or bad command will not get better by retrying;
            # BUSY / LOADING (server still starting) will.
            return isinstance(error, (rex.BusyLoadingError, rex.TryAgainError))
        if isinstance(error, (rex.ConnectionError, rex.TimeoutError, OSError)):
            return True
        if isinstance(error, PermanentError):
            return False
        return super().is_retryable(error)
