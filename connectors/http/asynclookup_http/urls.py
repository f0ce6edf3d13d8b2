"""The URLs of the HTTP connector: a key as one percent-encoded path segment, the template's
own text encoded once, and the origin a redirect may stay within."""

from __future__ import annotations

import string
from typing import Any
from urllib.parse import quote

_UNSAFE_SEGMENTS = frozenset({"", ".", ".."})


class UnsafeKey(ValueError):
    """A key whose text would change the URL's path (``.``, ``..``, empty)."""


def encode_part(text: str) -> str:
    """A key's text as one percent-encoded part of the URL: every character but letters,
    digits and ``-._~`` encoded (``;``, ``=``, ``,`` too: a server may cut a path at them)."""
    if text.isascii() and text.isalnum():  # what quote() leaves as is (ids, numbers)
        return text
    if text in _UNSAFE_SEGMENTS:  # a URL library and the server collapse them
        raise UnsafeKey(text)
    return quote(text, safe="")


def encoded_template(template: str) -> str:
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


def as_sent(url: str) -> Any:
    """A URL made of an encoded template and encoded keys, for aiohttp as it is."""
    from yarl import URL

    return URL(url, encoded=True)


def same_origin(url: Any, target: Any) -> bool:
    return bool(target.scheme == url.scheme and target.host == url.host and target.port == url.port)
