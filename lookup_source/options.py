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
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from lookup_source.connector_api.budget import BudgetCoordinator
from lookup_source.connector_api.client import ConnectorConfig, LookupClient
from lookup_source.connector_api.options import (
    OptionSpec,
    Parser,
    choice,
    int_between,
    parse_bool,
    parse_column_list,
    parse_keys,
    parse_non_negative_int,
    parse_positive_int,
    parse_rate,
    parse_required_text,
    parse_text,
)
from lookup_source.connector_api.shared_cache import SharedCacheStore
from lookup_source.errors import OptionError
from lookup_source.redaction import redact_url
from lookup_source.registry import (
    available_connectors,
    resolve_budget_coordinator,
    resolve_connector,
    resolve_shared_cache,
)

# ---------------------------------------------------------------------------------------------
# How a core option is declared: once, on the field it fills
# ---------------------------------------------------------------------------------------------


KEYS_PER_PARTITION = 10_000
"""Keys per read task of the data source when ``partitions`` is not set."""

DEFAULT_SCAN_PARTITIONS = 4
"""Read tasks of a whole-table scan when ``partitions`` is not set."""

ERROR_COLUMN = "_lookup_error"

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


PROGRESS_FORMS = ("true", "fields", "false")
"""``metrics.progress``: one text field (the default), named numbers, or no entry."""


def _parse_progress(value: str) -> str:
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


def _ratio_above_one(value: str) -> float:
    try:
        ratio = float(value.strip())
    except ValueError:
        raise ValueError(f"expected a number above 1, such as 2.0, got {value!r}") from None
    if not 1 < ratio <= 1000:
        raise ValueError(f"must be a number above 1 and at most 1000, got {value!r}")
    return ratio


# ---------------------------------------------------------------------------------------------
# The core options
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetrySettings:
    """How failed attempts (and, with ``retry.on-miss``, missing keys) are tried again."""

    max_attempts: int = option(
        "retry.max-attempts",
        int_between(1, 1_000_000),
        3,
        "Attempts per request, the first included (1 = no retry). Only errors that can "
        "succeed on retry (timeouts, dropped connections, 429/503) are retried.",
    )
    backoff: str = option(
        "retry.backoff",
        choice("exponential", "fixed"),
        "exponential",
        "`exponential` (doubling, with jitter) or `fixed` delay between attempts.",
    )
    initial_delay_s: float = duration_ms(
        "retry.initial-delay.ms", 100, "Delay before the first retry."
    )
    max_delay_s: float = duration_ms("retry.max-delay.ms", 5_000, "Longest delay between tries.")
    on_miss: bool = option(
        "retry.on-miss",
        parse_bool,
        False,
        "Retry a missing key with the same backoff before treating it as missing (dimension "
        "rows that arrive after the facts).",
    )


HEDGE_FALLBACK_MS = 200
"""``hedge.after.ms=pNN``: the delay before enough answers are known to take the quantile of,
unless given beside it (``p95,50``)."""


@dataclass(frozen=True)
class HedgeAfter:
    """When a request is hedged: after a fixed delay (``seconds``), or once it has taken longer
    than the ``quantile`` of the recent answers' latencies — after ``seconds`` until enough
    answers are known."""

    seconds: float = 0.0
    quantile: float = 0.0

    def __str__(self) -> str:
        if self.quantile:
            return f"p{self.quantile * 100:g},{self.seconds * 1000:g}"
        return f"{self.seconds * 1000:g}"


def _hedge_ms(text: str, value: str) -> float:
    try:
        ms = float(text)
    except ValueError:
        raise ValueError(
            f"expected milliseconds (such as 50), a latency quantile (such as p95, or p95,50 "
            f"with the delay before enough answers are known), or 0 for no hedging, got "
            f"{value!r}"
        ) from None
    if not 0 < ms <= MAX_DURATION_MS:
        raise ValueError(
            f"must be a positive number of milliseconds of at most {MAX_DURATION_MS:,}, "
            f"got {value!r}"
        )
    return ms


def parse_hedge_after(value: str) -> HedgeAfter | None:
    """``hedge.after.ms``: milliseconds (``50``), a quantile of recent latencies (``p95``,
    ``p99.9``; with the delay used until 20 answers are known: ``p95,50``, else
    :data:`HEDGE_FALLBACK_MS`), or 0 / ``off`` (no hedging)."""
    text = value.strip().lower()
    if text in ("", "0", "off", "none", "false"):
        return None
    if text.startswith("p"):
        quantile, _, fallback = text[1:].partition(",")
        try:
            percent = float(quantile)
        except ValueError:
            percent = -1.0
        if not 50 <= percent < 100:
            raise ValueError(
                f"expected a latency quantile from p50 to p99.99 (such as p95), got {value!r}"
            )
        ms = _hedge_ms(fallback.strip(), value) if fallback.strip() else HEDGE_FALLBACK_MS
        return HedgeAfter(seconds=ms / 1000.0, quantile=round(percent / 100.0, 6))
    return HedgeAfter(seconds=_hedge_ms(text, value) / 1000.0)


