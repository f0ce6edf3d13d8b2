"""HTTP connector (aiohttp).

Two request styles:

- **per key**: ``url`` is a template, ``https://api.example.com/users/{key}`` (composite keys:
  ``.../{tenant}/{user_id}``); key values are URL-encoded; one GET per key, up to ``capacity``
  in flight over one keep-alive connection pool sized to ``capacity``.
- **batch**: ``http.batch.url`` receives a POST with the JSON body ``{"keys": [...]}`` and
  answers a JSON object (key -> record) or an array of records that carry their key;
  ``batch.size`` keys per request.

Answers: 2xx -> record; 404 -> missing key; 408, 429, 500, 502, 503, 504 and connection errors
-> retried with backoff, honouring ``Retry-After``; any other status -> an error that is not
retried; a body that is not JSON -> an error naming the key with an excerpt of the body.
"""

from __future__ import annotations

import email.utils
import json
import ssl
import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar
from urllib.parse import quote

import msgspec
import pyarrow as pa

from lookup_source.connector_api import (
    DECODE_ERRORS,
    ConnectorConfig,
    ConnectorError,
    ConnectorOptions,
    JsonColumns,
    Key,
    KeyTemplate,
    LookupClient,
    LookupResult,
    Matches,
    OptionError,
    OptionSpec,
    OverloadedError,
    PermanentError,
    RecordError,
    TlsSettings,
    TransientError,
    as_records,
    key_text,
    match_rows,
    parse_bool,
    parse_text,
    python_keys,
    records_to_matches,
    redact_url,
    secret_from_env,
    tls_failure,
    tls_option_specs,
    translated_errors,
)

RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})
OVERLOADED_STATUS = frozenset({429, 503})
BATCH_POST_SIZE = 100
"""Keys per batch POST unless ``batch.size`` says otherwise."""
_EXCERPT = 120


def classify(error: Exception) -> type[ConnectorError] | ConnectorError | None:
    """What an aiohttp exception means to the engine (see ``translated_errors``)."""
    import aiohttp

    tls = tls_failure(error, "http")
    if tls is not None:
        return tls  # a certificate that does not verify will not start to
    if isinstance(error, (aiohttp.ClientConnectorCertificateError, aiohttp.ClientSSLError)):
        return PermanentError
    if isinstance(error, (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError)):
        return TransientError  # refused, reset, dropped mid-answer
    return None


_AIOHTTP_ERRORS = translated_errors("aiohttp", classify)


def _excerpt(body: bytes) -> str:
    text = body[:_EXCERPT].decode("utf-8", errors="replace")
    return text + ("..." if len(body) > _EXCERPT else "")


def _encode_path_part(text: str) -> str:
    return quote(text, safe="")


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class _Absent:
    """What :func:`_select` finds where the answer does not have ``http.json.path``."""

    def __init__(self, path: tuple[str, ...], depth: int, found: Any) -> None:
        self.path = path
        self.depth = depth  # how many parts of the path were there
        self.found = found  # what was there instead of the next part

    def message(self, what: str, body: bytes) -> str:
        wanted = ".".join(self.path)
        have = ".".join(self.path[: self.depth]) or "the top level"
        if isinstance(self.found, Mapping):
            names = ", ".join(list(map(str, self.found))[:8]) or "nothing"
            instead = f"{have} has {names}"
        else:
            instead = f"{have} is a JSON {_json_type(self.found)}"
        return (
            f"{what} has no {self.path[self.depth]!r} at http.json.path={wanted} ({instead}; "
            f"check the option against an answer): {_excerpt(body)!r}"
        )


def _json_type(value: Any) -> str:
    names = {str: "string", int: "number", float: "number", bool: "boolean", list: "array"}
    return "null" if value is None else names.get(type(value), "object")


def _select(document: Any, path: tuple[str, ...]) -> Any:
    """What ``document`` holds at ``path``; :class:`_Absent` where it does not have it (an
    explicit null along the way is null: no record)."""
    for depth, part in enumerate(path):
        if document is None:
            return None
        if isinstance(document, Mapping) and part in document:
            document = document[part]
        elif isinstance(document, list) and part.isdigit() and int(part) < len(document):
            document = document[int(part)]
        else:
            return _Absent(path, depth, document)
    return document


def _parse_json_path(value: str) -> tuple[str, ...]:
    parts = tuple(part for part in value.strip().split(".") if part)
    if value.strip() and not parts:
        raise ValueError(f"expected a dotted path such as data.user, got {value!r}")
    return parts


def _parse_header_value(value: str) -> str:
    if "\n" in value or "\r" in value:
        raise ValueError("a header value cannot contain a line break")
    return value


