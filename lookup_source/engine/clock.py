"""The engine's two clocks, and the one module of the runtime that reads the system's time.

- ``monotonic``: seconds that only go forward — a cache entry's expiry, a kept client's idle
  time and age, the shared tier's cool-off, the sweeper, a SQL check's memo. A task's event
  loop keeps this same clock (asyncio's ``loop.time()`` is ``time.monotonic``, uvloop's is made
  so in :mod:`.loop`): the request path reads it through its loop, so that a test's loop on
  virtual time moves it.
- ``wall``: unix seconds, for what other processes or people read — the shared tier's expiry
  stamps, the times of the adaptive limit's history in the metrics.

Both are handed over once, as one :class:`Clocks`, by the worker to what it keeps (tests give
virtual ones: :func:`lookup_source.testing.clock.virtual_worker`); :data:`SYSTEM_CLOCKS` is the
default of whatever is made without a worker.

>>> now = [5.0]
>>> clocks = Clocks(monotonic=lambda: now[0])
>>> clocks.monotonic(), clocks.wall() > 1.6e9
(5.0, True)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

Clock = Callable[[], float]
"""What reads a time, in seconds."""


@dataclass(frozen=True)
class Clocks:
    """The monotonic and the wall clock, handed over together (see the module's docstring)."""

    monotonic: Clock = time.monotonic
    wall: Clock = time.time


SYSTEM_CLOCKS = Clocks()
"""The system's clocks: ``time.monotonic`` and ``time.time``."""


monotonic: Clock = time.monotonic
"""The system's monotonic clock, in seconds (what a uvloop loop's ``time()`` returns): the
builtin itself, read on every request's path with no Python frame around it."""