def _share(value: str) -> float:
    try:
        share = float(value.strip().rstrip("%")) / (100.0 if value.strip().endswith("%") else 1.0)
    except ValueError:
        raise ValueError(f"expected a share such as 0.05 or 5%, got {value!r}") from None
    if not 0 < share <= 1:
        raise ValueError(f"must be above 0 and at most 1 (or 100%), got {value!r}")
    return share


@dataclass(frozen=True)
class HedgeSettings:
    """Hedged requests: past a delay, the same read is sent again and the first answer wins."""

    after: HedgeAfter | None = option(
        "hedge.after.ms",
        parse_hedge_after,
        None,
        "Hedge a request still unanswered after this many ms, or after a latency quantile of "
        "the worker's recent answers (`p95`, `p99`; until 20 answers are known, after "
        f"{HEDGE_FALLBACK_MS} ms, or the delay given beside it: `p95,50`): the same keys are "
        "asked again, the first answer wins, the other request is cancelled. At most one "
        "hedge per request; a hedge takes a free `capacity` slot (none free: no hedge), waits "
        "for `rate.limit` and ends within the attempt's `timeout.ms`. Off by default.",
        default_doc="(off)",
    )
    budget: float = option(
        "hedge.budget",
        _share,
        0.05,
        "Most hedges as a share of requests (each request earns this share of a hedge, a "
        "hedge spends a whole one; the budget saves up what 1,000 requests earn, at least 10, "
        "and starts full, so a job's first slow requests are hedged too): the extra load "
        "hedging may put on the store.",
    )


@dataclass(frozen=True)
class SharedCacheSettings:
    """A cache tier shared by every worker and job (a Redis), after the per-worker cache."""

    def store_class(self) -> type[SharedCacheStore]:
        """The class of the store ``url`` names (by its scheme)."""
        assert self.url is not None
        return resolve_shared_cache(self.url)

    def __repr__(self) -> str:  # the URL may hold a password
        url = redact_url(self.url) if self.url else None
        return (
            f"SharedCacheSettings(url={url!r}, ttl_s={self.ttl_s}, "
            f"missing_keys={self.missing_keys}, timeout_s={self.timeout_s}, "
            f"namespace={self.namespace!r}, secret_env={self.secret_env!r}, "
            f"max_value_bytes={self.max_value_bytes})"
        )

    url: str | None = option(
        "cache.shared.url",
        parse_text,
        None,
        "A Redis (`redis://`, `rediss://`) that every worker and every job reads answers from "
        "before asking the store, and writes the store's answers to (needs the `redis` "
        "connector installed). Keys are namespaced by the lookup's identity: everything that "
        "decides the answers (connector, URL, every option and header, the values of `*.env` "
        "options and the content of certificate files on the executor, key and value schema, "
        "a `fetch=` function's code and state), secrets through a keyed one-way digest; each "
        "value carries a tag keyed by that identity. See docs/guarantees.md, Trust.",
        default_doc="(none)",
    )
    ttl_s: float = duration_ms(
        "cache.shared.ttl.ms", 3_600_000, "How long the shared tier keeps an answer.", positive=True
    )
    missing_keys: bool = option(
        "cache.shared.missing-keys",
        parse_bool,
        True,
        "Keep misses in the shared tier too (for cache.shared.ttl.ms).",
    )
    timeout_s: float = duration_ms(
        "cache.shared.timeout.ms",
        100,
        "Time limit of a read of the shared tier (a write, which no answer waits for: ten "
        "times this); past it, or on any error, the keys go straight to the store and the "
        "worker leaves the tier alone for 5 s (counted in `shared_errors`).",
        positive=True,
    )
    namespace: str = option(
        "cache.shared.namespace",
        parse_text,
        "",
        "Added to the lookup's identity, which already holds everything that decides the "
        "answers (secrets included, by a keyed digest): a namespace can only narrow what is "
        "shared (lookups with different namespaces never share), never widen it.",
        default_doc="(empty)",
    )
    secret_env: str | None = option(
        "cache.shared.secret.env",
        parse_text,
        None,
        "Environment variable, on the executors, holding a secret that joins the lookup's "
        "identity: only lookups that know it share answers, and a value written by anyone "
        "without it is not believed (its tag does not match). Set it when the lookup itself "
        "holds no secret and others can write to the shared tier's Redis.",
        default_doc="(none)",
    )
    max_value_bytes: int = option(
        "cache.shared.max-value-bytes",
        int_between(64, 1 << 30),
        4 << 20,
        "Largest answer (one key's rows, compressed and uncompressed) written to or believed "
        "from the shared tier; a larger one is not written, and one claiming more is a miss.",
        unit="bytes",
    )


