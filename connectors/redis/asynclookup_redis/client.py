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

import json
import re
import string
import zlib
from collections.abc import AsyncIterator, Sequence
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from lookup_source.connector_api import (
    DECODE_ERRORS,
    ConnectorConfig,
    ConnectorError,
    JsonColumns,
    KeyTemplate,
    LookupClient,
    Matches,
    OptionError,
    OptionSpec,
    PermanentError,
    RecordError,
    SchemaError,
    TlsSettings,
    TransientError,
    as_records,
    cast_strings,
    choice,
    parse_required_text,
    parse_text,
    records_to_matches,
    secret_from_env,
    tls_failure,
    tls_option_specs,
    translated_errors,
)

_EXCERPT = 80

_pack: Any
try:
    from hiredis import pack_command as _pack
except ImportError:  # pragma: no cover - hiredis is in the redis extra
    _pack = None


def _excerpt(raw: bytes) -> str:
    text = raw[:_EXCERPT].decode("utf-8", errors="replace")
    return text + ("..." if len(raw) > _EXCERPT else "")


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


def _present(replies: Sequence[Any]) -> list[int]:
    """Positions of the replies that are not nil."""
    return [i for i, reply in enumerate(replies) if reply is not None]


def classify(error: Exception) -> type[ConnectorError] | ConnectorError | None:
    """What a redis-py exception means to the engine (see ``translated_errors``)."""
    from redis import exceptions as rex

    tls = tls_failure(error, "redis")
    if tls is not None:
        return tls  # a certificate that does not verify will not start to
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


