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

import email.utils
import ssl
import string
import time
import zlib
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
    INT_LIMIT,
    ConnectorConfig,
    ConnectorError,
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
    choice,
    excerpt,
    handshake_check,
    int_between,
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

MAX_RESPONSE_BYTES = 8 << 20
"""Default of ``http.max-response-bytes``: 8 MiB."""

MAX_REDIRECTS = 5
"""Redirects followed for one request with ``http.redirects=same-origin``."""

ACCEPT_ENCODING = "gzip, deflate"
"""What the connector decodes itself (within the size limit)."""

_READ_CHUNK = 1 << 16
_JSON_BODY = {"Content-Type": "application/json"}
_UNSAFE_SEGMENTS = frozenset({"", ".", ".."})


def classify(error: Exception) -> type[ConnectorError] | ConnectorError | None:
    """What an aiohttp exception means to the engine (see ``translated_errors``)."""
    import aiohttp

    if isinstance(error, (aiohttp.ClientConnectorCertificateError, aiohttp.ClientSSLError)):
        return PermanentError
    if isinstance(error, (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError)):
        return TransientError  # refused, reset, dropped mid-answer
    return None


_AIOHTTP_ERRORS = translated_errors("aiohttp", classify, tls="http")


class UnsafeKey(ValueError):
    """A key whose text would change the URL's path (``.``, ``..``, empty)."""


def _encode_part(text: str) -> str:
    """A key's text as one percent-encoded part of the URL: every character but letters,
    digits and ``-._~`` encoded (``;``, ``=``, ``,`` too: a server may cut a path at them)."""
    if text.isascii() and text.isalnum():  # what quote() leaves as is (ids, numbers)
        return text
    if text in _UNSAFE_SEGMENTS:  # a URL library and the server collapse them
        raise UnsafeKey(text)
    return quote(text, safe="")


def _encoded_template(template: str) -> str:
    """``template`` with its own text percent-encoded as yarl would (a space as ``%20``), its
    placeholders kept: the URLs made of it are then sent as they are (``encoded=True``), so
    no URL library decodes what a key's encoding protects (``%3B`` back to ``;``)."""
    from yarl import URL

    marks = {}
    text = template
    for number, (_, name, spec, conversion) in enumerate(string.Formatter().parse(template)):
        if name is None:
            continue
        field = (
            "{"
            + name
            + (f"!{conversion}" if conversion else "")
            + (f":{spec}" if spec else "")
            + "}"
        )
        mark = f"ASYNCLOOKUPKEY{number}X"
        marks[mark] = field
        text = text.replace(field, mark, 1)
    try:
        encoded = str(URL(text))
    except ValueError:  # validated elsewhere, with its own message
        return template
    for mark, field in marks.items():
        encoded = encoded.replace(mark, field, 1)
    return encoded


def _as_sent(url: str) -> Any:
    """A URL made of an encoded template and encoded keys, for aiohttp as it is."""
    from yarl import URL

    return URL(url, encoded=True)


def _decompressor(encoding: str, first: bytes) -> Any:
    """A zlib decompressor for a ``Content-Encoding``, or a PermanentError for one the
    connector does not decode."""
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if encoding == "deflate":  # RFC 1950 (zlib) as it should be, or raw deflate as often sent
        return zlib.decompressobj(zlib.MAX_WBITS if first[:1] and first[0] & 0x0F == 8 else -15)
    raise PermanentError(
        f"the answer's Content-Encoding {encoding!r} is not one the HTTP connector decodes "
        f"({ACCEPT_ENCODING}, identity)"
    )


class _TooLarge(Exception):
    """A body past ``http.max-response-bytes``."""


class _Malformed(Exception):
    """A compressed body that is not what its encoding says."""


MAX_MEMBERS = 64
"""gzip members one answer may hold (a valid gzip body may be several, one after another)."""