@dataclass(frozen=True)
class CacheSettings:
    """The lookup cache: ``mode`` partial (LRU, on when ``max_rows`` > 0) or full."""

    mode: str = option(
        "cache.mode",
        choice("partial", "full"),
        "partial",
        "`partial`: an LRU of looked-up keys per Python worker (on when cache.max-rows > 0); "
        "`full`: the whole table, loaded once per worker through the connector's scan.",
    )
    max_rows: int = option(
        "cache.max-rows",
        parse_non_negative_int,
        0,
        "Keys kept by the partial cache per worker (0 = no cache).",
    )
    ttl_s: float = duration_ms(
        "cache.ttl.ms", 0, "A cached key expires this long after it was written (0 = never)."
    )
    missing_keys: bool = option(
        "cache.missing-keys",
        parse_bool,
        True,
        "Cache misses too, so a missing key is not asked again until it expires.",
    )
    reload_s: float = duration_ms(
        "cache.reload.ms",
        0,
        "Full cache: reload the table in the background this often (0 = never).",
    )
    worker_max_mb: int = option(
        "cache.worker.max-mb",
        int_between(1, 1024 * 1024),
        1024,
        "Memory (estimated, MiB) the caches of all lookups in one Python worker may hold "
        "together; beyond it, the least recently used lookups' caches are dropped (a partial "
        "cache in use alone above it keeps its most recent keys). While lookups with "
        "different values run in one worker, the smallest applies; else the latest task's.",
    )
    shared: SharedCacheSettings = group(SharedCacheSettings)


@dataclass(frozen=True)
class BudgetSettings:
    """A budget shared by every task of every executor and job that names it: requests in
    flight, per second and cost per minute, kept by a coordinator (``budget.url``) or, without
    one, split statically over the lookup's tasks."""

    def coordinator_class(self) -> type[BudgetCoordinator]:
        """The class of the coordinator ``url`` names (by its scheme)."""
        assert self.url is not None
        return resolve_budget_coordinator(self.url)

    @property
    def active(self) -> bool:
        """Whether any limit is set."""
        return bool(self.max_in_flight or self.rate or self.cost_per_minute)

    def __repr__(self) -> str:  # the URL may hold a password
        url = redact_url(self.url) if self.url else None
        return (
            f"BudgetSettings(url={url!r}, name={self.name!r}, max_in_flight={self.max_in_flight}, "
            f"rate={self.rate}, cost_per_minute={self.cost_per_minute}, "
            f"cost_column={self.cost_column!r}, lease_s={self.lease_s}, "
            f"timeout_s={self.timeout_s}, tasks={self.tasks})"
        )

    url: str | None = option(
        "budget.url",
        parse_text,
        None,
        "The coordinator that keeps the budget across every task, executor and job: a Redis "
        "(`redis://`, `rediss://`; needs the `redis` connector installed), which grants "
        "leases and request slots in small batches by atomic scripts on its own clock. "
        "Without it (or while it does not answer) each task keeps an even share of the "
        "budget (split over budget.tasks), as the metrics say.",
        default_doc="(none: a static split)",
    )
    name: str = option(
        "budget.name",
        parse_text,
        "",
        "The budget's name: lookups, jobs and streams that name the same budget (with the same "
        "budget.url) share it. By default the lookup's own: a digest of its identity (connector, "
        "URL, options, secrets), shared by every job that runs the same lookup.",
        default_doc="(the lookup's own)",
    )
    max_in_flight: int = option(
        "budget.max-in-flight",
        parse_non_negative_int,
        0,
        "Most requests in flight at once across everything that shares the budget, hedges and "
        "retries included (0 = no limit). A task's `capacity` still bounds its own.",
    )
    rate: float = option(
        "budget.rate",
        parse_rate,
        0.0,
        "Most requests per second across everything that shares the budget, retries and "
        "hedges included (0 = no limit); paced evenly, a slot used within 20 ms of its time "
        "or dropped, so no one-second window holds 2% more than this and one request (set it "
        "2% under a quota counted strictly).",
        unit="requests/s",
        default_doc="0",
    )
    cost_per_minute: float = option(
        "budget.cost-per-minute",
        parse_rate,
        0.0,
        "Most cost units per minute across everything that shares the budget (0 = no limit): "
        "a request costs the sum of its keys' costs (budget.cost.column), or one per key; "
        "paced evenly, so no minute holds more than this and one request's cost.",
        unit="units/min",
        default_doc="0",
    )
    cost_column: str | None = option(
        "budget.cost.column",
        parse_text,
        None,
        "A numeric input column with the cost of each row's key (estimated tokens, credits); a "
        "key's cost is the largest of its rows'. Needs budget.cost-per-minute; a null, "
        "negative or NaN cost fails the task naming the column.",
        scope=JOINS,
        default_doc="(none: one per key)",
    )
    lease_s: float = duration_ms(
        "budget.lease.ms",
        10_000,
        "How long a task's in-flight leases outlive its last word with the coordinator (it "
        "renews them every third of this, at most every 0.5 s): a killed executor's leases "
        "return after this. At least 1000, and three times budget.timeout.ms.",
        positive=True,
        max_ms=3_600_000,
    )
    timeout_s: float = duration_ms(
        "budget.timeout.ms",
        500,
        "Time limit of a call to the coordinator; past it, or on any error, the task keeps "
        "its static share for 5 s, logs it once and counts it (`budget_fallbacks`), then asks "
        "the coordinator again.",
        positive=True,
        max_ms=60_000,
    )
    tasks: int = option(
        BUDGET_TASKS,
        int_between(1, 1_000_000),
        0,
        "How many tasks the budget is split over without a coordinator (each keeps an even "
        "share, at least one request in flight): count every task of every job sharing the "
        "budget. By default the most tasks of the lookup that can run at once, known on a "
        "classic SparkSession; over Spark Connect, set it when a budget is set.",
        default_doc="(the lookup's concurrent tasks)",
    )