_REDIS_ERRORS = translated_errors("redis", classify)


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
        *tls_option_specs("redis", "the Redis server"),
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
        self._pool: Any = None
        self._fields = config.value_columns
        self._binary_fields = frozenset(
            name
            for name, kind in zip(config.value_columns, config.value_types)
            if pa.types.is_binary(kind) or pa.types.is_large_binary(kind)
        )
        self._raw_bytes = len(self._fields) == 1 and self._fields[0] in self._binary_fields
        self._json = JsonColumns(self.value_fields) if self._format == "json" else None
        self._hmget_fields = [name.encode("utf-8") for name in self._fields]

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
        tls = TlsSettings.from_options("redis", config.options)
        if tls.configured and not config.url.startswith("rediss://"):
            raise OptionError(tls.first_option, "applies to TLS: use a rediss:// URL")
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
        with _REDIS_ERRORS:
            self._open()

    def _open(self) -> None:
        from redis.asyncio import BlockingConnectionPool, Redis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        assert self.config.url is not None
        extra: dict[str, Any] = {}
        variable = self.config.options.get("redis.password.env")
        if variable:
            extra["password"] = secret_from_env("redis.password.env", variable)
        tls = TlsSettings.from_options("redis", self.config.options)
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

        if self._pool is None:
            raise RuntimeError("RedisLookupClient used before open()")
        connection = await self._pool.get_connection()
        try:
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
        except BaseException:
            await connection.disconnect()
            raise
        finally:
            await self._pool.release(connection)

    # -- lookups -------------------------------------------------------------------------------

    async def lookup_arrow(self, keys: pa.RecordBatch) -> Matches:
        with _REDIS_ERRORS:
            return await self._fetch(keys, self._template.render_all(keys))

    async def _fetch(self, keys: pa.RecordBatch, redis_keys: list[str]) -> Matches:
        """Read the Redis keys ``redis_keys`` of the lookup keys ``keys``."""
        if self._format == "hash":
            return await self._fetch_hashes(keys, redis_keys)
        (replies,) = await self._execute([("MGET", *_arguments(redis_keys))])
        if isinstance(replies, Exception):
            raise replies
        if self._format == "json":
            return self._json_matches(keys, redis_keys, replies)
        return self._string_matches(keys, redis_keys, replies)

    def _json_matches(
        self, keys: pa.RecordBatch, redis_keys: list[str], replies: list[Any]
    ) -> Matches:
        present = _present(replies)
        assert self._json is not None
        documents = [replies[i] for i in present]
        try:
            values = self._json.decode(documents)
        except DECODE_ERRORS:
            try:  # values that are arrays of objects: several matches for their key
                index, values = self._json.decode_matches(documents)
            except DECODE_ERRORS:
                return self._reference(keys, self._decode_json(keys, redis_keys, replies))
            return Matches(np.asarray(present, dtype=np.int64)[index], values)
        return Matches(present, values)

    def _string_matches(
        self, keys: pa.RecordBatch, redis_keys: list[str], replies: list[Any]
    ) -> Matches:
        present = _present(replies)
        field = self.value_fields[0]
        raw = pa.array([replies[i] for i in present], type=pa.binary())
        try:
            column = raw if self._raw_bytes else cast_strings(raw.cast(pa.string()), field.type)
            column = column.cast(field.type)
        except (pa.ArrowException, ValueError):
            return self._reference(keys, self._decode_strings(keys, redis_keys, replies))
        return Matches(present, pa.RecordBatch.from_arrays([column], schema=pa.schema([field])))

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
        return self._hash_matches(keys, redis_keys, replies)

    def _hash_matches(
        self, keys: pa.RecordBatch, redis_keys: list[str], replies: list[Any]
    ) -> Matches:
        if any(isinstance(reply, Exception) for reply in replies):
            return self._reference(keys, self._decode_hashes(keys, redis_keys, replies))
        present = _present(replies)
        arrays = []
        try:
            for position, field in enumerate(self.value_fields):
                raw = pa.array([replies[i][position] for i in present], type=pa.binary())
                if field.name in self._binary_fields:
                    arrays.append(raw.cast(field.type))
                else:
                    arrays.append(cast_strings(raw.cast(pa.string()), field.type))
        except (pa.ArrowException, ValueError):
            return self._reference(keys, self._decode_hashes(keys, redis_keys, replies))
        schema = pa.schema(self.value_fields)
        return Matches(present, pa.RecordBatch.from_arrays(arrays, schema=schema))

    # -- the reference path: one value at a time, naming what does not fit -----------------------

    def _reference(self, keys: pa.RecordBatch, records: dict[int, Any]) -> Matches:
        """Matches from records indexed by the position of their key."""
        return records_to_matches(range(keys.num_rows), records, self.value_fields)

    def _decode_json(
        self, keys: pa.RecordBatch, redis_keys: list[str], replies: list[Any]
    ) -> dict[int, Any]:
        out: dict[int, Any] = {}
        for position, (redis_key, raw) in enumerate(zip(redis_keys, replies)):
            if raw is None:
                continue
            try:
                record = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                out[position] = RecordError(
                    f"Redis key {redis_key!r} does not hold valid JSON: {_excerpt(raw)!r}"
                )
                continue
            except RecursionError:
                out[position] = RecordError(
                    f"Redis key {redis_key!r} holds JSON nested too deeply to decode: "
                    f"{_excerpt(raw)!r}"
                )
                continue
            out[position] = as_records(record, f"Redis key {redis_key!r}")
        return out

    def _decode_strings(
        self, keys: pa.RecordBatch, redis_keys: list[str], replies: list[Any]
    ) -> dict[int, Any]:
        column = self._fields[0]
        out: dict[int, Any] = {}
        for position, (redis_key, raw) in enumerate(zip(redis_keys, replies)):
            if raw is None:
                continue
            if self._raw_bytes:
                out[position] = {column: raw}
                continue
            try:
                out[position] = {column: raw.decode("utf-8")}
            except UnicodeDecodeError:
                out[position] = RecordError(
                    f"Redis key {redis_key!r} holds bytes that are not UTF-8 text; declare "
                    f"column '{column}' as binary to read them raw"
                )
        return out

    def _decode_hashes(
        self, keys: pa.RecordBatch, redis_keys: list[str], replies: list[Any]
    ) -> dict[int, Any]:
        out: dict[int, Any] = {}
        for position, (redis_key, reply) in enumerate(zip(redis_keys, replies)):
            if isinstance(reply, Exception):
                out[position] = RecordError(f"Redis key {redis_key!r}: {reply}")
                continue
            if reply is None:
                continue
            out[position] = {
                name: raw
                if raw is None or name in self._binary_fields
                else raw.decode("utf-8", errors="replace")
                for name, raw in zip(self._fields, reply)
            }
        return out

    # -- scans ---------------------------------------------------------------------------------

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

    async def scan_arrow(
        self, partition: int = 0, partitions: int = 1, *, split: Any = None
    ) -> AsyncIterator[tuple[pa.RecordBatch, Matches]]:
        """Every key matching ``redis.key.pattern`` whose hash falls in ``partition``; the key
        columns come back as the text the Redis key holds (the scan converts them). No
        ``split``: a SCAN cursor walks the whole keyspace whatever the part."""
        with _REDIS_ERRORS:
            if self._redis is None:
                raise RuntimeError("RedisLookupClient.scan_arrow() called before open()")
            glob, regex = self._scan_pattern()
            names = list(self.config.key_columns)
            seen: set[bytes] = set()
            parts: list[tuple[str, ...]] = []
            texts: list[str] = []

            async def flush() -> tuple[pa.RecordBatch, Matches]:
                columns = [pa.array(list(c), type=pa.string()) for c in zip(*parts)]
                keys = pa.RecordBatch.from_arrays(columns, names=names)
                found = await self._fetch(keys, list(texts))
                parts.clear()
                texts.clear()
                return keys, found

            async for raw in self._redis.scan_iter(match=glob, count=1_000):
                if raw in seen or (partitions > 1 and zlib.crc32(raw) % partitions != partition):
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
