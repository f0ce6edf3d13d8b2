"""What a request waits for before it is sent (:class:`Pacing`: the task's rate limiter, then
the cluster budget), and the budget's admission of one attempt, whose lease goes back once
(:class:`Admission`). The keys a request asks are :class:`AskedKeys`."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from lookup_source.engine.request.budget import TaskBudget
from lookup_source.engine.request.rate_limit import RateLimiter


class AskedKeys(Protocol):
    """The keys of one request (:class:`~lookup_source.engine.intake.batches.Request`)."""

    @property
    def size(self) -> int: ...

    def keys(self) -> pa.RecordBatch: ...

    def python_keys(self) -> list[Any]: ...

    def cost(self, rows: np.ndarray | None = None) -> float: ...


class Pacing:
    """What an attempt (or a hedge) waits for before it is sent: the task's rate limiter
    (``rate.limit``), then the cluster budget's admission at the cost of the keys it asks,
    whose lease it holds until its call ends (:class:`Admission`)."""

    def __init__(self, rate_limiter: RateLimiter | None, budget: TaskBudget | None) -> None:
        self.rate_limiter = rate_limiter
        self.budget = budget

    @property
    def waits_for_nothing(self) -> bool:
        """No rate limiter, no budget: :meth:`admit` would return None at once."""
        return self.rate_limiter is None and self.budget is None

    async def admit(self, asked: AskedKeys, rows: np.ndarray | None) -> Admission | None:
        """Wait until the keys ``asked`` (those at ``rows``, or all) may be sent."""
        if self.rate_limiter is not None:
            await self.rate_limiter.acquire()
        if self.budget is None:
            return None
        await self.budget.admit(asked.cost(rows))
        return Admission(self.budget)


class Admission:
    """One attempt admitted by the budget: its lease goes back once — when its call really
    ends (answered, failed, cancelled; an abandoned call that ignores cancellation is still in
    flight at the store, and keeps it until it ends), or at once if the call never starts."""

    def __init__(self, budget: TaskBudget) -> None:
        self._budget = budget
        self._started = False
        self._released = False

    async def holding(self, call: Awaitable[Any]) -> Any:
        """``call``, holding the lease until it ends."""
        self._started = True
        try:
            return await call
        finally:
            self.release()

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._budget.done()

    def release_unless_started(self) -> None:
        """Give the lease back if the call never started (a started one gives it back)."""
        if not self._started:
            self.release()


__all__ = ["Admission", "AskedKeys", "Pacing"]
