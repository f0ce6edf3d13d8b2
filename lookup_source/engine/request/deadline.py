"""Time limits of a request: each attempt bounded by ``timeout.ms`` even when the client
ignores it, and all its attempts and backoff bounded by ``deadline.ms``."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from lookup_source.errors import LookupTimeoutError

GRACE_S = 1.0
"""How long a timed-out request may take to honour its cancellation before it is abandoned."""


class _Watch:
    """One attempt's time limit: the task it runs in, and when it ends."""

    __slots__ = ("expired", "task", "when")

    def __init__(self, task: asyncio.Task[Any] | None, when: float) -> None:
        self.task = task  # None once the attempt has ended
        self.when = when
        self.expired = False


class AttemptTimer:
    """The time limits of the attempts in flight on one loop, kept by one timer.

    ``asyncio.timeout`` schedules and cancels a timer per attempt: a heap push, a handle, and
    the loop sifting its heap past the cancelled one, for every request. Attempts of one
    engine mostly share one time limit (``timeout.ms``), so they end in the order they
    start: a queue of their limits, in that order, with one timer set for the earliest
    still running, does the same work for the price of an append. An attempt whose limit would
    jump the queue (shortened by ``deadline.ms``) takes a timer of its own.

    Past its limit, an attempt's task is cancelled and the attempt raises ``TimeoutError``
    (as with ``asyncio.timeout``, a cancellation from elsewhere stays a cancellation).
    """

    def __init__(self) -> None:
        self._watches: deque[_Watch] = deque()
        self._timer: asyncio.Handle | None = None
        self._timer_when = 0.0
        """When the timer is set for (uvloop's handle of a time already past has no ``when``)."""

    async def within(self, awaitable: Awaitable[Any], seconds: float) -> Any:
        """Await ``awaitable`` (which ends promptly when cancelled) for at most ``seconds``."""
        if sys.version_info < (3, 11):  # no Task.uncancel(): asyncio's own bound, per attempt
            try:
                return await asyncio.wait_for(awaitable, seconds)
            except asyncio.TimeoutError:  # a class of its own on 3.10: the builtin, as on 3.11+
                raise TimeoutError from None
        loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        watches = self._watches
        when = loop.time() + seconds
        if task is None or (watches and when < watches[-1].when):
            async with asyncio.timeout(seconds):
                return await awaitable
        watch = _Watch(task, when)
        watches.append(watch)
        timer = self._timer
        if timer is None or when < self._timer_when:  # none, or one set for ended attempts
            self._set_timer(loop, when)
        try:
            result = await awaitable
        except asyncio.CancelledError:
            if watch.expired and task.uncancel() == 0:
                raise TimeoutError from None
            raise
        except Exception as exc:
            if watch.expired:  # it ended otherwise as it was cancelled (a client's own timer
                task.uncancel()  # went off too): the cancellation is taken back, never left
                raise TimeoutError from exc  # to hit the task's next await
            raise
        finally:
            watch.task = None
            while watches and watches[0].task is None:
                watches.popleft()
        if watch.expired:  # the answer came despite the cancellation: the answer stands
            task.uncancel()
        return result

    async def abandoning(
        self, awaitable: Awaitable[Any], seconds: float, abandoned: set[asyncio.Future[Any]]
    ) -> Any:
        """Await ``awaitable`` for at most ``seconds``; raise ``TimeoutError`` after that.

        The limit holds even for a client that swallows cancellation (a driver stuck on a dead
        connection): the request runs as a task of its own, cancelled at its limit, given a
        short grace, then abandoned so the task goes on; abandoned requests are put in
        ``abandoned`` and cancelled again when the task closes (:func:`cancel_abandoned`).
        """
        request = asyncio.ensure_future(awaitable)
        try:
            return await self.within(asyncio.shield(request), seconds)
        except TimeoutError:
            pass
        except BaseException:
            request.cancel()
            raise
        request.cancel()
        await asyncio.wait({request}, timeout=min(GRACE_S, seconds))
        if not request.done():
            abandoned.add(request)
            request.add_done_callback(abandoned.discard)
        else:
            with contextlib.suppress(BaseException):
                request.result()  # consume its outcome: never "exception was never retrieved"
        raise TimeoutError

    def close(self) -> None:
        """Stop the timer (the attempts have ended, or been cancelled)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._watches.clear()

    def _set_timer(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(when, self._expire, loop)
        self._timer_when = when

    def _expire(self, loop: asyncio.AbstractEventLoop) -> None:
        """Cancel the attempts past their limit; set the timer for the next one."""
        self._timer = None
        watches = self._watches
        now = loop.time()
        while watches:
            watch = watches[0]
            if watch.task is None:
                watches.popleft()
                continue
            if watch.when > now:
                self._set_timer(loop, watch.when)
                return
            watches.popleft()
            watch.expired = True
            watch.task.cancel()


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

    @classmethod
    def factory(cls, timeout_s: float, total_s: float) -> Callable[[float], RequestDeadline]:
        """What makes a request's deadline from its start; without ``deadline.ms``, every
        request has the same (``timeout.ms`` per attempt, no end): made once."""
        if total_s:
            return lambda now: cls(timeout_s, total_s, now)
        endless = cls(timeout_s, 0.0, 0.0)
        return lambda now: endless

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
        """The request's failure at its deadline, after ``attempts`` (``cause``: what the last
        one failed with, unless the deadline itself cut it short)."""
        cut = cause is not None and getattr(cause, _CUT_BY_DEADLINE, False)
        last = (
            ""
            if cause is None or cut
            else (f"; the last attempt failed with {type(cause).__name__}: {cause}")
        )
        error = LookupTimeoutError(
            f"no answer within deadline.ms={round(self.total_s * 1000)} "
            f"({attempts} attempt{'s' if attempts != 1 else ''}){last}"
        )
        setattr(error, _CUT_BY_DEADLINE, True)
        return error


_CUT_BY_DEADLINE = "_asynclookup_deadline"
"""Set on the errors :meth:`RequestDeadline.error` makes, so that they are not quoted twice."""