@dataclass(frozen=True)
class LookupOptions:
    """Every option, typed and validated. Build it with :func:`parse_options`.

    Each core option is declared once, on the field it fills (:func:`option`): its key, type,
    default, unit, the surfaces that take it and its doc; :data:`CORE_OPTIONS` and the
    README's tables are read from these declarations. It pickles (it only holds plain values),
    so it travels from the driver to the executors.
    """

    connector: str = option(
        "connector",
        parse_required_text,
        None,
        "Which client performs the lookups: `redis`, `http`, `postgres`, the name of an "
        "installed `asynclookup.connectors` entry point, or `package.module:Class`. Required "
        "(`function` when you pass your own async function as fetch=).",
        default_doc="(required)",
    )
    url: str | None = option(
        "url", parse_text, None, "Address of the store, in the connector's URL syntax."
    )
    key_columns: tuple[str, ...] | None = option(
        KEY_COLUMN,
        parse_column_list,
        None,
        "Key column(s) of the schema, comma-separated for a composite key. For lookup_join, "
        "unset, with `on` naming several columns that the schema has: those columns, in "
        "`on`'s order.",
        default_doc="first column of the schema",
    )
    capacity: int = option(
        "capacity",
        int_between(1, 100_000),
        100,
        "Most requests in flight at once per task; when full, the task stops pulling input.",
    )
    capacity_adaptive: bool = option(
        "capacity.adaptive",
        parse_bool,
        False,
        "Make `capacity` the ceiling of a per-task limit that adapts (AIMD): it starts at 10, "
        "grows while answers come back as fast as lately, and shrinks by a quarter on a "
        "timeout or an overload answer (HTTP 429/503, Postgres out of connections), by a tenth "
        "on a rising latency. The limit over time is in the metrics (`limit_history`).",
    )
    capacity_latency_tolerance: float = option(
        "capacity.latency-tolerance",
        _ratio_above_one,
        2.0,
        "capacity.adaptive: the limit shrinks when the recent latency exceeds this multiple of "
        "the lowest latency seen lately.",
    )
    batch_size: int = option(
        "batch.size",
        int_between(1, 1_000_000),
        LookupClient.default_batch_size,  # the connector decides: parse_options
        "Most keys per request (MGET, `= ANY($1)`, batch POST, fetch_many).",
        default_doc="the connector's",
    )
    timeout_s: float = duration_ms(
        "timeout.ms", 10_000, "Time limit of each attempt, in ms.", positive=True
    )
    deadline_s: float = duration_ms(
        "deadline.ms",
        0,
        "Time limit of a key's lookup across all its attempts and the backoff between them, "
        "from its first attempt, in ms; past it the lookup fails and on.error applies "
        "(Flink's async timeout). 0 = bounded by timeout.ms and retry.max-attempts only.",
    )
    retry: RetrySettings = group(RetrySettings)
    connection_max_idle_s: float = duration_ms(
        "connection.max-idle.ms",
        120_000,
        "A Python worker that Spark reuses keeps one opened client (its pool, sessions, TLS "
        "context) per lookup configuration for task after task and micro-batch after "
        "micro-batch; one unused for longer than this is closed, and replaced by a new one "
        "when needed (connections a proxy or firewall may have dropped unseen are never "
        "trusted). 0 = a client per task, closed when the task ends.",
    )
    connection_max_age_s: float = duration_ms(
        "connection.max-age.ms",
        3_600_000,
        "A kept client older than this is replaced by a new one when the next task asks for "
        "it (credentials that expire, DNS that moves). A client is also replaced as soon as "
        "what it was made from changes on the executor: a `*.env` variable's value, a "
        "certificate or key file's content. 0 = no age limit.",
    )
    loop: str = option(
        "loop",
        choice("auto", "asyncio", "uvloop"),
        "auto",
        "The event loop a task's requests run on: `asyncio`, the standard library's; `uvloop` "
        "(libuv), which needs the `uvloop` extra on the executors; `auto`, uvloop for a "
        "connector measured faster on it (http, redis, postgres: 5-30% less CPU per key) where "
        "it is installed, else asyncio.",
    )
    gc_threshold: int = option(
        "gc.threshold",
        int_between(0, 10_000_000),
        10_000,
        "While a task's lookups run, Python's garbage collector looks for cycles after this "
        "many new objects (the threshold of its youngest generation; Python's own is 700, "
        "which with hundreds of requests in flight costs a per-key lookup about a fifth of "
        "its CPU). Never lowers a threshold already higher; restored when the worker's last "
        "task ends. 0 = leave the collector as it is.",
        unit="objects",
    )
    output_mode: str = option(
        "output.mode",
        choice("ordered", "unordered", "key-ordered"),
        "ordered",
        "`ordered` emits rows in input order; `unordered` emits each input batch as soon as "
        "all its lookups are done (rows keep their order inside a batch); `key-ordered` emits "
        "each row as soon as its key is answered, the rows of one key in input order, never "
        "held back by other keys (Flink's key-ordered async lookup, FLIP-519).",
    )
    on_error: str = option(
        "on.error",
        choice("fail", "null", "column"),
        "fail",
        "After the last attempt: `fail` fails the task with an error naming the connector and "
        "how many keys failed; `null` fills the value columns with nulls; `column` also adds a "
        "string column `_lookup_error` with the reason (null where the lookup succeeded).",
    )
    rate_limit: float = option(
        RATE_LIMIT,
        parse_rate,
        0.0,
        "Most requests per second per task, retries included (0 = no limit); for "
        "third-party APIs with a quota.",
        unit="requests/s",
        default_doc="0",
    )
    rate_limit_total: float = option(
        RATE_LIMIT_TOTAL,
        parse_rate,
        0.0,
        "Most requests per second for the whole lookup (your API quota), retries included; "
        "split evenly over the most tasks of the lookup that can run at once (0 = no limit). "
        "See the README for what it cannot promise.",
        unit="requests/s",
        default_doc="0",
    )
    max_matches: int = option(
        "lookup.max-matches",
        parse_non_negative_int,
        10_000,
        "Most matches one key may have (a one-to-many lookup emits a row per match); a key "
        "with more is an error naming it, handled by on.error. 0 = no limit.",
    )
    partition_by_key: bool = option(
        PARTITION_BY_KEY,
        parse_bool,
        False,
        "Hash-partition the input by the key columns before the lookup, so each worker sees "
        "(and caches) a disjoint share of the keys; costs a shuffle.",
        scope=JOINS,
    )
    cache: CacheSettings = group(CacheSettings)
    hedge: HedgeSettings = group(HedgeSettings)
    budget: BudgetSettings = group(BudgetSettings)
    metrics_progress: str = option(
        "metrics.progress",
        _parse_progress,
        "true",
        "How a streaming lookup_join reports each micro-batch's metrics in its progress "
        "(observedMetrics['asynclookup_<name>']): `true`, one text field holding each task's "
        "metrics, which progress_metrics decodes into numbers (one aggregate: the cheapest "
        "entry); `fields`, the numbers themselves, one named field each (an aggregate each, "
        "which Spark plans anew every micro-batch); `false`, no entry (and none of its cost). "
        "See docs/monitoring.md.",
        scope=LOOKUP_JOIN,
    )
    metrics_opentelemetry: bool = option(
        "metrics.opentelemetry",
        parse_bool,
        False,
        "Report each task's metrics (counters and a request-duration histogram, by lookup "
        "name and connector) through the OpenTelemetry API from the executors, exported as "
        "OpenTelemetry's own OTEL_* environment variables say; needs the `opentelemetry` extra "
        "on the executors. See docs/monitoring.md.",
    )
    strategy: str = option(
        STRATEGY,
        choice("lookup", "broadcast", "scan", "auto"),
        "lookup",
        "`lookup`: ask the store for the keys of the input; `broadcast`: scan the whole table "
        "once and broadcast-join it; `scan`: scan the table in parallel and let Spark join it "
        "(a shuffle, then a sort-merge or hash join) — both for stores that scan and batch "
        "DataFrames; `auto`: the cheapest of the three by estimate (the table's rows, the "
        "input's from Spark's plan statistics, the connector's measured cost per key and per "
        "row; a broadcast only up to strategy.broadcast.max-rows), lookups for a stream. The "
        "choice, its reason and the estimates are in the metrics and the log. For a SQL JOIN "
        "against a lookup table (the SQL extension): `lookup` rewrites it into lookups, "
        "`scan` and `broadcast` leave Spark's scan and join, `auto` rewrites it when the "
        "input is at most strategy.lookup.max-input-rows.",
        scope=PLANS,
    )
    broadcast_max_rows: int = option(
        STRATEGY_BROADCAST_MAX_ROWS,
        parse_positive_int,
        1_000_000,
        "strategy=auto: the most rows a table may have to be broadcast (each executor holds it "
        "in memory); a larger one is scanned and joined, or looked up.",
        scope=LOOKUP_JOIN,
    )
    scan_reader: str = option(
        SCAN_READER,
        choice("auto", "jdbc", "source"),
        "auto",
        "strategy=scan and broadcast: what reads the table. `jdbc`: Spark's own JDBC reader "
        "(Postgres: the connector's URL, password and TLS options mapped to pgjdbc's, the "
        "read cut into ranges of an integer key; needs org.postgresql.Driver on Spark's "
        "classpath, and the password on the driver); `source`: the asynclookup data source; "
        "`auto`: the JDBC reader where the store has one and its driver is on the classpath, "
        "else the data source (the reason says which, and why).",
        scope=LOOKUP_JOIN,
    )
    lookup_max_input_rows: int | None = option(
        STRATEGY_LOOKUP_MAX_INPUT_ROWS,
        int_between(0, 10**15),
        None,
        "strategy=auto: the largest input (rows, by Spark's estimate) that runs as lookups; a "
        "larger one scans the table and joins it. When not set, lookup_join takes the cheapest "
        "plan by estimate, and register_lookup_table sets it for its table's SQL JOINs where "
        "the estimated costs of lookups and of a scan and a join cross (asking the store for "
        "the table's size once).",
        scope=PLANS,
        default_doc="from the estimated costs",
    )
    sql_join_function: str | None = option(
        SQL_JOIN_FUNCTION,
        parse_text,
        None,
        "Set by register_lookup_table on its view: the table function that a SQL JOIN "
        "against the view is rewritten into (the SQL extension). Not to be set by hand.",
        scope=READER,
    )
    keys: tuple[Any, ...] | None = option(
        "keys",
        parse_keys,
        None,
        "A JSON array of keys to fetch (arrays of values for composite keys).",
        scope=READER,
    )
    filter_pushdown: bool = option(
        FILTER_PUSHDOWN,
        parse_bool,
        True,
        "With spark.sql.python.filterPushdown.enabled=true (PySpark 4.1+), turn "
        "`key IN (...)` / `key = ...` filters into the keys to fetch. Spark 4.1 to 4.3 cache a "
        "pushed-down read per DataFrame or view: see Spark caveats.",
        scope=READER,
    )
    partitions: int | None = option(
        "partitions",
        int_between(1, 1_000_000),
        None,
        "How many read tasks the keys (or a whole-table scan) are split over.",
        scope=READER,
        default_doc=f"one per {KEYS_PER_PARTITION:,} keys; a scan: {DEFAULT_SCAN_PARTITIONS}",
    )
    connector_options: Mapping[str, Any] = field(default_factory=dict)
    """The connector's own options (``<connector>.*``), parsed by its option specs."""
    given: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    """The options as they were given, by lower-case name, as text: what
    :meth:`to_strings` hands on (kept out of ``repr``: a URL may hold a password)."""

    def to_strings(self) -> dict[str, str]:
        """These options as the strings that parse into them (``parse_options`` of them gives
        them back): what the data source, a SQL view and Spark's own APIs take. The one way
        back to strings."""
        if not self.given:
            raise OptionError(
                "options",
                "these LookupOptions were not made by parse_options, so there is no text to "
                "give the data source: build them with parse_options(...)",
            )
        return dict(self.given)

    def with_key_columns(self, columns: tuple[str, ...]) -> LookupOptions:
        """These options with ``key.column`` set to ``columns``."""
        given = {**self.given, KEY_COLUMN: ",".join(columns)}
        return dataclasses.replace(self, key_columns=columns, given=given)

    @property
    def split_by(self) -> str | None:
        """The option that needs to know how many tasks run at once (:meth:`split_over`):
        ``rate.limit.total``, or ``budget.tasks`` for a budget whose static share is not
        given; None when neither does."""
        if self.rate_limit_total:
            return RATE_LIMIT_TOTAL
        if self.budget.active and not self.budget.tasks:
            return BUDGET_TASKS
        return None

    def split_over(self, tasks: int) -> LookupOptions:
        """These options for one of ``tasks`` tasks that may run at once: ``rate.limit.total``
        becomes its even share of a per-task ``rate.limit`` (the smaller, if both are set), and
        a budget without ``budget.tasks`` is split over ``tasks`` when it has no coordinator."""
        options = self
        tasks = max(1, tasks)
        given = dict(self.given)
        if self.rate_limit_total:
            share = self.rate_limit_total / tasks
            rate = min(self.rate_limit, share) if self.rate_limit else share
            given.pop(RATE_LIMIT_TOTAL, None)
            given[RATE_LIMIT] = repr(rate)
            options = dataclasses.replace(options, rate_limit=rate, rate_limit_total=0.0)
        if self.budget.active and not self.budget.tasks:
            given[BUDGET_TASKS] = str(tasks)
            budget = dataclasses.replace(self.budget, tasks=tasks)
            options = dataclasses.replace(options, budget=budget)
        return dataclasses.replace(options, given=given) if options is not self else self

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

    def for_connector(self) -> ConnectorConfig:
        """What the connector is told before the lookup schema is known (no value columns;
        the key columns if ``key.column`` names them)."""
        return ConnectorConfig(
            connector=self.connector,
            url=self.url,
            options=dict(self.connector_options),
            key_columns=self.key_columns or (),
            capacity=self.capacity,
            batch_size=self.batch_size,
            timeout_s=self.timeout_s,
        )

    def connector_class(self) -> type[LookupClient]:
        return resolve_connector(self.connector)

    def __repr__(self) -> str:  # never show secrets in plans or logs
        return (
            f"LookupOptions(connector={self.connector!r}, url={self.display_url!r}, "
            f"key_columns={self.key_columns!r}, capacity={self.capacity}, "
            f"batch_size={self.batch_size}, timeout.ms={round(self.timeout_s * 1000)}, "
            f"retry={self.retry!r}, output_mode={self.output_mode!r}, "
            f"on_error={self.on_error!r})"
        )