class _BoundedBody:
    """A body as it streams in, decoded (``gzip``, ``deflate``) and counted after decoding:
    past ``limit`` bytes, :class:`_TooLarge` — so a compressed bomb costs at most the limit.
    Data after the end of a compressed stream must be another gzip member (at most
    :data:`MAX_MEMBERS`), never bytes kept aside unread."""

    def __init__(self, encoding: str, limit: int) -> None:
        self.encoding = {"x-gzip": "gzip", "identity": ""}.get(encoding, encoding)
        self.limit = limit
        self.out = bytearray()
        self._decompressor: Any = None
        self._members = 0
        self._pending = b""

    def feed(self, chunk: bytes) -> None:
        if not self.encoding:
            self.out += chunk
        else:
            chunk, self._pending = self._pending + chunk, b""
            while chunk:
                if self._decompressor is None:
                    if self._members and self.encoding == "gzip" and len(chunk) < 2:
                        self._pending = chunk  # the next member's header, cut between chunks
                        break
                    if self._members and (self.encoding == "deflate" or chunk[:2] != b"\x1f\x8b"):
                        raise _Malformed("data after the end of the compressed answer")
                    self._members += 1
                    if self._members > MAX_MEMBERS:
                        raise _Malformed(f"more than {MAX_MEMBERS} compressed members")
                    self._decompressor = _decompressor(self.encoding, chunk)
                decompressor = self._decompressor
                self.out += decompressor.decompress(chunk, self.limit + 1 - len(self.out))
                if len(self.out) > self.limit:
                    break
                chunk = decompressor.unconsumed_tail
                if decompressor.eof:  # the member ended: what follows starts the next one
                    chunk = decompressor.unused_data + chunk
                    self._decompressor = None
        if len(self.out) > self.limit:
            raise _TooLarge

    def finish(self) -> bytes:
        if self._pending:
            raise _Malformed("data after the end of the compressed answer")
        if self._decompressor is not None:
            self.out += self._decompressor.flush()
            if not self._decompressor.eof:
                raise _Malformed("the compressed answer ends before its end")
        if len(self.out) > self.limit:
            raise _TooLarge
        return bytes(self.out)


def _same_origin(url: Any, target: Any) -> bool:
    return bool(target.scheme == url.scheme and target.host == url.host and target.port == url.port)


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


BATCH_URL: OptionSpec[str | None] = OptionSpec(
    "http.batch.url",
    parse_text,
    None,
    'Batch style: this URL receives a POST of `{"keys": [...]}` with `batch.size` keys '
    "and answers an object (key -> record) or an array of records carrying their key. "
    "Unset: one GET per key on the `url` template.",
)

BATCH_KEYS_FIELD: OptionSpec[str] = OptionSpec(
    "http.batch.keys-field",
    parse_text,
    "keys",
    "Name of the key list in the batch request body.",
)

JSON_PATH: OptionSpec[tuple[str, ...]] = OptionSpec(
    "http.json.path",
    parse_json_path,
    (),
    "Dotted path of the record (per key) or of the records (batch) inside the response, "
    "e.g. `data.user`.",
    default_doc="(the whole body)",
)

TLS_VERIFY: OptionSpec[bool] = OptionSpec(
    "http.tls.verify",
    parse_bool,
    True,
    "Verify TLS certificates. Turning it off is for test servers only.",
)

REDIRECTS: OptionSpec[str] = OptionSpec(
    "http.redirects",
    choice("none", "same-origin"),
    "none",
    "`none`: a redirect (3xx) is an error naming its status and where it pointed; "
    f"`same-origin`: up to {MAX_REDIRECTS} redirects are followed when they stay on the "
    "same scheme, host and port (a POST only on 307/308), never elsewhere, so the "
    "lookup's headers never reach another server.",
)

MAX_RESPONSE_BYTES_OPTION: OptionSpec[int] = OptionSpec(
    "http.max-response-bytes",
    int_between(1024, INT_LIMIT),
    MAX_RESPONSE_BYTES,
    "Largest answer body, counted after decompression as it streams (a compressed "
    "bomb costs at most this); a larger answer is an error of its key(s), not retried.",
)

HEADER: OptionSpec[str] = OptionSpec(
    "http.header.",
    _parse_header_value,
    None,
    "A request header, e.g. `http.header.Accept=application/json`. "
    "`http.header.<Name>.env=VAR` takes the value from the executor's environment "
    "variable VAR, so secrets stay out of query plans.",
    prefix=True,
)


