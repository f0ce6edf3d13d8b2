"""The native service's ``GET /users/{id}`` in nginx's own directives, without JavaScript: the
echo module's ``echo_sleep`` waits the latency (a timer of nginx's), ``echo_exec`` hands the
request to a named location whose ``return`` writes the record (with its Content-Length, as
the Python service does), and two ``map`` tables give the id and the record's fields after
``name``. It costs nginx a few µs a GET, where njs clones a VM and arms a timer for each.

The id is checked by one regular expression, generated for ``0 .. users-1`` (no sign, leading
zeros allowed, as Python's ``int()`` reads them); its last three digits pick the record's tail
from a table of :data:`~lookup_source.bench.native_site.PERIOD` entries (an exact-match hash)::

    map $uri $user_id { "~^/users/0*(?<known>(?=(?:RANGE)$)[0-9]*?(?<low>[0-9]{1,3}))$" $known; }
    map $low $user_tail { "5" ', "tier": ...}'; "005" ', "tier": ...}'; ... }
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ECHO_MODULE_NAME = "ngx_http_echo_module.so"
ECHO_MODULE_ENV = "ASYNCLOOKUP_ECHO_MODULE"
"""The echo module (``ngx_http_echo_module.so``) to load, instead of the one found."""


@dataclass(frozen=True)
class EchoGets:
    """GETs answered by nginx's directives: for ids ``0 .. users-1``, after ``latency_ms``,
    with the echo module at ``module`` (None: built into nginx)."""

    users: int
    latency_ms: float
    module: str | None


def decimal_range_regex(end: int) -> str:
    """A regular expression matching exactly the decimal numbers ``0 .. end-1`` written without
    leading zeros (none when ``end`` is 0: it matches nothing)."""
    if end <= 0:
        return "(?!)"
    parts = []
    top = str(end - 1)
    for width in range(1, len(top)):  # every number shorter than the largest
        parts.append("[0-9]" if width == 1 else f"[1-9][0-9]{{{width - 1}}}")
    parts.extend(_at_most(top))
    return "|".join(parts)


def _at_most(top: str) -> list[str]:
    """Alternatives matching the numbers of ``len(top)`` digits (the first not 0, unless it is
    the only one) up to ``top``."""
    alternatives = []
    for i, digit in enumerate(top):
        low = 1 if i == 0 and len(top) > 1 else 0
        high = int(digit) - 1
        rest = len(top) - i - 1
        if high >= low:
            span = str(low) if low == high else f"[{low}-{high}]"
            tail = "" if rest == 0 else f"[0-9]{{{rest}}}" if rest > 1 else "[0-9]"
            alternatives.append(top[:i] + span + tail)
    alternatives.append(top)
    return alternatives


def whole_milliseconds(latency_ms: float) -> bool:
    """Whether ``echo_sleep`` can wait ``latency_ms`` (it reads seconds to three decimals)."""
    return latency_ms >= 0 and float(latency_ms).is_integer()


def low_digits(period: int) -> int:
    """How many of an id's last digits decide ``id % period`` (a power of ten)."""
    digits = len(str(period)) - 1
    if period != 10**digits or digits < 1:
        raise ValueError(f"the record's period must be a power of ten, got {period}")
    return digits


def tail_map_entries(tails: tuple[str, ...]) -> list[str]:
    """The ``map $low $user_tail`` lines: each tail under an id's last digits, as written both
    without leading zeros (ids below the period) and with them (the ids above)."""
    digits = low_digits(len(tails))
    lines: list[str] = []
    for remainder, tail in enumerate(tails):
        value = _quoted(tail)
        spellings = dict.fromkeys((str(remainder), f"{remainder:0{digits}d}"))
        lines.extend(f'        "{spelling}" {value};' for spelling in spellings)
    return lines


def _quoted(text: str) -> str:
    """``text`` as an nginx string in single quotes (nginx reads ``$`` as a variable)."""
    if "$" in text:
        raise ValueError(f"the native service cannot answer a record holding '$': {text!r}")
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def echo_get_http_lines(users: int, tails: tuple[str, ...], prefix: str) -> list[str]:
    """The ``http`` block's maps: ``$user_id`` (empty for an unknown id), ``$user_tail``."""
    digits = low_digits(len(tails))
    pattern = (
        f"~^{re.escape(prefix)}0*(?<known>(?=(?:{decimal_range_regex(users)})$)"
        f"[0-9]*?(?<low>[0-9]{{1,{digits}}}))$"
    )
    return [
        "    map_hash_max_size 8192;",
        f'    map $uri $user_id {{ "{pattern}" $known; default ""; }}',
        "    map $low $user_tail {",
        '        default "";',
        *tail_map_entries(tails),
        "    }",
    ]


def echo_get_locations(prefix: str, latency_ms: float, not_found: str) -> list[str]:
    """The ``server`` block's locations for ``GET {prefix}{id}``: wait, then answer."""
    if not whole_milliseconds(latency_ms):
        raise ValueError(f"echo_sleep waits whole milliseconds, not {latency_ms} ms")
    sleep = [f"            echo_sleep {latency_ms / 1000:.3f};"] if latency_ms > 0 else []
    return [
        f"        location {prefix} {{",
        "            if ($request_method !~ ^(GET|HEAD)$) { return 405; }",
        *sleep,
        "            echo_exec @user;",
        "        }",
        "        location @user {",
        '            default_type "application/json; charset=utf-8";',
        f'            if ($user_id = "") {{ return 404 {_quoted(not_found)}; }}',
        '            return 200 \'{"user_id": $user_id, "name": "user-$user_id"$user_tail\';',
        "        }",
    ]
