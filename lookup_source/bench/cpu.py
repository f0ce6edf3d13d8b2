"""CPU time by process group, read from ``/proc``: what a method costs per row, where.

Wall time on a shared machine swings by tens of percent between runs; CPU time per row, split by
process, is steadier and says where the cost is:

- ``spark_jvm``: the Spark driver JVM (local mode: the executors too);
- ``python_workers``: every Python process Spark starts (the daemon and its workers), sampled
  every 0.1 s while a method runs: a worker that exits meanwhile counts up to its last sample
  (PySpark's daemon lets the kernel reap its workers, whose time then reaches no parent);
- ``store``: the store's server, found by the port it listens on, with the children it has
  reaped (Postgres' short-lived backends) and those still running;
- ``bench``: this process (a thread pool, the embedded HTTP service, a latency proxy);
- ``raw_client``: processes this one started and reaped (the raw client's processes).

Linux only: elsewhere every figure is 0 and the report says so.
"""

from __future__ import annotations

import os
import resource
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

GROUPS = ("spark_jvm", "python_workers", "store", "bench", "raw_client")
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class _Stat:
    pid: int
    ppid: int
    own: float  # seconds: utime + stime
    reaped: float  # seconds: cutime + cstime (children waited for)


def _stat(pid: int) -> _Stat | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) "
    ticks = [int(v) for v in fields[11:15]]  # utime stime cutime cstime
    return _Stat(
        pid, int(fields[1]), (ticks[0] + ticks[1]) / _TICKS, (ticks[2] + ticks[3]) / _TICKS
    )


def _processes() -> dict[int, _Stat]:
    found: dict[int, _Stat] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if name.isdigit():
            stat = _stat(int(name))
            if stat is not None:
                found[stat.pid] = stat
    return found


def _descendants(root: int, processes: dict[int, _Stat]) -> Iterator[_Stat]:
    children: dict[int, list[_Stat]] = {}
    for stat in processes.values():
        children.setdefault(stat.ppid, []).append(stat)
    stack = list(children.get(root, []))
    while stack:
        stat = stack.pop()
        yield stat
        stack.extend(children.get(stat.pid, []))


def tree_cpu_seconds(root: int) -> dict[int, float]:
    """CPU seconds (its own and its reaped children's) of ``root`` and each of its
    descendants, by pid: what a process tree has used so far."""
    processes = _processes()
    tree = [processes[root]] if root in processes else []
    tree += list(_descendants(root, processes))
    return {stat.pid: stat.own + stat.reaped for stat in tree}


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def listening_pid(port: int) -> int | None:
    """The process that listens on TCP ``port`` (IPv4 or IPv6), or None."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as handle:
                next(handle)
                for line in handle:
                    parts = line.split()
                    local, state, inode = parts[1], parts[3], parts[9]
                    if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                        inodes.add(inode)
        except OSError:
            continue
    if not inodes:
        return None
    for pid in (int(n) for n in os.listdir("/proc") if n.isdigit()):
        try:
            links = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in links:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                return pid
    return None


@dataclass
class CpuSeconds:
    """CPU seconds by process group (:data:`GROUPS`)."""

    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(GROUPS, 0.0))

    def __sub__(self, other: CpuSeconds) -> CpuSeconds:
        return CpuSeconds({g: self.seconds[g] - other.seconds[g] for g in GROUPS})

    @property
    def total(self) -> float:
        return sum(self.seconds.values())

    def per_row_us(self, rows: int) -> dict[str, float]:
        """Core-microseconds per row, by group, and ``total``."""
        if rows <= 0:
            return {}
        out = {g: s * 1e6 / rows for g, s in self.seconds.items()}
        out["total"] = self.total * 1e6 / rows
        return out


class CpuMeter:
    """The CPU time of a bench run's process groups over a measured stretch::

    meter = CpuMeter(store_port)
    meter.start()
    ...                         # the method runs
    used = meter.stop()         # CpuSeconds by group
    """

    def __init__(self, store_port: int | None = None, interval: float = 0.1) -> None:
        self.store_pid = listening_pid(store_port) if store_port else None
        self.available = os.path.exists("/proc/self/stat")
        self.interval = interval
        self._first: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._start: CpuSeconds | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _jvm(self, processes: dict[int, _Stat]) -> _Stat | None:
        for stat in _descendants(os.getpid(), processes):
            if "org.apache.spark.deploy.SparkSubmit" in _cmdline(stat.pid):
                return stat
        return None

    def _sample(self) -> CpuSeconds:
        """The groups whose totals /proc keeps (JVM, store, bench, raw client), and a sample
        of every Python process of Spark, each remembered by its pid."""
        out = CpuSeconds()
        processes = _processes()
        me = processes.get(os.getpid())
        if me is not None:
            out.seconds["bench"] = me.own
        jvm = self._jvm(processes)
        if jvm is not None:
            out.seconds["spark_jvm"] = jvm.own
            for stat in [jvm, *_descendants(jvm.pid, processes)]:
                used = stat.reaped if stat is jvm else stat.own + stat.reaped
                self._first.setdefault(stat.pid, used if self._start is None else 0.0)
                self._last[stat.pid] = max(self._last.get(stat.pid, 0.0), used)
        if self.store_pid is not None and self.store_pid in processes:
            server = processes[self.store_pid]  # Postgres reaps its backends: cutime is whole
            store = server.own + server.reaped
            for stat in _descendants(server.pid, processes):
                store += stat.own
            out.seconds["store"] = store
        children = resource.getrusage(resource.RUSAGE_CHILDREN)  # the raw client's processes
        out.seconds["raw_client"] = children.ru_utime + children.ru_stime
        return out

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def start(self) -> None:
        self._first.clear()
        self._last.clear()
        self._start = None
        if not self.available:
            return
        self._start = self._sample()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="cpu-meter", daemon=True)
        self._thread.start()

    def stop(self) -> CpuSeconds:
        if not self.available or self._start is None:
            return CpuSeconds()
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        used = self._sample() - self._start
        used.seconds["python_workers"] = sum(
            self._last[pid] - self._first.get(pid, 0.0) for pid in self._last
        )
        return used
