"""Every option of a lookup, typed and validated: :class:`LookupOptions` (made by
:func:`lookup_source.settings.parse.parse_options`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lookup_source.connector_api.client import ConnectorConfig, LookupClient
from lookup_source.connector_api.options import (
    choice,
    int_between,
    parse_bool,
    parse_column_list,
    parse_non_negative_int,
    parse_rate,
    parse_required_text,
    parse_text,
)
from lookup_source.errors import OptionError
from lookup_source.redaction import redact_url
from lookup_source.registry import first_party_names, resolve_connector
from lookup_source.settings.attempts import HedgeSettings, RetrySettings
from lookup_source.settings.budget import BudgetSettings
from lookup_source.settings.cache import CacheSettings
from lookup_source.settings.declare import (
    BUDGET_TASKS,
    CONNECTOR,
    JOINS,
    KEY_COLUMN,
    LOOKUP_JOIN,
    PARTITION_BY_KEY,
    RATE_LIMIT,
    RATE_LIMIT_TOTAL,
    duration_ms,
    group,
    option,
    parse_progress,
    ratio_above_one,
)
from lookup_source.settings.keys import KeySettings
from lookup_source.settings.plan import PlanSettings, ReadSettings

ERROR_COLUMN = "_lookup_error"
"""The string column ``on.error=column`` adds: the reason a key's lookup failed."""


@dataclass(frozen=True)
class LookupOptions:
    """Every option, typed and validated. Build it with :func:`parse_options`.

    Each core option is declared once, on the field it fills (:func:`option`): its key, type,
    default, unit, the surfaces that take it and its doc; :data:`CORE_OPTIONS` and the
    README's tables are read from these declarations. It pickles (it only holds plain values),
    so it travels from the driver to the executors.
    """

    connector: str = option(
        CONNECTOR,
        parse_required_text,
        None,
        "Which client performs the lookups: "
        + first_party_names(", ", ", ").join(["`", "`"]).replace(", ", "`, `")
        + ", the name of an installed `asynclookup.connectors` entry point, or "
        "`package.module:Class`. Required (`function` when you pass your own async function "
        "as fetch=).",
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
        ratio_above_one,
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
    keys: KeySettings = group(KeySettings)
    cache: CacheSettings = group(CacheSettings)
    hedge: HedgeSettings = group(HedgeSettings)
    budget: BudgetSettings = group(BudgetSettings)
    metrics_progress: str = option(
        "metrics.progress",
        parse_progress,
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
    plan: PlanSettings = group(PlanSettings)
    read: ReadSettings = group(ReadSettings)
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
