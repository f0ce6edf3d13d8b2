"""Options of a connector: how each is named, parsed, defaulted and documented.

A connector declares each of its options once, as a typed constant (Flink's
``ConfigOptions``), lists them in ``LookupClient.option_specs`` and reads them through it::

    KEY_PATTERN = OptionSpec("redis.key.pattern", parse_key_pattern, "{key}", "Key template.")
    option_specs = (KEY_PATTERN, ...)
    ...
    pattern = KEY_PATTERN.get(config)      # the parsed value, or the default

Options are named ``<connector>.<option>``; the parsers below turn the string every option
arrives as into a value, or raise ``ValueError`` with a message that completes
"option 'x': ...".
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

Parser = Callable[[str], Any]

T = TypeVar("T")


@dataclass(frozen=True)
class OptionSpec(Generic[T]):
    """One option: its name, how to parse its string value, its default and its documentation.

    ``prefix=True`` declares a family of options (``http.header.`` matches
    ``http.header.Authorization``). ``secret=True``: a value may be a credential (a header),
    so it is never shown (plans, logs, the lookup's public identity) and any text that quotes
    one reading like a credential is redacted; an option whose name says it is a secret
    (``*password*``, ``*token*``...) or names an environment variable (``*.env``) is treated
    so without it. ``url=True``: the value is a URL whose password and secret query
    parameters are secrets, as the ``url`` option's are.
    """

    name: str
    parse: Callable[[str], T]
    default: Any
    doc: str
    prefix: bool = False
    default_doc: str | None = None
    secret: bool = False
    url: bool = False

    def matches(self, name: str) -> bool:
        """Whether ``name`` is this option (or, for a family, one of it)."""
        return self.name == name or (self.prefix and name.startswith(self.name))

    def get(self, config: Any) -> T:
        """This option's parsed value in ``config`` (a ``ConnectorConfig``, or a mapping of
        parsed options), or its default when it was not given."""
        options: Mapping[str, Any] = config if isinstance(config, Mapping) else config.options
        return cast(T, options.get(self.name, self.default))

    def family(self, config: Any) -> list[tuple[str, Any]]:
        """The members of this family of options (``prefix=True``) given in ``config`` (a
        ``ConnectorConfig``, or a mapping of parsed options): each one's name after the prefix
        (``Accept`` for ``http.header.Accept``) and its value, those without a value left out."""
        if not self.prefix:
            raise ValueError(f"option {self.name!r} is not a family of options (prefix=True)")
        options: Mapping[str, Any] = config if isinstance(config, Mapping) else config.options
        return [
            (name[len(self.name) :], value)
            for name, value in options.items()
            if name.startswith(self.name) and value is not None
        ]

    def describe_default(self) -> str:
        if self.default_doc is not None:
            return self.default_doc
        if self.default is None:
            return "(none)"
        if isinstance(self.default, bool):
            return "true" if self.default else "false"
        return str(self.default)


def find_spec(name: str, specs: Iterable[OptionSpec[Any]]) -> OptionSpec[Any] | None:
    """The spec among ``specs`` that declares option ``name`` (a family's, for a member of
    it), or None."""
    return next((spec for spec in specs if spec.matches(name)), None)


def declared_options(factory: Any) -> tuple[OptionSpec[Any], ...]:
    """The options a client ``factory`` (a connector class) declares (``option_specs``): which
    of them are secrets and which hold URLs is theirs to say; nothing for a user's function."""
    declared = getattr(factory, "option_specs", ()) if isinstance(factory, type) else ()
    return tuple(spec for spec in declared if isinstance(spec, OptionSpec))


def declared_secret(name: str, specs: Iterable[OptionSpec[Any]]) -> bool:
    """Whether option ``name`` is declared secret among ``specs``."""
    spec = find_spec(name, specs)
    return spec is not None and spec.secret


# ---------------------------------------------------------------------------------------------
# Value parsers: each raises ValueError with a message that completes "option 'x': ..."
# ---------------------------------------------------------------------------------------------


def parse_text(value: str) -> str:
    return value


def parse_required_text(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


INT_LIMIT = 2**31 - 1
"""The largest whole number an option takes unless its own range is narrower: a count, a size
or a threshold beyond it is a mistake (and overflows what Python's C parts accept)."""

RATE_LIMIT = 1e9
"""The largest rate (per second) an option takes."""


def _int(value: str) -> int:
    text = value.strip().replace("_", "")
    if len(text) > 64:  # no whole number an option takes is this long
        raise ValueError(f"expected a whole number of at most {INT_LIMIT:,}, got {value[:40]!r}...")
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"expected a whole number, got {value!r}") from None


def int_between(minimum: int, maximum: int) -> Parser:
    """A parser of whole numbers from ``minimum`` to ``maximum``, both included."""

    def parse(value: str) -> int:
        number = _int(value)
        if number < minimum:
            low = {0: "0 or more", 1: "at least 1"}.get(minimum, f"at least {minimum:,}")
            raise ValueError(f"must be {low}, got {number:,}")
        if number > maximum:
            raise ValueError(f"must be at most {maximum:,}, got {number:,}")
        return number

    return parse


parse_positive_int: Parser = int_between(1, INT_LIMIT)
"""A whole number from 1 to :data:`INT_LIMIT`."""

parse_non_negative_int: Parser = int_between(0, INT_LIMIT)
"""A whole number from 0 to :data:`INT_LIMIT`."""


def parse_rate(value: str) -> float:
    text = value.strip()
    try:
        rate = float(text)
    except ValueError:
        raise ValueError(f"expected a number of requests per second, got {value!r}") from None
    if rate < 0 or rate != rate or rate > RATE_LIMIT:
        raise ValueError(
            f"must be 0 (no limit) or a positive number of at most {RATE_LIMIT:,.0f}, got {value!r}"
        )
    return rate


def parse_bool(value: str) -> bool:
    text = value.strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def choice(*choices: str) -> Parser:
    """A parser that accepts one of ``choices`` (case-insensitive)."""

    def parse(value: str) -> str:
        text = value.strip().lower()
        if text in choices:
            return text
        near = difflib.get_close_matches(text, choices, n=1)
        hint = f" (did you mean '{near[0]}'?)" if near else ""
        raise ValueError(f"expected one of {', '.join(choices)}; got {value!r}{hint}")

    parse.choices = choices  # type: ignore[attr-defined]  # what it accepts, for tools
    return parse


def parse_column_list(value: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in value.split(","))
    if not names or any(not name for name in names):
        raise ValueError(f"expected a comma-separated list of column names, got {value!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"lists a column twice: {value!r}")
    return names


def parse_keys(value: str) -> tuple[Any, ...]:
    """A JSON array of keys; for composite keys, an array of arrays."""
    try:
        keys = json.loads(value)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f'expected a JSON array such as [1, 2, 3] or [["a", 1], ["b", 2]]: {exc}'
        ) from None
    if not isinstance(keys, list):
        raise ValueError(f"expected a JSON array, got {type(keys).__name__}")
    out: list[Any] = []
    for position, key in enumerate(keys):
        if isinstance(key, list):
            if any(isinstance(part, (list, dict)) for part in key):
                raise ValueError(f"key #{position} {key!r} nests arrays or objects")
            out.append(tuple(key))
        elif isinstance(key, dict):
            raise ValueError(f"key #{position} is a JSON object; keys are scalars or arrays")
        else:
            out.append(key)
    return tuple(out)
