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

What a service sends back is not trusted (the session is kept by the worker and serves every
key of every task): redirects are not followed unless ``http.redirects=same-origin`` (then only
to the same scheme, host and port: secrets never go elsewhere, never from https to http); a
body larger than ``http.max-response-bytes`` after decompression is an error, read as it
streams so a compressed bomb costs at most the limit; no cookie is ever kept; a key whose text
is ``.``, ``..`` or empty cannot be a URL's path segment (it would reach another resource) and
is that key's error.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any, ClassVar

import msgspec
import pyarrow as pa
from yarl import URL

from asynclookup_http import native_transport as native
from asynclookup_http.aiohttp_transport import AiohttpTransport, classify, context_of
from asynclookup_http.answers import BatchAnswers, json_key, record
from asynclookup_http.body import ACCEPT_ENCODING
from asynclookup_http.exchange import check_status, exchange
from asynclookup_http.options import (
    BATCH_KEYS_FIELD,
    BATCH_POST_SIZE,
    BATCH_URL,
    CLIENT,
    HEADER,
    JSON_PATH,
    MAX_RESPONSE_BYTES_OPTION,
    REDIRECTS,
    TLS_VERIFY,
)
from asynclookup_http.transport import Transport
from asynclookup_http.urls import UnsafeKey, encode_part, encoded_template
from lookup_source.connector_api import (
    ConnectorConfig,
    Key,
    KeyTemplate,
    LookupClient,
    LookupResult,
    Matches,
    OptionError,
    OptionSpec,
    RecordError,
    TableFacts,
    TlsSettings,
    handshake_check,
    python_keys,
    redact_url,
    require_url,
    secret_from_env,
    tls_option_specs,
)

JSON_BODY = {"Content-Type": "application/json"}

__all__ = ["HttpLookupClient", "classify"]


