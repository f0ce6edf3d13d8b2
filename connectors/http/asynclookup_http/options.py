"""The HTTP connector's own options, each declared once as a typed constant (read with
``BATCH_URL.get(config)``); the TLS options come from the connector kit."""

from __future__ import annotations

from asynclookup_http.answers import parse_json_path
from lookup_source.connector_api import (
    INT_LIMIT,
    OptionSpec,
    choice,
    int_between,
    parse_bool,
    parse_text,
)

BATCH_POST_SIZE = 100
"""Keys per batch POST unless ``batch.size`` says otherwise."""

MAX_RESPONSE_BYTES = 8 << 20
"""Default of ``http.max-response-bytes``: 8 MiB."""

MAX_REDIRECTS = 5
"""Redirects followed for one request with ``http.redirects=same-origin``."""


def _parse_header_value(value: str) -> str:
    if "\n" in value or "\r" in value:
        raise ValueError("a header value cannot contain a line break")
    return value


BATCH_URL: OptionSpec[str | None] = OptionSpec(
    "http.batch.url",
    parse_text,
    None,
    'Batch style: this URL receives a POST of `{"keys": [...]}` with `batch.size` keys '
    "and answers an object (key -> record) or an array of records carrying their key. "
    "Unset: one GET per key on the `url` template.",
    url=True,
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
    secret=True,
)

CLIENT: OptionSpec[str] = OptionSpec(
    "http.client",
    choice("auto", "aiohttp", "pyreqwest"),
    "auto",
    "The HTTP client library: `pyreqwest` (Rust's reqwest and hyper, rustls; Python 3.11+, "
    '`pip install "asynclookup-http[native]"`: about half the CPU per request), `aiohttp`, or '
    "`auto`: pyreqwest where it is installed and can keep the TLS options as given, else "
    "aiohttp. Every other option means the same on both.",
)
