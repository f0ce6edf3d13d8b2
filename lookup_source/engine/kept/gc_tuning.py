"""Python's cyclic garbage collector, collecting less often while a task's lookups run.

Every request in flight holds a few dozen small objects (its task, futures, the client's
response objects) for the few milliseconds it waits. With Python's default threshold (a
collection of the youngest generation every 700 new objects), a task with 100 requests in
flight collects every few requests, finds them alive, and promotes them to the older
generations, whose collections then walk everything the worker holds (pyspark, pyarrow,
pandas). Measured on a per-key HTTP lookup (in one process, 20,000 GETs): 243 core-µs per key
with the default, 201 with 10,000, 195 with the collector off. Most of these objects are
freed by reference counting long before a collection at 10,000 would look at them.

:class:`GcHold` (one per worker process, kept by :class:`~.worker.Worker`) raises the
youngest generation's threshold for as long as one of the worker's tasks holds it (tasks may
overlap in one process: the last one out restores what it found); it never lowers a threshold
someone set higher, and leaves a disabled collector alone.
"""

from __future__ import annotations

import gc
import threading


class GcHold:
    """The raise of the collector's threshold, shared by the tasks of one process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._found: tuple[int, ...] | None = None
        """The thresholds the first holder found (restored by the last one), or None."""

    def hold(self, objects: int) -> bool:
        """Collect the youngest generation after ``objects`` new objects until
        :meth:`release`; return whether this call holds the raise (then it must call
        :meth:`release` once)."""
        if objects <= 0:
            return False
        with self._lock:
            if self._holders == 0:
                current = gc.get_threshold()
                if not gc.isenabled() or current[0] == 0 or current[0] >= objects:
                    return False
                self._found = current
                gc.set_threshold(objects, *current[1:])
            self._holders += 1
        return True

    def release(self) -> None:
        """Give back a :meth:`hold`; the last holder restores the thresholds it found."""
        with self._lock:
            self._holders -= 1
            if self._holders == 0 and self._found is not None:
                gc.set_threshold(*self._found)
                self._found = None
