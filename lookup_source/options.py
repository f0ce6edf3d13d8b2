"""The options every surface accepts, parsed once into a typed, validated :class:`LookupOptions`.

Options are strings (Spark hands them over as a case-insensitive map of strings). The same names
work for ``spark.read.format("asynclookup").options(...)``, :func:`lookup_join` and
``CREATE TABLE ... USING asynclookup OPTIONS (...)``. Connector-specific options are prefixed by
the connector's name (``redis.key.pattern``) and declared by the connector class itself.

>>> opts = parse_options({"connector": "redis", "url": "redis://localhost:6379", "capacity": "50"})
>>> opts.capacity, opts.output_mode, opts.on_error
(50, 'ordered', 'fail')
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lookup_source.connector_api.client import ConnectorOptions, LookupClient
from lookup_source.connector_api.options import (
    OptionSpec,
    choice,
    parse_bool,
    parse_column_list,
    parse_keys,
    parse_non_negative_int,
    parse_positive_int,
    parse_rate,
    parse_required_text,
    parse_text,
)
from lookup_source.errors import OptionError
from lookup_source.redaction import redact_url
from lookup_source.registry import available_connectors, resolve_connector

# ---------------------------------------------------------------------------------------------
# The core options
# ---------------------------------------------------------------------------------------------


KEYS_PER_PARTITION = 10_000
"""Keys per read task of the data source when ``partitions`` is not set."""

DEFAULT_SCAN_PARTITIONS = 4
"""Read tasks of a whole-table scan when ``partitions`` is not set."""


def _ratio_above_one(value: str) -> float:
    try:
        ratio = float(value.strip())
    except ValueError:
        raise ValueError(f"expected a number above 1, such as 2.0, got {value!r}") from None
    if not 1 < ratio < float("inf"):
        raise ValueError(f"must be a number above 1, got {value!r}")
    return ratio


CORE_OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec(
        "connector",
        parse_required_text,
        None,
        "Which client performs the lookups: `redis`, `http`, `postgres`, the name of an "
        "installed `asynclookup.connectors` entry point, or `package.module:Class`. Required.",
        default_doc="(required)",
    ),
    OptionSpec("url", parse_text, None, "Address of the store, in the connector's URL syntax."),
    OptionSpec(
        "key.column",
        parse_column_list,
        None,
        "Key column(s) of the schema, comma-separated for a composite key.",
        default_doc="first column of the schema",
    ),
    OptionSpec(
        "capacity",
        parse_positive_int,
        100,
        "Most requests in flight at once per task; when full, the task stops pulling input.",
    ),
    OptionSpec(
        "capacity.adaptive",
        parse_bool,
        False,
        "Make `capacity` the ceiling of a per-task limit that adapts (AIMD): it starts at 10, "
        "grows while answers come back as fast as lately, and shrinks by a quarter on a "
        "timeout or an overload answer (HTTP 429/503, Postgres out of connections), by a tenth "
        "on a rising latency. The limit over time is in the metrics (`limit_history`).",
    ),
    OptionSpec(
        "capacity.latency-tolerance",
        _ratio_above_one,
        2.0,
        "capacity.adaptive: the limit shrinks when the recent latency exceeds this multiple of "
        "the lowest latency seen lately.",
    ),
    OptionSpec(
        "batch.size",
        parse_positive_int,
        None,
        "Most keys per request (MGET, `= ANY($1)`, batch POST).",
        default_doc="the connector's",
    ),
    OptionSpec("timeout.ms", parse_positive_int, 10_000, "Time limit of each attempt, in ms."),
    OptionSpec(
        "deadline.ms",
        parse_non_negative_int,
        0,
        "Time limit of a key's lookup across all its attempts and the backoff between them, "
        "from its first attempt, in ms; past it the lookup fails and on.error applies "
        "(Flink's async timeout). 0 = bounded by timeout.ms and retry.max-attempts only.",
    ),
    OptionSpec(
        "retry.max-attempts",
        parse_positive_int,
        3,
        "Attempts per request, the first included (1 = no retry). Only errors that can "
        "succeed on retry (timeouts, dropped connections, 429/503) are retried.",
    ),
    OptionSpec(
        "retry.backoff",
        choice("exponential", "fixed"),
        "exponential",
        "`exponential` (doubling, with jitter) or `fixed` delay between attempts.",
    ),
    OptionSpec(
        "retry.initial-delay.ms", parse_non_negative_int, 100, "Delay before the first retry."
    ),
    OptionSpec("retry.max-delay.ms", parse_non_negative_int, 5_000, "Longest delay between tries."),
    OptionSpec(
        "output.mode",
        choice("ordered", "unordered"),
        "ordered",
        "`ordered` emits rows in input order; `unordered` emits each input batch as soon as "
        "all its lookups are done (rows keep their order inside a batch).",
    ),
    OptionSpec(
        "on.error",
        choice("fail", "null", "column"),
        "fail",
        "After the last attempt: `fail` fails the task with an error naming the connector and "
        "how many keys failed; `null` fills the value columns with nulls; `column` also adds a "
        "string column `_lookup_error` with the reason (null where the lookup succeeded).",
    ),
    OptionSpec(
        "rate.limit",
        parse_rate,
        0.0,
        "Most requests per second per task, retries included (0 = no limit); for "
        "third-party APIs with a quota.",
        default_doc="0",
    ),
    OptionSpec(
        "rate.limit.total",
        parse_rate,
        0.0,
        "Most requests per second for the whole lookup (your API quota), retries included; "
        "split evenly over the most tasks of the lookup that can run at once (0 = no limit). "
        "See the README for what it cannot promise.",
        default_doc="0",
    ),
    OptionSpec(
        "retry.on-miss",
        parse_bool,
        False,
        "Retry a missing key with the same backoff before treating it as missing (dimension "
        "rows that arrive after the facts).",
    ),
    OptionSpec(
        "lookup.max-matches",
        parse_non_negative_int,
        10_000,
        "Most matches one key may have (a one-to-many lookup emits a row per match); a key "
        "with more is an error naming it, handled by on.error. 0 = no limit.",
    ),
    OptionSpec(
        "partition.by-key",
        parse_bool,
        False,
        "Hash-partition the input by the key columns before the lookup, so each worker sees "
        "(and caches) a disjoint share of the keys; costs a shuffle. For lookup_join and a "
        "table function registered with it; not the data source.",
    ),
    OptionSpec(
        "cache.mode",
        choice("partial", "full"),
        "partial",
        "`partial`: an LRU of looked-up keys per Python worker (on when cache.max-rows > 0); "
        "`full`: the whole table, loaded once per worker through the connector's scan.",
    ),
    OptionSpec(
        "cache.max-rows",
        parse_non_negative_int,
        0,
        "Keys kept by the partial cache per worker (0 = no cache).",
    ),
    OptionSpec(
        "cache.ttl.ms",
        parse_non_negative_int,
        0,
        "A cached key expires this long after it was written (0 = never).",
    ),
    OptionSpec(
        "cache.missing-keys",
        parse_bool,
        True,
        "Cache misses too, so a missing key is not asked again until it expires.",
    ),
    OptionSpec(
        "cache.reload.ms",
        parse_non_negative_int,
        0,
        "Full cache: reload the table in the background this often (0 = never).",
    ),
    OptionSpec(
        "keys",
        parse_keys,
        None,
        "Reader only: a JSON array of keys to fetch (arrays of values for composite keys).",
    ),
    OptionSpec(
        "filter.pushdown",
        parse_bool,
        True,
        "Reader only: with spark.sql.python.filterPushdown.enabled=true (PySpark 4.1+), turn "
        "`key IN (...)` / `key = ...` filters into the keys to fetch. Spark 4.1 to 4.3 cache a "
        "pushed-down read per DataFrame or view: see Spark caveats.",
    ),
    OptionSpec(
        "partitions",
        parse_positive_int,
        None,
        "Data source only: how many read tasks the keys (or a whole-table scan) are split over.",
        default_doc=f"one per {KEYS_PER_PARTITION:,} keys; a scan: {DEFAULT_SCAN_PARTITIONS}",
    ),
)

DEFAULTS: dict[str, Any] = {spec.name: spec.default for spec in CORE_OPTIONS if not spec.prefix}
"""Each core option's default, from its spec: the one place it is written."""