class HttpLookupClient(LookupClient):
    """Looks keys up over HTTP with aiohttp."""

    name: ClassVar[str] = "http"
    honours_cancellation: ClassVar[bool] = True  # checked by the fault tests (slow answers)
    default_batch_size: ClassVar[int] = 1
    option_specs: ClassVar[tuple[OptionSpec, ...]] = (
        BATCH_URL,
        BATCH_KEYS_FIELD,
        JSON_PATH,
        TLS_VERIFY,
        REDIRECTS,
        MAX_RESPONSE_BYTES_OPTION,
        *tls_option_specs("http", "the HTTPS server"),
        HEADER,
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
        self._template = (
            None
            if self._batch_url
            else KeyTemplate(
                "url", _encoded_template(config.url or ""), config.key_columns, encode=_encode_part
            )
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
            cookie_jar=aiohttp.DummyCookieJar(),  # one key's answer never reaches the next
            auto_decompress=False,  # decoded here, within http.max-response-bytes
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
            try:
                url = self._template.render(key)
            except UnsafeKey as unsafe:
                out[key] = RecordError(
                    f"its text {str(unsafe)!r} cannot be a path segment of url: it would "
                    "reach another resource"
                )
                continue
            status, body, retry_after = await self._exchange("GET", url, encoded=True)
            if status == 404:
                continue
            if not 200 <= status < 300:
                self._check_status(status, body, retry_after, f"GET {redact_url(url)}")
            out[key] = self._record(key, body)
        return out

    async def _exchange(
        self,
        method: str,
        url: str,
        body: bytes | None = None,
        headers: Any = None,
        *,
        encoded: bool = False,
    ) -> tuple[int, bytes, str | None]:
        """One request: its status, its body (bounded, decoded) and its Retry-After; a
        redirect followed only when ``http.redirects=same-origin`` allows it. ``encoded``: the
        URL is sent as it is (made of an encoded template and encoded keys)."""
        for _ in range(MAX_REDIRECTS + 1):
            target = _as_sent(url) if encoded else url
            async with self._session.request(
                method, target, data=body, headers=headers, allow_redirects=False
            ) as response:
                status = response.status
                if 300 <= status < 400:
                    url = self._redirected(method, url, response)
                    encoded = True  # as yarl joined it
                    continue
                return (
                    status,
                    await self._read(response, method, url),
                    response.headers.get("Retry-After"),
                )
        raise PermanentError(f"more than {MAX_REDIRECTS} redirects from {method} {redact_url(url)}")

    def _redirected(self, method: str, url: str, response: Any) -> str:
        """Where a redirect may be followed, or the PermanentError that says why not."""
        from yarl import URL

        status, location = response.status, response.headers.get("Location")
        where = f"HTTP {status} redirect from {method} {redact_url(url)}"
        if not location:
            raise PermanentError(f"{where} with no Location")
        asked = URL(url)
        target = asked.join(URL(location))
        shown = redact_url(str(target))
        if not self._same_origin:
            raise PermanentError(
                f"{where} to {shown}: redirects are not followed (set http.redirects="
                "same-origin to follow those that stay on the same scheme, host and port)"
            )
        if not _same_origin(asked, target):
            raise PermanentError(
                f"{where} to {shown}: it leaves the origin, and the lookup's headers never do"
            )
        if method != "GET" and status not in (307, 308):
            raise PermanentError(f"{where} to {shown}: a {method} follows only 307 and 308")
        return str(target)

    async def _read(self, response: Any, method: str, url: str) -> bytes:
        """The body, decoded, of at most ``http.max-response-bytes``; the connection is
        dropped, not reused, when the body is cut short."""
        limit = self._max_bytes
        length = response.content_length
        encoding = response.headers.get("Content-Encoding", "").strip().lower()
        if length is not None and length > limit and encoding in ("", "identity"):
            response.close()
            raise self._too_large(method, url, length)
        if encoding in ("", "identity") and length is not None:
            return bytes(await response.read())  # exactly Content-Length bytes
        decoder = _BoundedBody(encoding, limit)
        content = response.content
        try:
            while chunk := await content.read(_READ_CHUNK):
                decoder.feed(chunk)
            return decoder.finish()
        except _TooLarge:
            response.close()
            raise self._too_large(method, url, None) from None
        except (zlib.error, _Malformed) as exc:
            response.close()
            raise PermanentError(
                f"the answer to {method} {redact_url(url)} is not valid {encoding}: {exc}"
            ) from None

    def _too_large(self, method: str, url: str, length: int | None) -> PermanentError:
        size = f" ({length:,} bytes)" if length is not None else ""
        return PermanentError(
            f"the answer to {method} {redact_url(url)} is larger than "
            f"http.max-response-bytes={self._max_bytes:,}{size}, counted after decompression"
        )

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
        status, answer, retry_after = await self._exchange(
            "POST", self._batch_url, body, _JSON_BODY
        )
        what = f"POST {self._batch_url_shown} ({keys.num_rows} keys)"
        if status == 404:
            return Matches.none(self.value_fields)
        self._check_status(status, answer, retry_after, what)
        assert self._answers is not None
        return self._answers.matches(keys, answer, what)