class HttpLookupClient(LookupClient):
    """Looks keys up over HTTP, through the transport ``http.client`` names (aiohttp by
    default)."""

    name: ClassVar[str] = "http"
    honours_cancellation: ClassVar[bool] = True  # checked by the fault tests (slow answers)
    default_batch_size: ClassVar[int] = 1
    preferred_loop: ClassVar[str] = "uvloop"  # less CPU per GET on both transports (the bench)
    option_specs: ClassVar[tuple[OptionSpec, ...]] = (
        BATCH_URL,
        BATCH_KEYS_FIELD,
        JSON_PATH,
        TLS_VERIFY,
        REDIRECTS,
        MAX_RESPONSE_BYTES_OPTION,
        *tls_option_specs("http", "the HTTPS server"),
        HEADER,
        CLIENT,
    )

    def __init__(self, config: ConnectorConfig) -> None:
        super().__init__(config)
        self._batch_url = BATCH_URL.get(config)
        self._batch_url_shown = redact_url(self._batch_url) if self._batch_url else ""
        self._keys_field = BATCH_KEYS_FIELD.get(config)
        self._path = tuple(JSON_PATH.get(config))
        self._verify = TLS_VERIFY.get(config)
        self._same_origin = REDIRECTS.get(config) == "same-origin"
        self._max_bytes = MAX_RESPONSE_BYTES_OPTION.get(config)
        self._batch_target = str(URL(self._batch_url)) if self._batch_url else None
        self._template = (
            None
            if self._batch_url
            else KeyTemplate(
                "url", encoded_template(config.url or ""), config.key_columns, encode=encode_part
            )
        )
        self._transport: Transport | None = None
        self._handshake: AbstractAsyncContextManager[None] | None = None
        """The TLS handshake's check (https with a fixed host), or None: nothing to check."""
        self._answers = (
            BatchAnswers(self.value_fields, config.key_columns, self._path)
            if self._batch_url
            else None
        )

    # -- validation ----------------------------------------------------------------------------

    @classmethod
    def batch_size_default(cls, connector_options: Mapping[str, Any]) -> int:
        return BATCH_POST_SIZE if BATCH_URL.get(connector_options) else 1

    @classmethod
    def describe_batch_size_default(cls) -> str:
        return f"1 per GET, {BATCH_POST_SIZE} per batch POST"

    @classmethod
    def validate_options(cls, options: ConnectorConfig) -> None:
        batch_url = BATCH_URL.get(options)
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
        if not TLS_VERIFY.get(options) and tls.ca_file:
            raise OptionError(
                "http.tls.ca-file", "verifies the server, which http.tls.verify=false turns off"
            )

    @classmethod
    def validate_config(cls, config: ConnectorConfig) -> None:
        if BATCH_URL.get(config):
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
        headers = {"Accept": "application/json", "Accept-Encoding": ACCEPT_ENCODING}
        for header, value in HEADER.family(self.config):
            if header.endswith(".env"):
                value = secret_from_env(HEADER.name + header, value)
                header = header[: -len(".env")]
            headers[header] = value
        return headers

    # -- life cycle ----------------------------------------------------------------------------

    async def open(self) -> None:
        tls = self._ssl()
        check = handshake_check(
            "http",
            self._batch_url or self.config.url or "",
            lambda: context_of(tls),
            scheme="https",
            default_port=443,
        )
        self._handshake = None if isinstance(check, nullcontext) else check
        transport = self._chosen_transport(tls)
        await transport.open()
        self._transport = transport

    def _chosen_transport(self, tls: Any) -> Transport:
        """The transport ``http.client`` asks for (``auto``: the native one where it is
        installed and keeps the TLS options as given, else aiohttp)."""
        chosen = CLIENT.get(self.config)
        if chosen != "aiohttp":
            settings = TlsSettings.from_options("http", self.config.options)
            why = native.available() or native.unsupported(settings, self._verify)
            if why is None:
                return native.NativeTransport(
                    self.config.capacity,
                    self.headers(),
                    settings,
                    verify=self._verify,
                    timeout_s=self.config.timeout_s,
                    read_ahead=self._max_bytes + 1,
                )
            if chosen == "pyreqwest":
                raise OptionError("http.client", f"is pyreqwest, but {why}")
        return AiohttpTransport(self.config.capacity, self.headers(), tls)

    @property
    def transport(self) -> str:
        """The transport in use (``aiohttp`` or ``pyreqwest``), once open."""
        return self._transport.name if self._transport is not None else ""

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
        if self._transport is not None:
            transport, self._transport = self._transport, None
            await transport.close()

    # -- lookups -------------------------------------------------------------------------------

    @property
    def columnar(self) -> bool:
        # a batch answer carries many keys: decoded into columns. A per-key GET carries one:
        # its record is kept, and the engine converts the records of a whole input batch.
        return self._batch_url is not None

    async def table_facts(self) -> TableFacts:
        """A service answers for keys: it holds no null key, and is taken to hold some (it
        cannot be listed, so Spark's own join cannot read it at all)."""
        return TableFacts(null_key=False, any_row=True)

    async def lookup(self, keys: Sequence[Key]) -> LookupResult:
        if self._transport is None:
            raise RuntimeError("HttpLookupClient.lookup() called before open()")
        if self._handshake is None:
            with self._transport.errors:
                return await self._get(keys)
        async with self._handshake:
            with self._transport.errors:
                return await self._get(keys)

    async def _get(self, keys: Sequence[Key]) -> LookupResult:
        if self._batch_url:
            return await super().lookup(keys)
        assert self._template is not None and self._transport is not None
        transport = self._transport
        out: dict[Key, Any] = {}
        for key in keys:
            try:
                url = self._template.render(key)
            except UnsafeKey as unsafe:
                out[key] = RecordError(
                    f"its text {str(unsafe)!r} cannot be a path segment of url: it would "
                    "reach another resource"
                )
                continue
            status, body, retry_after = await exchange(
                transport, "GET", url, follow=self._same_origin, max_bytes=self._max_bytes
            )
            if status == 404:
                continue
            if not 200 <= status < 300:
                check_status(status, body, retry_after, f"GET {redact_url(url)}")
            out[key] = record(body, self._path)
        return out

    async def _exchange(
        self, method: str, url: str, body: bytes | None = None, headers: Any = None
    ) -> tuple[int, bytes, str | None]:
        """One request (:func:`.exchange.exchange`): its status, its body and its Retry-After."""
        assert self._transport is not None
        return await exchange(
            self._transport,
            method,
            url,
            body,
            headers,
            follow=self._same_origin,
            max_bytes=self._max_bytes,
        )

    # -- batch style ---------------------------------------------------------------------------

    async def lookup_arrow(self, keys: pa.RecordBatch) -> Matches:
        if not self._batch_url:
            return await super().lookup_arrow(keys)
        if self._transport is None:
            raise RuntimeError("HttpLookupClient.lookup_arrow() called before open()")
        async with self._handshake or nullcontext():
            with self._transport.errors:
                return await self._post(keys)

    async def _post(self, keys: pa.RecordBatch) -> Matches:
        assert self._batch_target is not None
        columns = self.config.key_columns
        if len(columns) == 1:
            column = keys.column(0)
            payload: list[Any] = column.to_pylist()
            if not (pa.types.is_integer(column.type) or pa.types.is_string(column.type)):
                payload = [json_key(v) for v in payload]  # JSON has no dates, decimals, bytes
        else:
            payload = [dict(zip(columns, map(json_key, key))) for key in python_keys(keys)]
        body = msgspec.json.encode({self._keys_field: payload})
        status, answer, retry_after = await self._exchange(
            "POST", self._batch_target, body, JSON_BODY
        )
        what = f"POST {self._batch_url_shown} ({keys.num_rows} keys)"
        if status == 404:
            return Matches.none(self.value_fields)
        check_status(status, answer, retry_after, what)
        assert self._answers is not None
        return self._answers.matches(keys, answer, what)
