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
import ssl
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any, ClassVar
from urllib.parse import quote

import msgspec
import pyarrow as pa

from asynclookup_http.answers import (
    Absent,
    BatchAnswers,
    json_key,
    loads,
    parse_json_path,
    select,
)
from lookup_source.connector_api import (
    ConnectorConfig,
    ConnectorError,
    ConnectorOptions,
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
    excerpt,
    handshake_check,
    parse_bool,
    parse_text,
    python_keys,
    redact_url,
    require_url,
    secret_from_env,
    tls_option_specs,
    translated_errors,
)

RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})
OVERLOADED_STATUS = frozenset({429, 503})
BATCH_POST_SIZE = 100
"""Keys per batch POST unless ``batch.size`` says otherwise."""


def classify(error: Exception) -> type[ConnectorError] | ConnectorError | None:
    """What an aiohttp exception means to the engine (see ``translated_errors``)."""
    import aiohttp

    if isinstance(error, (aiohttp.ClientConnectorCertificateError, aiohttp.ClientSSLError)):
        return PermanentError
    if isinstance(error, (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError)):
        return TransientError  # refused, reset, dropped mid-answer
    return None


_AIOHTTP_ERRORS = translated_errors("aiohttp", classify, tls="http")


def _encode_path_part(text: str) -> str:
    if text.isascii() and text.isalnum():  # what quote() leaves as is (ids, numbers)
        return text
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


def _parse_header_value(value: str) -> str:
    if "\n" in value or "\r" in value:
        raise ValueError("a header value cannot contain a line break")
    return value


def _context_of(setting: Any) -> ssl.SSLContext:
    """The SSL context aiohttp makes of its ``ssl`` argument (a context, True or False)."""
    if isinstance(setting, ssl.SSLContext):
        return setting
    context = ssl.create_default_context()
    if not setting:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


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
            parse_json_path,
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
        self._batch_url_shown = redact_url(self._batch_url) if self._batch_url else ""
        self._keys_field: str = options.get("http.batch.keys-field", "keys")
        self._path: tuple[str, ...] = tuple(options.get("http.json.path", ()))
        self._verify: bool = options.get("http.tls.verify", True)
        self._template = (
            None
            if self._batch_url
            else KeyTemplate("url", config.url or "", config.key_columns, encode=_encode_path_part)
        )
        self._session: Any = None
        self._handshake: AbstractAsyncContextManager[None] = nullcontext()
        self._answers = (
            BatchAnswers(self.value_fields, config.key_columns, self._path)
            if self._batch_url
            else None
        )

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
            if url:
                require_url(
                    url_option,
                    url,
                    ("http://", "https://"),
                    connector="http",
                    example="https://api.example.com/users/{key}",
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
        tls = self._ssl()
        connector = aiohttp.TCPConnector(
            limit=max(1, self.config.capacity),
            limit_per_host=max(1, self.config.capacity),
            ssl=tls,
        )
        self._handshake = handshake_check(
            "http",
            self._batch_url or self.config.url or "",
            lambda: _context_of(tls),
            scheme="https",
            default_port=443,
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
        async with self._handshake:
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
        message = f"HTTP {status} from {what}: {excerpt(body)!r}"
        if status in RETRYABLE_STATUS:
            kind = OverloadedError if status in OVERLOADED_STATUS else TransientError
            raise kind(message, retry_after=parse_retry_after(retry_after))
        raise PermanentError(message)

    def _record(self, key: Key, body: bytes) -> Any:
        try:
            document = loads(body)
        except RecursionError:
            return RecordError(f"the response is nested too deeply to decode: {excerpt(body)!r}")
        except (ValueError, UnicodeDecodeError):
            return RecordError(f"the response is not valid JSON: {excerpt(body)!r}")
        where = f"the response at {'.'.join(self._path)}" if self._path else "the response"
        selected = select(document, self._path)
        if isinstance(selected, Absent):
            return RecordError(selected.message("the response", body))
        return as_records(selected, where)

    # -- batch style ---------------------------------------------------------------------------

    async def lookup_arrow(self, keys: pa.RecordBatch) -> Matches:
        if not self._batch_url:
            return await super().lookup_arrow(keys)
        async with self._handshake:
            with _AIOHTTP_ERRORS:
                return await self._post(keys)

    async def _post(self, keys: pa.RecordBatch) -> Matches:
        assert self._batch_url is not None
        if self._session is None:
            raise RuntimeError("HttpLookupClient.lookup_arrow() called before open()")
        columns = self.config.key_columns
        if len(columns) == 1:
            column = keys.column(0)
            payload: list[Any] = column.to_pylist()
            if not (pa.types.is_integer(column.type) or pa.types.is_string(column.type)):
                payload = [json_key(v) for v in payload]  # JSON has no dates, decimals, bytes
        else:
            payload = [dict(zip(columns, map(json_key, key))) for key in python_keys(keys)]
        body = msgspec.json.encode({self._keys_field: payload})
        headers = {"Content-Type": "application/json"}
        async with self._session.post(self._batch_url, data=body, headers=headers) as response:
            answer = await response.read()
            status = response.status
            retry_after = response.headers.get("Retry-After")
        what = f"POST {self._batch_url_shown} ({keys.num_rows} keys)"
        if status == 404:
            return Matches.none(self.value_fields)
        self._check_status(status, answer, retry_after, what)
        assert self._answers is not None
        return self._answers.matches(keys, answer, what)
