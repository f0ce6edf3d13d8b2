"""The one keeper of what outlives a task (:class:`Keeper`), and its one eviction policy.

A keeper holds values by key, least recently used first, each pinned while a task uses it. A
value no task pins goes once it has idled past its own limit (:meth:`Keeper.idle`), and —
least recently used first — while the keeper holds more values than ``max_entries`` or more
bytes than a budget (:meth:`Keeper.evict`). A pinned value is never dropped. The worker keeps
its clients (:mod:`.clients`: a count, idle and age limits; closed as they go) and its caches
and hedging windows (:mod:`.cache`: a count and the memory budget ``cache.worker.max-mb``) in
keepers; what each does with a value that goes is its own (``on_drop``).

>>> keeper = Keeper(max_entries=2, clock=lambda: 0.0)
>>> for name in "abc":
...     _ = keeper.put(name, name.upper())
>>> keeper.evict(), keeper.dropped, list(keeper.keys())
(0, 1, ['b', 'c'])
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from lookup_source.engine.clock import Clock

V = TypeVar("V")


@dataclass(eq=False)
class Kept(Generic[V]):
    """One kept value: when it was made and last used (the keeper's clock), how long it may
    idle unused, and how many tasks pin it now."""

    value: V
    created_at: float
    last_used: float
    max_idle_s: float = math.inf
    users: int = 0


class Keeper(Generic[V]):
    """Values by key, least recently used first; see the module's docstring. Not locked: its
    owner holds its own lock around every call."""

    def __init__(
        self,
        *,
        max_entries: int,
        clock: Clock,
        size_of: Callable[[V], int] = lambda value: 0,
        on_drop: Callable[[str, V], None] = lambda key, value: None,
    ) -> None:
        self.max_entries = max_entries
        self.dropped = 0
        """Values dropped by the policy (:meth:`evict`, :meth:`expire`), for tests and logs."""
        self._clock = clock
        self._size_of = size_of
        self._on_drop = on_drop
        self._entries: OrderedDict[str, Kept[V]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def keys(self) -> Iterator[str]:
        return iter(list(self._entries))

    def items(self) -> list[tuple[str, Kept[V]]]:
        return list(self._entries.items())

    def get(self, key: str) -> Kept[V] | None:
        """The entry kept under ``key`` (not counted as a use)."""
        return self._entries.get(key)

    def newest(self) -> str | None:
        """The key used last."""
        return next(reversed(self._entries), None)

    def put(self, key: str, value: V, *, max_idle_s: float = math.inf) -> Kept[V]:
        """Keep ``value`` under ``key`` (replacing what was there, not dropped), as the most
        recently used."""
        now = self._clock()
        kept = self._entries[key] = Kept(value, now, now, max_idle_s)
        self._entries.move_to_end(key)
        return kept

    def use(self, key: str, *, pin: bool = False) -> Kept[V]:
        """``key``'s entry, now the most recently used (and pinned once more if ``pin``)."""
        kept = self._entries[key]
        self._entries.move_to_end(key)
        kept.last_used = self._clock()
        if pin:
            kept.users += 1
        return kept

    def unpin(self, kept: Kept[V], key: str | None = None) -> None:
        """A task that pinned ``kept`` is done with it; it counts as used now."""
        kept.users = max(0, kept.users - 1)
        kept.last_used = self._clock()
        if key is not None and self._entries.get(key) is kept:
            self._entries.move_to_end(key)

    def pop(self, key: str) -> Kept[V] | None:
        """Stop keeping ``key``'s value, without dropping it (its owner decides its fate)."""
        return self._entries.pop(key, None)

    def drop(self, key: str) -> None:
        """Stop keeping ``key``'s value and drop it (``on_drop``)."""
        kept = self._entries.pop(key, None)
        if kept is not None:
            self._on_drop(key, kept.value)

    def idle(self, now: float | None = None) -> list[str]:
        """The keys of the values no task pins that have idled past their limit, least
        recently used first."""
        now = self._clock() if now is None else now
        return [
            key
            for key, kept in self._entries.items()
            if kept.users == 0 and now - kept.last_used > kept.max_idle_s
        ]

    def expire(self) -> int:
        """Drop every value idle past its limit; how many went."""
        idle = self.idle()
        for key in idle:
            self.drop(key)
        self.dropped += len(idle)
        return len(idle)

    def nbytes(self) -> int:
        """What the values hold together, by ``size_of``."""
        return sum(self._size_of(kept.value) for kept in self._entries.values())

    def evict(
        self,
        *,
        max_bytes: float = math.inf,
        protect: Sequence[str] = (),
        room: int = 0,
        small_bytes: int = 0,
    ) -> int:
        """The one policy: drop the least recently used values that no task pins (nor
        ``protect`` names) while the keeper holds more than ``max_entries - room`` values or
        more than ``max_bytes``; a value of at most ``small_bytes`` goes for the count only.
        Returns how many bytes the values left hold."""
        total = self.nbytes() if max_bytes != math.inf else 0
        limit = self.max_entries - room
        for key in list(self._entries):
            over_count = len(self._entries) > limit
            if not over_count and total <= max_bytes:
                break
            kept = self._entries[key]
            size = self._size_of(kept.value) if max_bytes != math.inf else 0
            if key in protect or kept.users or (size <= small_bytes and not over_count):
                continue
            self.drop(key)
            self.dropped += 1
            total -= size
        return total

    def clear(self, *, pinned: bool = True) -> None:
        """Drop every value (``pinned``: those tasks pin too)."""
        for key, kept in list(self._entries.items()):
            if pinned or not kept.users:
                self.drop(key)


class Memo(Generic[V]):
    """Values made once per key and kept by a :class:`Keeper` (``max_entries``, the least
    recently used forgotten first), under a lock of its own: :meth:`get` makes a value the
    first time its key is asked, outside the lock (two threads may both make it; the last
    made is kept).

    >>> memo = Memo(max_entries=2, clock=lambda: 0.0)
    >>> made = []
    >>> def make():
    ...     made.append(1)
    ...     return "v"
    >>> memo.get("k", make), memo.get("k", make), len(made)
    ('v', 'v', 1)
    """

    def __init__(self, *, max_entries: int, clock: Clock) -> None:
        self._keeper: Keeper[V] = Keeper(max_entries=max_entries, clock=clock)
        self._lock = threading.Lock()

    def get(self, key: str, make: Callable[[], V], *, keep: Callable[[V], bool] | None = None) -> V:
        """``key``'s value: the one kept, else ``make()``, kept unless ``keep(value)`` is
        false."""
        with self._lock:
            if self._keeper.get(key) is not None:
                return self._keeper.use(key).value
        value = make()
        if keep is None or keep(value):
            with self._lock:
                self._keeper.put(key, value)
                self._keeper.evict()
        return value

    def __len__(self) -> int:
        return len(self._keeper)


__all__ = ["Keeper", "Kept", "Memo"]