ERROR_COLUMN = "_lookup_error"

# Options Spark itself may add to a data source's options; they mean nothing to us.
_SPARK_ADDED_OPTIONS = frozenset({"path"})


@dataclass(frozen=True)
class RetrySettings:
    """How failed attempts are retried."""

    max_attempts: int = DEFAULTS["retry.max-attempts"]
    backoff: str = DEFAULTS["retry.backoff"]
    initial_delay_ms: int = DEFAULTS["retry.initial-delay.ms"]
    max_delay_ms: int = DEFAULTS["retry.max-delay.ms"]


@dataclass(frozen=True)
class CacheSettings:
    """The lookup cache: ``mode`` partial (LRU, on when ``max_rows`` > 0) or full."""

    mode: str = DEFAULTS["cache.mode"]
    max_rows: int = DEFAULTS["cache.max-rows"]
    ttl_ms: int = DEFAULTS["cache.ttl.ms"]
    missing_keys: bool = DEFAULTS["cache.missing-keys"]
    reload_ms: int = DEFAULTS["cache.reload.ms"]

    @property
    def enabled(self) -> bool:
        return self.mode == "full" or self.max_rows > 0


@dataclass(frozen=True)
class LookupOptions:
    """Every option, typed and validated. Build it with :func:`parse_options`.

    It pickles (it only holds plain values), so it travels from the driver to the executors.
    """

    connector: str
    url: str | None = None
    key_columns: tuple[str, ...] | None = None
    capacity: int = DEFAULTS["capacity"]
    capacity_adaptive: bool = DEFAULTS["capacity.adaptive"]
    capacity_latency_tolerance: float = DEFAULTS["capacity.latency-tolerance"]
    batch_size: int = LookupClient.default_batch_size  # the connector decides: parse_options
    timeout_ms: int = DEFAULTS["timeout.ms"]
    deadline_ms: int = DEFAULTS["deadline.ms"]
    retry: RetrySettings = field(default_factory=RetrySettings)
    output_mode: str = DEFAULTS["output.mode"]
    on_error: str = DEFAULTS["on.error"]
    rate_limit: float = DEFAULTS["rate.limit"]
    rate_limit_total: float = DEFAULTS["rate.limit.total"]
    retry_on_miss: bool = DEFAULTS["retry.on-miss"]
    max_matches: int = DEFAULTS["lookup.max-matches"]
    cache: CacheSettings = field(default_factory=CacheSettings)
    keys: tuple[Any, ...] | None = None
    partitions: int | None = None
    filter_pushdown: bool = DEFAULTS["filter.pushdown"]
    partition_by_key: bool = DEFAULTS["partition.by-key"]
    connector_options: Mapping[str, Any] = field(default_factory=dict)

    def split_rate(self, tasks: int) -> LookupOptions:
        """These options for one of ``tasks`` tasks that may run at once: ``rate.limit.total``
        becomes its even share of a per-task ``rate.limit`` (the smaller, if both are set)."""
        if not self.rate_limit_total:
            return self
        share = self.rate_limit_total / max(1, tasks)
        rate = min(self.rate_limit, share) if self.rate_limit else share
        return dataclasses.replace(self, rate_limit=rate, rate_limit_total=0.0)

    @property
    def ordered(self) -> bool:
        return self.output_mode == "ordered"

    @property
    def error_column(self) -> bool:
        return self.on_error == "column"

    @property
    def display_url(self) -> str | None:
        """The URL with credentials replaced by ``***``, for messages and logs."""
        return redact_url(self.url) if self.url else None

    def for_connector(self) -> ConnectorOptions:
        """What the connector is told before the lookup schema is known."""
        return ConnectorOptions(
            connector=self.connector,
            url=self.url,
            options=dict(self.connector_options),
            key_columns=self.key_columns,
            capacity=self.capacity,
            batch_size=self.batch_size,
            timeout_s=self.timeout_ms / 1000.0,
        )

    def connector_class(self) -> type[LookupClient]:
        return resolve_connector(self.connector)

    def __repr__(self) -> str:  # never show secrets in plans or logs
        return (
            f"LookupOptions(connector={self.connector!r}, url={self.display_url!r}, "
            f"key_columns={self.key_columns!r}, capacity={self.capacity}, "
            f"batch_size={self.batch_size}, timeout_ms={self.timeout_ms}, retry={self.retry!r}, "
            f"output_mode={self.output_mode!r}, on_error={self.on_error!r})"
        )


