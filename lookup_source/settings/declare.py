"""How a core option is declared: once, on the dataclass field it fills (Flink's
``ConfigOption``), with its key, parser, default, unit, doc and the surfaces that take it.

>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Example:
...     size: int = option("example.size", int_between(1, 10), 3, "A size.")
>>> [(o.key, o.attribute, o.spec.default) for o in declared(Example)]
[('example.size', 'size', 3)]
>>> build(Example, {"example.size": 5})
Example(size=5)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from lookup_source.connector_api.options import OptionSpec, Parser, int_between, parse_bool

SURFACES = ("lookup_join", "table function", "data source", "SQL JOIN")
EVERYWHERE = frozenset(SURFACES)
JOINS = frozenset({"lookup_join", "table function", "SQL JOIN"})
LOOKUP_JOIN = frozenset({"lookup_join"})
PLANS = frozenset({"lookup_join", "SQL JOIN"})
READER = frozenset({"data source"})

_DECLARED = "asynclookup.option"
_GROUP = "asynclookup.group"


@dataclass(frozen=True)
class CoreOption:
    """A core option as declared on its field (Flink's ``ConfigOption``): its key, parser,
    default and doc (:class:`OptionSpec`), its unit, the surfaces that take it, and the
    attribute of :class:`LookupOptions` it fills (``retry.max_attempts`` inside a group)."""

    spec: OptionSpec
    attribute: str
    unit: str | None = None
    scope: frozenset[str] = EVERYWHERE

    @property
    def key(self) -> str:
        return self.spec.name

    def describe_scope(self) -> str | None:
        """Where the option applies, when not everywhere."""
        if self.scope == EVERYWHERE:
            return None
        names = {
            "lookup_join": "lookup_join",
            "table function": "the SQL table function",
            "SQL JOIN": "a SQL JOIN against a lookup table (the SQL extension)",
        }
        if self.scope == READER:
            return "the data source only"
        return " and ".join(names.get(name, name) for name in SURFACES if name in self.scope)


# The keys of the options that code outside their declaration sets or reads by name, each
# written once, here.
BUDGET_TASKS = "budget.tasks"
CONNECTOR = "connector"
KEYS = "keys"
KEY_COLUMN = "key.column"
RATE_LIMIT = "rate.limit"
RATE_LIMIT_TOTAL = "rate.limit.total"
PARTITION_BY_KEY = "partition.by-key"
FILTER_PUSHDOWN = "filter.pushdown"
STRATEGY = "strategy"
STRATEGY_BROADCAST_MAX_ROWS = "strategy.broadcast.max-rows"
STRATEGY_LOOKUP_MAX_INPUT_ROWS = "strategy.lookup.max-input-rows"
SCAN_READER = "scan.reader"
SQL_JOIN_FUNCTION = "sql.join.function"
KEY_EQUALITY = "key.equality"
ON_UNFIT_KEY = "on.unfit-key"


PROGRESS_FORMS = ("true", "fields", "false")
"""``metrics.progress``: one text field (the default), named numbers, or no entry."""


def parse_progress(value: str) -> str:
    text = value.strip().lower()
    if text == "fields":
        return "fields"
    try:
        return "true" if parse_bool(value) else "false"
    except ValueError:
        raise ValueError(f"expected one of {', '.join(PROGRESS_FORMS)}, got {value!r}") from None


def option(
    key: str,
    parse: Parser,
    default: Any,
    doc: str,
    *,
    unit: str | None = None,
    scope: frozenset[str] = EVERYWHERE,
    default_doc: str | None = None,
) -> Any:
    """A dataclass field that is a core option: its key is written here, and only here."""
    declared = (OptionSpec(key, parse, default, doc, default_doc=default_doc), unit, scope)
    return field(default=default, metadata={_DECLARED: declared})


MAX_DURATION_MS = 365 * 24 * 3_600_000
"""The longest duration an option takes (a year): beyond, a time would overflow the stores'
and the event loop's clocks (Redis refuses such an expiry)."""


def _milliseconds_as_seconds(positive: bool, max_ms: int) -> Parser:
    whole = int_between(1 if positive else 0, max_ms)

    def parse(value: str) -> float:
        return whole(value) / 1000.0

    return parse


def duration_ms(
    key: str,
    default_ms: int,
    doc: str,
    *,
    positive: bool = False,
    max_ms: int = MAX_DURATION_MS,
    default_doc: str | None = None,
) -> Any:
    """A duration: given in milliseconds (the key ends in ``.ms``), held in seconds; from 0
    (1 when ``positive``) to ``max_ms``."""
    spec = OptionSpec(
        key,
        _milliseconds_as_seconds(positive, max_ms),
        default_ms / 1000.0,
        doc,
        default_doc=default_doc or str(default_ms),
    )
    return field(default=default_ms / 1000.0, metadata={_DECLARED: (spec, "ms", EVERYWHERE)})


def group(settings: type) -> Any:
    """A field that holds a group of options (a dataclass of :func:`option` fields)."""
    return field(default_factory=settings, metadata={_GROUP: settings})


def ratio_above_one(value: str) -> float:
    try:
        ratio = float(value.strip())
    except ValueError:
        raise ValueError(f"expected a number above 1, such as 2.0, got {value!r}") from None
    if not 1 < ratio <= 1000:
        raise ValueError(f"must be a number above 1 and at most 1000, got {value!r}")
    return ratio


def declared(settings: type, prefix: str = "") -> Iterator[CoreOption]:
    """The core options a settings dataclass declares, its groups' included (in order)."""
    for item in dataclasses.fields(settings):
        if _GROUP in item.metadata:
            yield from declared(item.metadata[_GROUP], f"{prefix}{item.name}.")
        elif _DECLARED in item.metadata:
            spec, unit, scope = item.metadata[_DECLARED]
            yield CoreOption(spec, prefix + item.name, unit, scope)


def build(settings: type, parsed: Mapping[str, Any], prefix: str = "") -> Any:
    """An instance of ``settings`` (LookupOptions or one of its groups) from the parsed values
    by key; an option not given keeps its declared default."""
    values: dict[str, Any] = {}
    for item in dataclasses.fields(settings):
        if _GROUP in item.metadata:
            values[item.name] = build(item.metadata[_GROUP], parsed, f"{prefix}{item.name}.")
        elif _DECLARED in item.metadata:
            key = item.metadata[_DECLARED][0].name
            if key in parsed:
                values[item.name] = parsed[key]
    return settings(**values)