def _declared(settings: type, prefix: str = "") -> Iterator[CoreOption]:
    for item in dataclasses.fields(settings):
        if _GROUP in item.metadata:
            yield from _declared(item.metadata[_GROUP], f"{prefix}{item.name}.")
        elif _DECLARED in item.metadata:
            spec, unit, scope = item.metadata[_DECLARED]
            yield CoreOption(spec, prefix + item.name, unit, scope)


DECLARED: tuple[CoreOption, ...] = tuple(_declared(LookupOptions))
"""Every core option, in the order of its declaration."""

CORE_OPTIONS: tuple[OptionSpec, ...] = tuple(declared.spec for declared in DECLARED)
"""The specs of the core options (how each is named, parsed, defaulted and documented)."""

# Options Spark itself may add to a data source's options; they mean nothing to us.
_SPARK_ADDED_OPTIONS = frozenset({"path"})


def _find_spec(name: str, specs: tuple[OptionSpec, ...]) -> OptionSpec | None:
    for spec in specs:
        if spec.name == name or (spec.prefix and name.startswith(spec.name)):
            return spec
    return None


def _suggest(name: str, names: list[str]) -> str | None:
    near = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    return near[0] if near else None


def _build(settings: type, parsed: Mapping[str, Any], prefix: str = "") -> Any:
    """An instance of ``settings`` (LookupOptions or one of its groups) from the parsed values
    by key; an option not given keeps its declared default."""
    values: dict[str, Any] = {}
    for item in dataclasses.fields(settings):
        if _GROUP in item.metadata:
            values[item.name] = _build(item.metadata[_GROUP], parsed, f"{prefix}{item.name}.")
        elif _DECLARED in item.metadata:
            key = item.metadata[_DECLARED][0].name
            if key in parsed:
                values[item.name] = parsed[key]
    return settings(**values)