class HttpLookupClient(LookupClient):
    """Looks keys up over HTTP with aiohttp."""

    name: ClassVar[str] = "http"
    honours_cancellation: ClassVar[bool] = True  # checked by the fault tests (slow answers)
    default_batch_size: ClassVar[int] = 1
    option_specs: ClassVar[tuple[OptionSpec, ...]] = (
        OptionSpec(
            "http.batch.url",
            parse_text,
            None,
            'Batch style: this URL receives a POST of `{"keys": [...]}` with `batch.size` keys '
            "and answers an object (key -> record) or an array of records carrying their key. "
            "Unset: one GET per key on the `url` template.",
        ),
        OptionSpec(
            "http.batch.keys-field",
            parse_text,
            "keys",
            "Name of the key list in the batch request body.",
        ),
        OptionSpec(
            "http.json.path",
            _parse_json_path,
            (),
            "Dotted path of the record (per key) or of the records (batch) inside the response, "
            "e.g. `data.user`.",
            default_doc="(the whole body)",
        ),
        OptionSpec(
            "http.tls.verify",
            parse_bool,
            True,
            "Verify TLS certificates. Turning it off is for test servers only.",
        ),
        *tls_option_specs("http", "the HTTPS server"),
        OptionSpec(
            "http.header.",
            _parse_header_value,
            None,
            "A request header, e.g. `http.header.Accept=application/json`. "
            "`http.header.<Name>.env=VAR` takes the value from the executor's environment "
            "variable VAR, so secrets stay out of query plans.",
            prefix=True,
        ),
    )

    def __init__(self, config: ConnectorConfig) -> None:
        super().__init__(config)
        options = config.options
        self._batch_url: str | None = options.get("http.batch.url")
        self._keys_field: str = options.get("http.batch.keys-field", "keys")
        self._path: tuple[str, ...] = tuple(options.get("http.json.path", ()))
        self._verify: bool = options.get("http.tls.verify", True)
        self._template = (
            None
            if self._batch_url
            else KeyTemplate("url", config.url or "", config.key_columns, encode=_encode_path_part)
        )
        self._session: Any = None
        self._records: JsonColumns | None = None
        self._keyed_records: JsonColumns | None = None
        self._batch_decode: Any = None
        if self._batch_url:
            self._records = JsonColumns(self.value_fields)
            self._keyed_records = JsonColumns(self.value_fields, extra=config.key_columns)
            shape = self._batch_answer_type()
            if shape is not None:
                self._batch_decode = msgspec.json.Decoder(shape).decode

    # -- validation ----------------------------------------------------------------------------

    @classmethod
    def batch_size_default(cls, connector_options: Mapping[str, Any]) -> int:
        return BATCH_POST_SIZE if connector_options.get("http.batch.url") else 1

    @classmethod
    def describe_batch_size_default(cls) -> str:
        return f"1 per GET, {BATCH_POST_SIZE} per batch POST"

    @classmethod
    def validate_options(cls, options: ConnectorOptions) -> None:
        batch_url = options.options.get("http.batch.url")
        if not batch_url and options.batch_size > 1:
            raise OptionError(
                "batch.size",
                f"is {options.batch_size}, but per-key GETs carry one key each; set "
                "http.batch.url to send keys in batches",
            )
        for url_option, url in (("url", options.url), ("http.batch.url", batch_url)):
            if url and not url.lower().startswith(("http://", "https://")):
                raise OptionError(
                    url_option, f"must start with http:// or https://, got {redact_url(url)!r}"
                )
        tls = TlsSettings.from_options("http", options.options)
        if not options.options.get("http.tls.verify", True) and tls.ca_file:
            raise OptionError(
                "http.tls.ca-file", "verifies the server, which http.tls.verify=false turns off"
            )

    @classmethod
    def validate_config(cls, config: ConnectorConfig) -> None:
        if config.options.get("http.batch.url"):
            return
        if not config.url:
            raise OptionError(
                "url",
                "is required for connector http: a template such as "
                "https://api.example.com/users/{key}, or set http.batch.url",
            )
        KeyTemplate.validate("url", config.url, config.key_columns)

    def headers(self) -> dict[str, str]:
        """The request headers, with ``.env`` values read from this process's environment."""
        headers = {"Accept": "application/json"}
        for name, value in self.config.options.items():
            if not name.startswith("http.header.") or value is None:
                continue
            header = name[len("http.header.") :]
            if header.endswith(".env"):
                header = header[: -len(".env")]
                value = secret_from_env(name, value)
            headers[header] = value
        return headers

    # -- life cycle ----------------------------------------------------------------------------

    async def open(self) -> None:
        import aiohttp

        headers = self.headers()
        connector = aiohttp.TCPConnector(
            limit=max(1, self.config.capacity),
            limit_per_host=max(1, self.config.capacity),
            ssl=self._ssl(),
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=None),
            raise_for_status=False,
        )

    def _ssl(self) -> Any:
        """What aiohttp's ``ssl`` takes: True (the system's CAs), False (no verification) or
        the context of the ``http.tls.*`` options."""
        tls = TlsSettings.from_options("http", self.config.options)
        if not tls.configured:
            return self._verify
        context = tls.context()
        if not self._verify:  # a client certificate for a server that is not verified
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    # -- lookups -------------------------------------------------------------------------------

    @property
    def columnar(self) -> bool:
        # a batch answer carries many keys: decoded into columns. A per-key GET carries one:
        # its record is kept, and the engine converts the records of a whole input batch.
        return self._batch_url is not None

    async def lookup(self, keys: Sequence[Key]) -> LookupResult:
        with _AIOHTTP_ERRORS:
            return await self._get(keys)

    async def _get(self, keys: Sequence[Key]) -> LookupResult:
        if self._session is None:
            raise RuntimeError("HttpLookupClient.lookup() called before open()")
        if self._batch_url:
            return await super().lookup(keys)
        assert self._template is not None
        out: dict[Key, Any] = {}
        for key in keys:
            url = self._template.render(key)
            async with self._session.get(url) as response:
                body = await response.read()
                status = response.status
                retry_after = response.headers.get("Retry-After")
            if status == 404:
                continue
            if not 200 <= status < 300:
                self._check_status(status, body, retry_after, f"GET {redact_url(url)}")
            out[key] = self._record(key, body)
        return out

    def _check_status(self, status: int, body: bytes, retry_after: str | None, what: str) -> None:
        if 200 <= status < 300:
            return
        message = f"HTTP {status} from {what}: {_excerpt(body)!r}"
        if status in RETRYABLE_STATUS:
            kind = OverloadedError if status in OVERLOADED_STATUS else TransientError
            raise kind(message, retry_after=parse_retry_after(retry_after))
        raise PermanentError(message)

    def _record(self, key: Key, body: bytes) -> Any:
        try:
            document = _loads(body)
        except RecursionError:
            return RecordError(f"the response is nested too deeply to decode: {_excerpt(body)!r}")
        except (ValueError, UnicodeDecodeError):
            return RecordError(f"the response is not valid JSON: {_excerpt(body)!r}")
        where = f"the response at {'.'.join(self._path)}" if self._path else "the response"
        selected = _select(document, self._path)
        if isinstance(selected, _Absent):
            return RecordError(selected.message("the response", body))
        return as_records(selected, where)

    # -- batch style ---------------------------------------------------------------------------

    async def lookup_arrow(self, keys: pa.RecordBatch) -> Matches:
        if not self._batch_url:
            return await super().lookup_arrow(keys)
        with _AIOHTTP_ERRORS:
            return await self._post(keys)

    async def _post(self, keys: pa.RecordBatch) -> Matches:
        assert self._batch_url is not None
        if self._session is None:
            raise RuntimeError("HttpLookupClient.lookup_arrow() called before open()")
        columns = self.config.key_columns
        if len(columns) == 1:
            payload: list[Any] = [_json_key(v) for v in keys.column(0).to_pylist()]
        else:
            payload = [dict(zip(columns, map(_json_key, key))) for key in python_keys(keys)]
        body = msgspec.json.encode({self._keys_field: payload})
        headers = {"Content-Type": "application/json"}
        async with self._session.post(self._batch_url, data=body, headers=headers) as response:
            answer = await response.read()
            status = response.status
            retry_after = response.headers.get("Retry-After")
        what = f"POST {redact_url(self._batch_url)} ({keys.num_rows} keys)"
        if status == 404:
            return Matches.none(self.value_fields)
        self._check_status(status, answer, retry_after, what)
        if self._batch_decode is not None:
            try:
                return self._batch_matches(keys, self._batch_decode(answer))
            except DECODE_ERRORS:
                pass  # the answer is decoded again below, naming what does not fit
        try:
            document = _loads(answer)
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise PermanentError(
                f"the response to {what} is not valid JSON: {_excerpt(answer)!r}"
            ) from None
        wanted = python_keys(keys)
        records = _select(document, self._path)
        if isinstance(records, _Absent):
            raise PermanentError(records.message(f"the response to {what}", answer))
        found = self._match_batch(wanted, records, what, answer)
        return records_to_matches(wanted, found, self.value_fields)

    def _batch_answer_type(self) -> Any:
        """The msgspec type of a batch answer: an object key -> record, or an array of records
        carrying their key, at ``http.json.path``; None if the path cannot be typed."""
        if any(part.isdigit() for part in self._path):
            return None
        assert self._records is not None and self._keyed_records is not None
        shape = _answer_shape(self._records.record_type, self._keyed_records.record_type)
        for depth, part in enumerate(reversed(self._path)):
            level = shape | msgspec.UnsetType
            shape = msgspec.defstruct(
                f"Level{depth}", [("v", level, msgspec.UNSET)], rename={"v": part}
            )
        return shape

    def _unwrap(self, document: Any) -> Any:
        for _ in self._path:
            if document is None:
                return None
            document = document.v
            if document is msgspec.UNSET:  # the path is not there: decoded again, to say so
                raise ValueError("http.json.path not in the answer")
        return document

    def _batch_matches(self, keys: pa.RecordBatch, document: Any) -> Matches:
        """Matches of a batch answer decoded by msgspec: keys are compared as text."""
        assert self._records is not None and self._keyed_records is not None
        records = self._unwrap(document)
        asked = [self._key_texts(keys, i) for i in range(keys.num_columns)]
        if isinstance(records, dict):
            if keys.num_columns > 1:
                raise ValueError("an object answer cannot carry composite keys")
            texts = [text for text, record in records.items() if record is not None]
            chosen = [record for record in records.values() if record is not None]
            index = match_rows([pa.array(texts, type=pa.string())], asked)
            values = self._records.columns(chosen)
        elif isinstance(records, list):
            getters = self._keyed_records.extra_getters
            parts = [list(map(getter, records)) for getter in getters]
            present = [i for i, r in enumerate(zip(*parts)) if all(v is not None for v in r)]
            if len(present) < len(records):  # a record without its key: decoded again, to say so
                raise ValueError("a record without its key")
            texts = [
                pa.array([key_text(part[i]) for i in present], type=pa.string()) for part in parts
            ]
            index = match_rows(texts, asked)
            values = self._keyed_records.columns([records[i] for i in present])
            values = values.select([f.name for f in self.value_fields])
        else:
            return Matches.none(self.value_fields)
        keep = index >= 0  # records for keys nobody asked are ignored
        if keep.all():
            return Matches(index, values)
        return Matches(index[keep], values.filter(pa.array(keep)))

    @staticmethod
    def _key_texts(keys: pa.RecordBatch, position: int) -> pa.Array:
        """The asked keys of one key column as the text a JSON answer names them by."""
        column = keys.column(position)
        if pa.types.is_integer(column.type) or pa.types.is_string(column.type):
            return column.cast(pa.string())
        return pa.array([key_text(v) for v in column.to_pylist()], type=pa.string())

    def _match_batch(
        self, keys: Sequence[Key], records: Any, what: str, body: bytes
    ) -> LookupResult:
        columns = self.config.key_columns
        by_text: dict[Any, Key] = {_match_text(key): key for key in keys}
        out: dict[Key, Any] = {}
        if isinstance(records, dict):
            if len(columns) > 1:
                raise PermanentError(
                    f"the response to {what} is an object; composite keys need an array of "
                    f"records carrying {', '.join(columns)}"
                )
            for text, record in records.items():
                key = by_text.get(text)
                if key is None or record is None:
                    continue
                out[key] = (
                    record
                    if isinstance(record, dict)
                    else RecordError(
                        f"the response holds a JSON {type(record).__name__} for this key, expected "
                        "an object"
                    )
                )
            return out
        if isinstance(records, list):
            for record in records:
                if not isinstance(record, dict):
                    raise PermanentError(
                        f"the response to {what} holds a JSON {_json_type(record)} in its array "
                        f"of records; expected objects carrying {', '.join(columns)} (see "
                        f"http.json.path): {_excerpt(body)!r}"
                    )
                parts = [record.get(column) for column in columns]
                if any(part is None for part in parts):
                    absent = [c for c, part in zip(columns, parts) if part is None]
                    raise PermanentError(
                        f"a record in the response to {what} has no {', '.join(absent)}: the "
                        "records of an array answer carry their key column(s) by name, so each "
                        f"can be matched to its key: {_excerpt(body)!r}"
                    )
                text = _match_text(parts[0] if len(parts) == 1 else tuple(parts))
                key = by_text.get(text)
                if key is not None:
                    previous = out.get(key)
                    out[key] = record if previous is None else [*_as_list(previous), record]
            return out
        if records is None:
            return out
        raise PermanentError(
            f"the response to {what} holds a JSON {type(records).__name__}; expected an object "
            "(key -> record) or an array of records"
        )


def _answer_shape(record: Any, keyed: Any) -> Any:
    """An object key -> record (or null), or an array of records carrying their key."""
    return dict[str, record | None] | list[keyed] | None


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _loads(body: bytes) -> Any:
    """``json.loads(body)``, decoded by msgspec where it gives the same values (it refuses
    NaN, infinities and invalid text, which json.loads then decides)."""
    try:
        return msgspec.json.decode(body)
    except msgspec.DecodeError:
        return json.loads(body)


def _json_key(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return key_text(value)


def _match_text(key: Any) -> Any:
    if isinstance(key, tuple):
        return tuple(key_text(part) for part in key)
    return key_text(key)