def _find_spec(name: str, specs: tuple[OptionSpec, ...]) -> OptionSpec | None:
    for spec in specs:
        if spec.name == name or (spec.prefix and name.startswith(spec.name)):
            return spec
    return None


def _suggest(name: str, names: list[str]) -> str | None:
    near = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    return near[0] if near else None


def parse_options(raw: Mapping[str, str]) -> LookupOptions:
    """Parse and validate string options into :class:`LookupOptions`.

    Raises :class:`~lookup_source.errors.OptionError` naming the first unknown, missing or
    malformed option, with the nearest valid name when one is close.
    """
    values: dict[str, str] = {}
    # A catalog table (CREATE TABLE ... USING asynclookup OPTIONS (...)) hands its options over
    # as "option.<name>", beside table properties (provider, owner...) that are not ours; its
    # connector is always among them. (Any other "option.x" is an unknown option, named.)
    from_catalog = any(str(key).strip().lower() == "option.connector" for key in raw)
    for key, value in raw.items():
        name = str(key).strip().lower()
        if from_catalog:
            if not name.startswith("option."):
                continue
            name = name[len("option.") :]
        if name in _SPARK_ADDED_OPTIONS:
            continue
        if value is None:
            raise OptionError(name, "has no value")
        values[name] = value if isinstance(value, str) else _stringify(value)

    if "connector" not in values:
        raise OptionError("connector", "is required: redis, http, postgres or package.module:Class")
    connector_name = parse_required_text(values["connector"]).strip()
    client_class = resolve_connector(connector_name)
    connector_specs = tuple(client_class.option_specs)
    all_specs = CORE_OPTIONS + connector_specs

    parsed: dict[str, Any] = {}
    connector_values: dict[str, Any] = {}
    for name, value in values.items():
        spec = _find_spec(name, all_specs)
        if spec is None:
            raise _unknown_option(name, connector_name, all_specs)
        try:
            result = spec.parse(value)
        except ValueError as exc:
            raise OptionError(name, str(exc)) from None
        if spec in connector_specs:
            connector_values[name] = result
        else:
            parsed[name] = result

    for spec in connector_specs:
        if not spec.prefix and spec.name not in connector_values:
            connector_values[spec.name] = spec.default

    given = {**DEFAULTS, **parsed}  # every core option, its default where it was not set
    retry = RetrySettings(
        max_attempts=given["retry.max-attempts"],
        backoff=given["retry.backoff"],
        initial_delay_ms=given["retry.initial-delay.ms"],
        max_delay_ms=given["retry.max-delay.ms"],
    )
    if retry.max_delay_ms < retry.initial_delay_ms:
        raise OptionError(
            "retry.max-delay.ms",
            f"({retry.max_delay_ms}) is smaller than retry.initial-delay.ms "
            f"({retry.initial_delay_ms})",
        )
    options = LookupOptions(
        connector=connector_name,
        url=given["url"],
        key_columns=given["key.column"],
        capacity=given["capacity"],
        batch_size=given["batch.size"] or client_class.batch_size_default(connector_values),
        timeout_ms=given["timeout.ms"],
        deadline_ms=given["deadline.ms"],
        capacity_adaptive=given["capacity.adaptive"],
        capacity_latency_tolerance=given["capacity.latency-tolerance"],
        retry=retry,
        output_mode=given["output.mode"],
        on_error=given["on.error"],
        rate_limit=given["rate.limit"],
        rate_limit_total=given["rate.limit.total"],
        retry_on_miss=given["retry.on-miss"],
        max_matches=given["lookup.max-matches"],
        cache=CacheSettings(
            mode=given["cache.mode"],
            max_rows=given["cache.max-rows"],
            ttl_ms=given["cache.ttl.ms"],
            missing_keys=given["cache.missing-keys"],
            reload_ms=given["cache.reload.ms"],
        ),
        keys=given["keys"],
        partitions=given["partitions"],
        filter_pushdown=given["filter.pushdown"],
        partition_by_key=given["partition.by-key"],
        connector_options=connector_values,
    )
    client_class.validate_options(options.for_connector())
    return options


def _unknown_option(name: str, connector: str, specs: tuple[OptionSpec, ...]) -> OptionError:
    prefix = name.split(".", 1)[0]
    if prefix in available_connectors() and prefix != connector.lower():
        return OptionError(
            name, f"belongs to the {prefix} connector, but connector is '{connector}'"
        )
    known = [spec.name for spec in specs if not spec.prefix]
    return OptionError(
        name,
        f"is not an option of asynclookup with connector '{connector}'",
        suggestion=_suggest(name, known),
    )


def _stringify(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return json.dumps(list(value))
    return str(value)


def options_table() -> list[tuple[str, str, str]]:
    """(name, default, description) of every core option, for documentation."""
    return [(spec.name, spec.describe_default(), spec.doc) for spec in CORE_OPTIONS]