def parse_options(raw: Mapping[str, str]) -> LookupOptions:
    """Parse and validate string options into :class:`LookupOptions`.

    Raises :class:`~lookup_source.errors.OptionError` naming the first unknown, missing or
    malformed option, with the nearest valid name when one is close.
    """
    values = _option_texts(raw)
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

    parsed["connector"] = connector_name
    if "batch.size" not in parsed:
        parsed["batch.size"] = client_class.batch_size_default(connector_values)
    options: LookupOptions = _build(LookupOptions, parsed)
    options = dataclasses.replace(options, connector_options=connector_values, given=values)
    _check_together(options, values)
    client_class.validate_options(options.for_connector())
    return options


def _option_texts(raw: Mapping[str, str]) -> dict[str, str]:
    """The options as lower-case names and texts. A catalog table (CREATE TABLE ... USING
    asynclookup OPTIONS (...)) hands its options over as "option.<name>", beside table
    properties (provider, owner...) that are not ours; its connector is always among them.
    (Any other "option.x" is an unknown option, named.)"""
    values: dict[str, str] = {}
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
        values[name] = value if isinstance(value, str) else option_text(value)
    return values


def _check_together(options: LookupOptions, values: Mapping[str, str]) -> None:
    """What options say together: retry delays in order, a shared tier only beside a partial
    cache (and its store's scheme known), a budget's options consistent."""
    retry = options.retry
    if retry.max_delay_s < retry.initial_delay_s:
        raise OptionError(
            "retry.max-delay.ms",
            f"({round(retry.max_delay_s * 1000)}) is smaller than retry.initial-delay.ms "
            f"({round(retry.initial_delay_s * 1000)})",
        )
    shared = options.cache.shared
    if shared.url is not None:
        resolve_shared_cache(shared.url)
        if options.cache.mode == "full":
            raise OptionError(
                "cache.shared.url",
                "is set with cache.mode=full, which answers every key from the worker's copy "
                "of the table: drop one of them",
            )
    _check_budget(options.budget, values)


