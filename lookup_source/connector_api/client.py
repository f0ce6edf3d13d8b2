"""The interface every connector implements.

A connector is a small async client. The engine creates it on the executor and opens it once
per Python worker (a worker serves task after task; once per task where Spark does not reuse
workers), calls :meth:`LookupClient.lookup` with batches of distinct, non-null keys (at most
``batch.size`` of them, at most ``capacity`` calls at once per task) and closes it when the
worker lets it go. The engine knows nothing of any backend::

    from lookup_source.connector_api import LookupClient

    class DictClient(LookupClient):
        name = "dict"

        async def lookup(self, keys):
            return {k: TABLE[k] for k in keys if k in TABLE}

Ship it in a package with an entry point, and users select it with ``connector=dict``::

    [project.entry-points."asynclookup.connectors"]
    dict = "my_package.clients:DictClient"

or without packaging, with ``connector=my_package.clients:DictClient``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Hashable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, ClassVar

import pyarrow as pa

from lookup_source.connector_api.config import ConnectorConfig
from lookup_source.connector_api.jdbc import JdbcTable, JdbcUnavailable
from lookup_source.connector_api.keys import python_keys
from lookup_source.connector_api.kit import scanned_keys
from lookup_source.connector_api.matches import Matches
from lookup_source.connector_api.options import OptionSpec
from lookup_source.connector_api.values import records_from_matches, records_to_matches
from lookup_source.errors import RecordError, SchemaError

SCAN_CHUNK_ROWS = 10_000
"""Rows per chunk of a scan."""

Key = Hashable
"""A key: a scalar for a single key column, a tuple of scalars for a composite key."""

Record = Mapping[str, Any]
"""A looked-up record: value column name -> Python value (converted to the column's type)."""

LookupResult = Mapping[Key, "Record | Sequence[Record] | RecordError | None"]
"""What :meth:`LookupClient.lookup` returns. A key that is absent (or maps to ``None``) is
missing; a list of records is several matches; a :class:`RecordError` marks a key whose stored
value is malformed."""


@dataclass(frozen=True)
class TableFacts:
    """What a store says of its whole table, for ``NOT IN``: whether some row has a null key
    (``null_key``), whether it holds any row at all (``any_row``); None where it cannot tell."""

    null_key: bool | None = None
    any_row: bool | None = None

    @property
    def known(self) -> bool:
        """Whether the store could tell both."""
        return self.null_key is not None and self.any_row is not None


class LookupClient:
    """Base class of connectors. Subclasses implement :meth:`lookup`, and usually
    :meth:`open` / :meth:`close`.

    Class attributes a connector may set:

    - ``name``: how users select it (``connector=<name>``);
    - ``option_specs``: its own options, named ``<name>.<option>``;
    - ``default_batch_size``: keys per request when ``batch.size`` is not set;
    - ``supports_scan``: whether :meth:`scan` can enumerate the whole table;
    - ``honours_cancellation``: whether a cancelled :meth:`lookup` always ends promptly;
    - ``reusable``: whether one opened client may serve task after task (see :meth:`open`);
    - ``preferred_loop``: the event loop its library runs fastest on (option ``loop=auto``).
    """

    name: ClassVar[str] = "custom"
    option_specs: ClassVar[tuple[OptionSpec, ...]] = ()
    default_batch_size: ClassVar[int] = 100
    supports_scan: ClassVar[bool] = False
    honours_cancellation: ClassVar[bool] = False
    """True when :meth:`lookup` always ends promptly once cancelled. Then the engine enforces
    ``timeout.ms`` with a plain ``asyncio.timeout``; otherwise (the safe default) it runs each
    attempt as a task it can abandon, which costs a little CPU per request."""

    lookup_cost_us: ClassVar[float | None] = None
    """Optional: microseconds of a core a key costs to look up (its share of a batched request,
    the store's work, decoding), as the bench's plan scenario measures it; ``strategy=auto``
    weighs it against a scan. None: a default (:mod:`lookup_source.spark.plan_cost`)."""

    reports_keys: ClassVar[bool] = False
    """True when :meth:`lookup_arrow` reports each match's own key (``Matches.keys``) whenever
    ``config.key_equality`` is ``spark``: a SQL JOIN against the table then gives Spark's
    join's rows even where the store's ``=`` is looser than Spark's (the engine drops the
    matches of other keys). A connector that cannot is asked :meth:`keys_match_exactly`
    instead, and a SQL JOIN stays Spark's scan and join where it says no."""

    scan_cost_us: ClassVar[float | None] = None
    """Optional: microseconds of a core a table row costs to read by :meth:`scan_arrow`."""

    reusable: ClassVar[bool] = True
    """True (the default) when an opened client may serve task after task: a Python worker that
    Spark reuses keeps one per configuration, for every later task and micro-batch of a lookup
    with the same settings. Set False for a client that keeps state of one task; it is then
    opened and closed per task."""

    preferred_loop: ClassVar[str] = "asyncio"
    """The event loop ``loop=auto`` runs this connector's tasks on: ``asyncio`` (the default)
    or ``uvloop`` (taken only where uvloop is installed). Set ``uvloop`` only where the bench
    measures the client cheaper per request on it."""

    def __init__(self, config: ConnectorConfig) -> None:
        self.config = config

    # -- validation, on the driver -------------------------------------------------------------

    @classmethod
    def batch_size_default(cls, connector_options: Mapping[str, Any]) -> int:
        """``batch.size`` when the user sets none; may depend on the connector's options."""
        return cls.default_batch_size

    @classmethod
    def describe_batch_size_default(cls) -> str:
        """How the docs state :meth:`batch_size_default` (override with it)."""
        return str(cls.default_batch_size)

    @classmethod
    def validate_options(cls, options: ConnectorConfig) -> None:
        """Check the parsed options before any task runs. Raise ``OptionError``."""

    @classmethod
    def validate_config(cls, config: ConnectorConfig) -> None:
        """Check options against the schema (key and value columns). Raise ``OptionError`` or
        ``SchemaError``."""

    @classmethod
    def implicit_inputs(cls, config: ConnectorConfig) -> Sequence[str]:
        """What the client's library reads on its own, with no option naming it, that may
        decide the answers: ``env:NAME`` (an environment variable) and ``file:PATH`` (a file's
        content). Their values on the executor join the lookup's identity, so clients, caches
        and the shared cache tier are never shared across them (libpq's ``PGPASSWORD``,
        ``PGDATABASE`` and ``~/.pgpass`` for Postgres). Options, ``*.env`` options, ``*-file``
        options and file parameters of the URL are covered already."""
        return ()

    # -- life cycle, on the executor -----------------------------------------------------------

    async def open(self) -> None:
        """Prepare the client, inside the event loop it will be used on.

        Where Spark reuses its Python workers (the default), a client is opened once per
        worker and configuration and serves task after task, micro-batch after micro-batch
        (``reusable``); otherwise once per task. No event loop runs between tasks: keep pools
        that notice closed connections when they hand one out, and leave no connection in doubt
        after a failed or cancelled request (``pooled`` does both).

        Do no I/O here that can fail on a store that is down: connect lazily, in the first
        :meth:`lookup`, so that connection failures are retried and handled by ``on.error``
        like any other failed request."""

    async def close(self) -> None:
        """Release every connection. Called when the client is let go: at the end of its task,
        or, for a client the worker kept, once it idled past ``connection.max-idle.ms`` or
        served a task that failed. Not called when Spark kills the worker (its sockets close
        with the process)."""

    async def __aenter__(self) -> LookupClient:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- lookups -------------------------------------------------------------------------------

    async def lookup(self, keys: Sequence[Key]) -> LookupResult:
        """Fetch ``keys`` (distinct, non-null, at most ``batch.size``) in as few round trips as
        the store allows. Return a mapping key -> record (or a list of records, for several
        matches); leave missing keys out.

        This is the simple record form. A connector that can produce Arrow columns directly
        overrides :meth:`lookup_arrow` instead (the engine then never calls this one; this
        default answers through it, for callers that want records)."""
        if not self.columnar:
            raise NotImplementedError(f"{type(self).__name__} implements neither lookup form")

        columns = list(zip(*[k if isinstance(k, tuple) else (k,) for k in keys])) or [
            () for _ in self.config.key_columns
        ]
        types = self.config.key_types or (None,) * len(columns)
        batch = pa.RecordBatch.from_arrays(
            [pa.array(list(c), type=t) for c, t in zip(columns, types)],
            names=list(self.config.key_columns),
        )
        return records_from_matches(keys, await self.lookup_arrow(batch))

    async def lookup_arrow(self, keys: pa.RecordBatch) -> Matches:
        """Fetch ``keys`` (one column per key column, named and typed as the lookup schema
        declares; distinct, non-null, at most ``batch.size`` rows) and return the values as
        :class:`Matches`, whose ``key_index`` points into ``keys``.

        The default calls :meth:`lookup` and converts its records."""

        wanted = python_keys(keys)
        return records_to_matches(wanted, await self.lookup(wanted) or {}, self.value_fields)

    @property
    def columnar(self) -> bool:
        """Whether the engine asks this client with :meth:`lookup_arrow` (by default: when the
        class overrides it). Otherwise the engine calls :meth:`lookup` and converts the
        records of all the requests of one input batch together."""
        return type(self).lookup_arrow is not LookupClient.lookup_arrow

    @property
    def value_fields(self) -> list[pa.Field]:
        """The value columns as Arrow fields, in the lookup schema's order."""
        config = self.config
        return [pa.field(n, t) for n, t in zip(config.value_columns, config.value_types)]

    @classmethod
    def can_scan(cls, config: ConnectorConfig) -> bool:
        """Whether :meth:`scan` can enumerate the table under this configuration."""
        return cls.supports_scan

    @classmethod
    def answers_existence(cls, config: ConnectorConfig) -> bool:
        """Whether a lookup of ``config`` with its value columns left out (``value_columns``
        empty) is answered by whether each key exists, asking the store for nothing more
        (Redis ``EXISTS``, a Postgres ``SELECT`` of the key) — with exactly the keys that have
        a match otherwise: a semi or anti join then asks only that. Its :class:`Matches` carry
        no value column (:func:`~lookup_source.connector_api.value_batch`). The default: no
        (the values are fetched, and left out of the output)."""
        return False

    @classmethod
    def takes_ranges(cls, config: ConnectorConfig) -> bool:
        """Whether ``lookup_arrow`` of ``config`` takes keys batches that carry ranges
        (:mod:`~lookup_source.connector_api.ranges`: a column of bounds per range after the key
        columns) and sends each key's ranges to the store, returning a subset of the key's
        rows that holds every row within them. The default: no (a range is judged by the
        engine alone, on every row of the key)."""
        return False

    @classmethod
    def infer_schema(cls, options: ConnectorConfig) -> tuple[str, tuple[str, ...]]:
        """Read the store's own description of the table: a Spark DDL schema (key columns
        first) and the key column names. Connectors that cannot describe a table raise."""
        raise SchemaError(
            f"the {cls.name} connector cannot infer a schema: give the key column(s) and the "
            "value columns, e.g. .schema('user_id long, name string, tier int')"
        )

    async def scan(
        self, partition: int = 0, partitions: int = 1
    ) -> AsyncIterator[tuple[Key, Record]]:
        """Enumerate the (key, record) pairs of one of ``partitions`` disjoint parts of the
        table, if ``supports_scan``. Each pair appears in exactly one part.

        This is the simple record form; :meth:`scan_arrow` is the columnar one (this default
        answers through it, for connectors that implement only that one)."""
        if type(self).scan_arrow is LookupClient.scan_arrow:
            raise NotImplementedError(f"the {self.name} connector cannot scan a whole table")

        async for keys, matches in self.scan_arrow(partition, partitions):
            for pair in records_from_matches(python_keys(keys), matches).items():
                yield pair

    async def scan_splits(self, partitions: int) -> Sequence[Any] | None:
        """Optional: how to cut a scan into ``partitions`` disjoint parts that together read
        the table once (key ranges, say), decided once when the read is planned. Each split is
        a plain value (it is pickled to a task) handed back as ``scan_arrow(..., split=)``.
        None (the default): each part filters the table itself (by a hash of the key)."""
        return None

    async def scan_arrow(
        self, partition: int = 0, partitions: int = 1, *, split: Any = None
    ) -> AsyncIterator[tuple[pa.RecordBatch, Matches]]:
        """The columnar scan: chunks ``(keys, matches)`` of one of ``partitions`` disjoint parts
        of the table. ``keys`` holds the key columns of the keys the chunk found, as the store
        gives them (the declared types, or text that converts to them: a key that does not is
        reported), and ``matches`` their values, with ``key_index`` pointing into ``keys``.
        ``split`` is this part's split from :meth:`scan_splits`, when it gave some.
        The default reads :meth:`scan`."""

        names = list(self.config.key_columns)
        pairs: list[tuple[Key, Any]] = []

        def chunk() -> tuple[pa.RecordBatch, Matches]:
            parts = [key if isinstance(key, tuple) else (key,) for key, _ in pairs]
            columns = [scanned_keys([p[i] for p in parts]) for i in range(len(names))]
            keys = pa.RecordBatch.from_arrays(columns, names=names)
            records = {i: record for i, (_, record) in enumerate(pairs)}
            matches = records_to_matches(range(len(pairs)), records, self.value_fields)
            pairs.clear()
            return keys, matches

        async for pair in self.scan(partition, partitions):
            pairs.append(pair)
            if len(pairs) >= SCAN_CHUNK_ROWS:
                yield chunk()
        if pairs:
            yield chunk()

    async def estimate_rows(self) -> int | None:
        """Optional: about how many rows the table holds, asked once on the driver to choose a
        join strategy (``strategy=auto``: a table small enough is scanned and broadcast). None
        (the default): unknown, and lookups are kept. Keep it cheap: a catalog statistic, a
        sample, never a full count of a large table."""
        return None

    @classmethod
    def exact_key_match(cls, config: ConnectorConfig) -> bool:
        """Whether a key the scan reads equals, value for value, the key a lookup asks (no
        case-insensitive or padded key types): a broadcast join of the scanned table then gives
        what the lookups give. The default: whenever the connector can scan."""
        return cls.can_scan(config)

    @classmethod
    def jdbc_table(cls, config: ConnectorConfig) -> JdbcTable:
        """Optional: how Spark's own JDBC reader reads this table (``strategy=scan`` and
        ``broadcast`` take it when the driver class is on Spark's classpath: ``scan.reader``).
        Called on the driver, where it may read secrets from the environment. Raises
        :class:`JdbcUnavailable` saying why not (the default: the connector has no JDBC
        form)."""
        raise JdbcUnavailable(f"the {cls.name} connector's store has no JDBC reader here")

    async def key_range(self) -> tuple[int, int] | None:
        """Optional: the smallest and largest key of a table with one integer key (a whole-table
        read is cut into ranges of it), asked once on the driver; None: unknown."""
        return None

    async def table_facts(self) -> TableFacts:
        """Whether the table holds a row with a null key, and any row at all: a SQL ``NOT IN
        (SELECT key FROM table)`` runs as lookups only where the store can tell both. Asked on
        the driver when such a query is analyzed, and by each task that runs it, whose rows
        follow the answer then: none for a null key, every one for no row, else those whose
        value is not null and not a key. The default: it cannot tell (``NOT IN`` stays
        Spark's)."""
        return TableFacts()

    async def keys_sent_exactly(self) -> bool:
        """For a connector that reports its rows' keys (:attr:`reports_keys`): whether every
        asked key that could equal a key of the table reaches the store as itself — not so for
        a key column read as another type than its own (Postgres integers read as strings: the
        string ``'5'`` cannot be sent as an integer, and a lookup would miss the row Spark's join
        finds). Asked once on the driver; a SQL JOIN stays Spark's where it says no. The
        default: yes."""
        return True

    async def keys_match_exactly(self) -> bool:
        """Whether the store matches a key exactly as Spark compares it — asked once on the
        driver, where the store may be asked (a Postgres catalog knows a ``citext`` or
        ``char(n)`` key column that Spark sees as a string): a SQL JOIN against the table is
        rewritten into lookups only then, so that it gives Spark's join's rows. The default:
        :meth:`exact_key_match`."""
        return type(self).exact_key_match(self.config)
