"""An in-process fake connector whose latency and failures the tests control.

Only for unit tests of the engine; every real connector is tested against a real server.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from lookup_source.connector_api import (
    BudgetAsk,
    BudgetConflictError,
    BudgetCoordinator,
    BudgetGrant,
    BudgetLimits,
    ConnectorConfig,
    Key,
    LookupClient,
    LookupResult,
    Matches,
)
from lookup_source.engine.runner import run_lookups
from lookup_source.engine.spec import EngineSpec
from lookup_source.settings import LookupOptions, RetrySettings
from lookup_source.testing.clock import VirtualTimeLoop

INT64 = pa.int64()


class FakeStore:
    """Shared state: the table, the requests received and the concurrency seen."""

    def __init__(self, table: dict[Any, dict[str, Any]] | None = None) -> None:
        self.table: dict[Any, Any] = dict(table or {})
        self.requests: list[list[Key]] = []
        self.in_flight = 0
        self.peak_in_flight = 0
        self.opened = 0
        self.closed = 0
        self.latency: Callable[[Sequence[Key]], float] = lambda keys: 0.0
        self.failures: list[BaseException] = []  # raised by the next requests, in order
        self.fail_keys: dict[Any, BaseException] = {}  # raised whenever a key is in a request


class FakeClient(LookupClient):
    name: ClassVar[str] = "fake"

    def __init__(self, config: ConnectorConfig, store: FakeStore | None = None) -> None:
        super().__init__(config)
        self.store = store if store is not None else FakeStore()

    async def open(self) -> None:
        self.store.opened += 1

    async def close(self) -> None:
        self.store.closed += 1

    async def lookup(self, keys: Sequence[Key]) -> LookupResult:
        store = self.store
        store.requests.append(list(keys))
        store.in_flight += 1
        store.peak_in_flight = max(store.peak_in_flight, store.in_flight)
        try:
            delay = store.latency(keys)
            if delay:
                await asyncio.sleep(delay)
            if store.failures:
                raise store.failures.pop(0)
            for key in keys:
                if key in store.fail_keys:
                    raise store.fail_keys[key]
            return {key: store.table[key] for key in keys if key in store.table}
        finally:
            store.in_flight -= 1


def make_options(**overrides: Any) -> LookupOptions:
    """Options for the fake connector; durations may be given in ms, as the options are."""
    retry = RetrySettings(
        max_attempts=overrides.pop("max_attempts", 3),
        backoff=overrides.pop("backoff", "fixed"),
        initial_delay_s=overrides.pop("initial_delay_ms", 1) / 1000,
        max_delay_s=overrides.pop("max_delay_ms", 50) / 1000,
        on_miss=overrides.pop("retry_on_miss", False),
    )
    for name in ("timeout", "deadline"):
        if f"{name}_ms" in overrides:
            overrides[f"{name}_s"] = overrides.pop(f"{name}_ms") / 1000
    values: dict[str, Any] = {"connector": "fake", "batch_size": 10, "timeout_s": 2.0}
    values.update(overrides)
    return LookupOptions(retry=retry, **values)


def make_spec(
    options: LookupOptions,
    *,
    key_columns: tuple[str, ...] = ("k",),
    values: tuple[tuple[str, pa.DataType], ...] = (("name", pa.string()), ("n", pa.int64())),
    how: str = "left",
) -> EngineSpec:
    return EngineSpec(
        options=options,
        key_columns=key_columns,
        value_fields=tuple(pa.field(name, kind) for name, kind in values),
        how=how,
    )


def make_config(spec: EngineSpec) -> ConnectorConfig:
    return ConnectorConfig(
        connector="fake",
        url="fake://user:secret@store:1",
        key_columns=spec.key_columns,
        value_columns=tuple(f.name for f in spec.value_fields),
        value_types=tuple(f.type for f in spec.value_fields),
        key_types=spec.key_types,
        capacity=spec.options.capacity,
        batch_size=spec.options.batch_size,
    )


def flat(outputs: Sequence[Any]) -> list[pa.RecordBatch]:
    """The batches of the engine's outputs (``submit`` and ``finish`` return, per input batch
    that is done, an iterator of bounded output batches)."""
    return [batch for output in outputs for batch in output]


def key_batch(keys: Sequence[Any], *, name: str = "k", kind: pa.DataType = INT64) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array(keys, type=kind), pa.array(range(len(keys)), type=pa.int64())],
        names=[name, "row"],
    )


class FakeColumnarClient(FakeClient):
    """The same fake store, answering in the columnar form (``lookup_arrow``)."""

    name: ClassVar[str] = "fake-columnar"

    async def lookup(self, keys: Sequence[Key]) -> LookupResult:  # pragma: no cover
        raise AssertionError("the engine must call lookup_arrow on a columnar connector")

    async def lookup_arrow(self, keys: pa.RecordBatch) -> Matches:
        from lookup_source.connector_api.keys import python_keys

        wanted = python_keys(keys)
        result = await FakeClient.lookup(self, wanted)
        positions: list[int] = []
        records: list[dict[str, Any]] = []
        errors: list[str | None] = []
        for position, key in enumerate(wanted):
            value = result.get(key)
            matches = value if isinstance(value, list) else [] if value is None else [value]
            for record in matches:
                positions.append(position)
                if isinstance(record, Exception):
                    records.append({})
                    errors.append(str(record))
                else:
                    records.append(dict(record))
                    errors.append(None)
        names = self.config.value_columns
        # deliberately loose types: the engine must convert them to the declared ones
        values = pa.RecordBatch.from_pylist(
            [{n: r.get(n) for n in names} for r in records],
            schema=pa.schema(
                [pa.field(n, _loose(t)) for n, t in zip(names, self.config.value_types)]
            ),
        )
        return Matches(positions, values, pa.array(errors, pa.string()) if any(errors) else None)


def _loose(arrow_type: pa.DataType) -> pa.DataType:
    return pa.int64() if pa.types.is_integer(arrow_type) else arrow_type


class MemoryBudgetCoordinator(BudgetCoordinator):
    """A budget coordinator in memory, on the event loop's clock: the Redis coordinator's
    script (``asynclookup_redis.budget``) in Python, for unit tests of the engine's side.
    ``failing``: raise this on every call (a coordinator that is down)."""

    name: ClassVar[str] = "memory-budget"

    def __init__(self, config: ConnectorConfig | None = None) -> None:
        super().__init__(config or BudgetCoordinator.config_for("memory://"))
        self.leases: dict[str, int] = {}
        self.expiry: dict[str, float] = {}
        self.wanting: dict[str, float] = {}
        self.next_slot = {"rate": 0.0, "cost": 0.0}
        self.gaps: dict[str, tuple[float, float]] = {}  # the time an ask ahead passed over
        self.limits: tuple[int, float, float] | None = None
        self.calls = 0
        self.failing: BaseException | None = None

    async def ask(self, budget: str, limits: BudgetLimits, ask: BudgetAsk) -> BudgetGrant:
        self.calls += 1
        if self.failing is not None:
            raise self.failing
        mine = (limits.max_in_flight, limits.rate, limits.cost_rate)
        if self.limits is not None and self.limits != mine:
            raise BudgetConflictError(f"budget {budget!r} is kept with {self.limits}")
        self.limits = mine
        now = asyncio.get_running_loop().time()
        granted, fair, contended, kept = 0, 0, False, 0
        if limits.max_in_flight:
            for holder, until in list(self.expiry.items()):
                if until <= now:
                    self.expiry.pop(holder)
                    self.leases.pop(holder, None)
            self.wanting = {h: t for h, t in self.wanting.items() if t > now}
            had = self.leases.pop(ask.holder, None)
            total = sum(self.leases.values())
            others = [h for h in self.wanting if h != ask.holder]
            contended = bool(others)
            without = sum(1 for h in others if h not in self.leases)
            fair = max(1, math.ceil(limits.max_in_flight / (len(self.leases) + 1 + without)))
            free_now = max(0, limits.max_in_flight - total)
            kept = min(ask.hold, had) if had is not None else min(ask.hold, free_now)
            if ask.want:
                free = limits.max_in_flight - total - kept
                if contended:
                    free = min(free, fair - kept)
                granted = max(0, min(ask.want, free))
                if granted < ask.want:
                    self.wanting[ask.holder] = now + 2.0
                else:
                    self.wanting.pop(ask.holder, None)
            if kept + granted:
                self.leases[ask.holder] = kept + granted
                self.expiry[ask.holder] = now + limits.lease_s
            else:
                self.expiry.pop(ask.holder, None)
                if not ask.want:
                    self.wanting.pop(ask.holder, None)

        def reserve(kind: str, per_s: float, units: float) -> float:
            if per_s <= 0 or units <= 0:
                return 0.0
            span, earliest = units / per_s, now + max(0.0, ask.ahead_s)
            gap_from, gap_to = self.gaps.get(kind, (0.0, 0.0))
            gap_to = min(gap_to, self.next_slot[kind])  # never past the next free slot
            start = max(gap_from, now, earliest)
            if start + span <= gap_to:  # it fits in the time an ask ahead left free
                self.gaps[kind] = (start + span, gap_to)
                return start - now
            free = self.next_slot[kind]
            start = max(free, earliest)
            self.next_slot[kind] = start + span
            if start > max(free, now):  # asked ahead: the time before it stays free
                self.gaps[kind] = (max(free, now), start)
            return start - now

        return BudgetGrant(
            leases=granted,
            fair_share=fair,
            contended=contended,
            requests_delay_s=reserve("rate", limits.rate, ask.requests),
            cost_delay_s=reserve("cost", limits.cost_rate, ask.cost),
            held=kept + granted,
            clock_s=now,
        )


@dataclasses.dataclass
class StoreFactory:
    """Makes fake clients of one store; known by ``identity`` (like a user's function), so the
    worker may keep them."""

    store: FakeStore
    identity: str = "fake-store"

    def __call__(self, config: ConnectorConfig) -> FakeClient:
        return FakeClient(config, self.store)


class AskedKeys:
    """The keys of one request, as the engine's intake hands them to the executor and its
    pacing; notes the rows each cost was asked for."""

    def __init__(self, keys: list[int], per_key: float = 1.0) -> None:
        self._keys = keys
        self.per_key = per_key
        self.costed: list[list[int] | None] = []

    @property
    def size(self) -> int:
        return len(self._keys)

    def keys(self) -> pa.RecordBatch:
        return pa.record_batch({"k": pa.array(self._keys, pa.int64())})

    def python_keys(self) -> list[Any]:
        return list(self._keys)

    def cost(self, rows: np.ndarray | None = None) -> float:
        self.costed.append(None if rows is None else rows.tolist())
        return self.per_key * (self.size if rows is None else len(rows))


def looked_up(
    batches: Sequence[pa.RecordBatch],
    spec: EngineSpec,
    store: FakeStore,
    client: type[FakeClient] = FakeClient,
) -> list[dict[str, Any]]:
    """The output rows of :func:`~lookup_source.engine.runner.run_lookups` over ``batches``,
    a fake ``client`` asking ``store``, on virtual time."""
    out = run_lookups(
        batches,
        spec,
        make_config(spec),
        client_factory=lambda config: client(config, store),
        loop_factory=VirtualTimeLoop,
    )
    return [row for batch in out for row in batch.to_pylist()]