MIN_BUDGET_RATE = 0.01
"""The smallest ``budget.rate`` (per second) and ``budget.cost-per-minute`` taken."""

MIN_LEASE_S = 1.0
"""The shortest ``budget.lease.ms``: the keeper renews leases every third of it."""


def _check_budget(budget: BudgetSettings, given: Mapping[str, str]) -> None:
    """The budget's options, checked together (``given``: the options as given)."""
    if not budget.active:
        named = sorted(name for name in given if name.startswith("budget."))
        if named:
            raise OptionError(
                named[0],
                "is set without a limit to keep: set budget.max-in-flight, budget.rate or "
                "budget.cost-per-minute",
            )
        return
    if budget.url is not None:
        budget.coordinator_class()
    for name, value in (
        ("budget.rate", budget.rate),
        ("budget.cost-per-minute", budget.cost_per_minute),
    ):
        if 0 < value < MIN_BUDGET_RATE:
            raise OptionError(name, f"must be 0 (no limit) or at least {MIN_BUDGET_RATE}")
    if budget.cost_column is not None and not budget.cost_per_minute:
        raise OptionError(
            "budget.cost.column", "needs budget.cost-per-minute (the cost units a minute allows)"
        )
    shortest = max(MIN_LEASE_S, 3 * budget.timeout_s)
    if budget.lease_s < shortest:
        raise OptionError(
            "budget.lease.ms",
            f"({round(budget.lease_s * 1000)}) must be at least {round(shortest * 1000)}: "
            "1000, and three times budget.timeout.ms (a task renews its leases every third of "
            "it, each call taking up to budget.timeout.ms)",
        )


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


def option_strings(options: Mapping[Any, Any]) -> dict[str, str]:
    """A mapping of options given from Python (values may be ints, bools, lists) as the strings
    every option is (``True`` -> ``true``, a list -> JSON); strings as they are."""
    return {str(k): v if isinstance(v, str) else option_text(v) for k, v in options.items()}


def option_text(value: object) -> str:
    """A Python option value as the string every option is given as (``True`` -> ``true``, a
    list -> JSON)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return json.dumps(list(value))
    return str(value)
