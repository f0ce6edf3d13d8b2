"""What each plan of a ``lookup_join`` costs, estimated before it runs (``strategy=auto``).

Three plans give the same rows:

- ``lookup``: every input row goes through the task's ``mapInArrow``, and every key is asked
  of the store in batches: ``rows x (floor + lookup per key)``. The keys are counted as the
  input's rows: without a cache a task asks a key again in every batch it appears in, so the
  distinct keys are a lower bound that lookups rarely reach.
- ``broadcast``: the table is scanned once, collected and sent to every executor, and each
  input row probes it: ``table x (scan + broadcast) + rows x probe`` (a table of at most
  ``strategy.broadcast.max-rows``: each executor holds it in memory).
- ``scan``: the table is scanned in parallel and Spark joins it to the input (a shuffle of both
  sides, then a sort-merge or a shuffled hash join): ``table x (scan + join) + rows x join``.

Each figure is microseconds of a core per row, measured by ``asynclookup bench --scenarios
plan`` (a Postgres table of 2,000,000 rows ``bigint, text, integer``; inputs of 20,000 to
2,000,000 rows; ``local[2]``, PySpark 4.3, Python 3.13; docs/benchmarks.md): a job's wall time x
its 2 cores / its rows, so that the Python workers, the JVM and the store's server are all
counted. A connector states its own lookup and scan figures (``LookupClient.plan_costs``); the
Spark figures are the connector's no matter.
"""

from __future__ import annotations

from dataclasses import dataclass

FLOOR_US = 1.0
"""An input row through a lookup's ``mapInArrow`` with no I/O (the bench's Spark floor)."""
JOIN_US = 0.9
"""A row of either side through Spark's shuffle and sort-merge join: Spark's JDBC reader and a
join of 2,000,000 rows over the 2,000,000-row table took 2.43 s (4.9 core-s), of which the read
alone 0.57 s (1.1 core-s): 3.7 core-s over 4,000,000 rows."""
BROADCAST_US = 1.5
"""A table row collected to the driver, broadcast and built into a hash relation (the bench's
broadcast of a 100,000-row table, docs/benchmarks.md, "The join strategy")."""
PROBE_US = 0.2
"""An input row probing a broadcast hash relation (same)."""
JDBC_SCAN_US = 0.75
"""A table row read by Spark's own JDBC reader (``scan.reader=jdbc``), whatever the connector:
the bench's plan scenario (2026-11-26) read the 2,000,000-row table in 2 parts at 2.14M rows/s
through pgjdbc against 1.86M through the data source (the Postgres connector's 0.85 core-µs a
row): 0.87 of it."""


@dataclass(frozen=True)
class StoreCosts:
    """A connector's figures (core-µs): a key looked up (its share of a batched request, the
    store's work, decoding and output), and a table row read by its scan."""

    lookup_us: float = 6.0
    scan_us: float = 1.5


DEFAULT_COSTS = StoreCosts()
"""For a connector that states no figures of its own."""


@dataclass(frozen=True)
class Estimate:
    """The estimated core-seconds of each plan that can run (``broadcast`` only when the table
    fits ``strategy.broadcast.max-rows``)."""

    seconds: dict[str, float]

    @property
    def cheapest(self) -> str:
        return min(self.seconds, key=lambda plan: (self.seconds[plan], plan != "lookup"))

    def describe(self) -> str:
        """The estimates, the cheapest first: ``scan ~3.2 core-s, lookup ~14.0 core-s``."""
        ordered = sorted(self.seconds.items(), key=lambda item: item[1])
        return ", ".join(f"{plan} ~{_seconds(cost)}" for plan, cost in ordered)


def _seconds(cost: float) -> str:
    if cost < 1:
        return f"{cost * 1000:.3g} core-ms"
    return f"{cost:.2f} core-s" if cost < 10 else f"{cost:,.0f} core-s"


def estimate(
    rows: int, table: int, costs: StoreCosts = DEFAULT_COSTS, *, broadcast: bool = True
) -> Estimate:
    """The cost of each plan for an input of ``rows`` rows over a table of ``table`` rows;
    ``broadcast``: whether the table may be broadcast."""
    seconds = {
        "lookup": rows * (FLOOR_US + costs.lookup_us),
        "scan": table * (costs.scan_us + JOIN_US) + rows * JOIN_US,
    }
    if broadcast:
        seconds["broadcast"] = table * (costs.scan_us + BROADCAST_US) + rows * PROBE_US
    return Estimate({plan: cost / 1e6 for plan, cost in seconds.items()})


def lookup_break_even(table: int, costs: StoreCosts = DEFAULT_COSTS) -> int | None:
    """The largest input (rows) for which lookups cost no more than scanning a table of
    ``table`` rows and joining it (``scan``), or None when lookups always cost less.

    ``rows x (floor + lookup) <= table x (scan + join) + rows x join``: the figure a SQL JOIN
    against a lookup table is rewritten into lookups up to (``strategy=auto``; the rewrite
    leaves Spark's own join otherwise, which does not broadcast a Python data source).
    """
    per_row = FLOOR_US + costs.lookup_us - JOIN_US
    if per_row <= 0:
        return None
    return int(table * (costs.scan_us + JOIN_US) / per_row)
