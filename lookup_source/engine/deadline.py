"""Time limits of a request: each attempt bounded by ``timeout.ms`` even when the client
ignores it, and all its attempts and backoff bounded by ``deadline.ms``."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Awaitable
from typing import Any

from lookup_source.errors import LookupTimeoutError

GRACE_S = 1.0
"""How long a timed-out request may take to honour its cancellation before it is abandoned."""

if sys.version_info >= (3, 11):

    async def with_timeout(awaitable: Awaitable[Any], seconds: float) -> Any:
        """Await ``awaitable`` for at most ``seconds`` (for clients that honour cancellation)."""
        async with asyncio.timeout(seconds):  # no extra task per request
            return await awaitable

else:  # pragma: no cover - Python 3.10

    async def with_timeout(awaitable: Awaitable[Any], seconds: float) -> Any:
        return await asyncio.wait_for(awaitable, seconds)


async def with_deadline(
    awaitable: Awaitable[Any], seconds: float, abandoned: set[asyncio.Future[Any]]
) -> Any:
    """Await ``awaitable`` for at most ``seconds``; raise ``TimeoutError`` after that.

    The deadline holds even for a client that swallows cancellation (a driver stuck on a dead
    connection): the request is cancelled, given a short grace, then abandoned so the task
    goes on; abandoned requests are put in ``abandoned`` and cancelled again when the task
    closes (:func:`cancel_abandoned`).
    """
    task = asyncio.ensure_future(awaitable)
    try:
        done, _ = await asyncio.wait({task}, timeout=seconds)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if done:
        return task.result()
    task.cancel()
    await asyncio.wait({task}, timeout=min(GRACE_S, seconds))
    if not task.done():
        abandoned.add(task)
        task.add_done_callback(abandoned.discard)
    else:
        with contextlib.suppress(BaseException):
            task.result()  # consume its outcome: never "exception was never retrieved"
    raise TimeoutError


async def cancel_abandoned(abandoned: set[asyncio.Future[Any]]) -> None:
    """Cancel the requests that overstayed their deadline; wait a grace period at most."""
    stuck = list(abandoned)
    for future in stuck:
        future.cancel()
    if stuck:  # requests that ignored their cancellation: do not wait for them forever
        await asyncio.wait(stuck, timeout=GRACE_S)


class RequestDeadline:
    """The ``deadline.ms`` of one request, from its first attempt: how long the next attempt
    may take, and whether a retry after a delay would still start in time."""

    __slots__ = ("ends", "timeout_s", "total_s")

    def __init__(self, timeout_s: float, total_s: float, now: float) -> None:
        self.timeout_s = timeout_s
        self.total_s = total_s
        self.ends = now + total_s if total_s else float("inf")

    def limit_s(self, now: float) -> float:
        """The time limit of an attempt starting ``now``: ``timeout.ms``, or less near the end."""
        return min(self.timeout_s, self.ends - now)

    def allows(self, when: float) -> bool:
        """Whether an attempt may still start at ``when``."""
        return when < self.ends

    def timeout_error(
        self, error: BaseException, limit_s: float, attempt: int
    ) -> LookupTimeoutError:
        """What a timed-out attempt (given ``limit_s``) failed with: the connector's own
        :class:`LookupTimeoutError`, else ``deadline.ms`` when it cut the attempt short, else
        ``timeout.ms``."""
        if isinstance(error, LookupTimeoutError):
            return error
        if limit_s < self.timeout_s:
            return self.error(attempt)
        return LookupTimeoutError(f"no answer within timeout.ms={round(self.timeout_s * 1000)}")

    def error(self, attempts: int, cause: BaseException | None = None) -> LookupTimeoutError:
        last = f"; the last attempt failed with {type(cause).__name__}: {cause}" if cause else ""
        return LookupTimeoutError(
            f"no answer within deadline.ms={round(self.total_s * 1000)} "
            f"({attempts} attempt{'s' if attempts != 1 else ''}){last}"
        )
