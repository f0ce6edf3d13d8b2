"""The ``http-transports`` scenario: per-key HTTP by transport and event loop, against the raw
clients alone and the engines a Spark user might pick instead.

One service answering each GET in ``--transports-latency-ms`` (5 ms), ``--transports-keys``
distinct keys (60,000, none asked twice), ``--capacity`` requests in flight per task and
``--tasks`` tasks; every row checked. In the same run:

- asynclookup over each transport (``http.client``: aiohttp, pyreqwest) on each event loop
  (``loop``: asyncio, uvloop) — aiohttp on asyncio is 0.5's connector, pyreqwest on uvloop is
  what ``auto`` takes where both are installed;
- the raw clients alone, outside Spark (aiohttp on asyncio, pyreqwest on uvloop);
- Daft and Ray Data (:mod:`.peers`, run by ``--peers-python``, the interpreter that has them;
  skipped with a message when it has not);
- the Spark floor (the same ``mapInArrow``, no I/O).

The service is ``--transports-service``: ``python`` (default; :class:`UserService`, aiohttp
in the bench process, its CPU the ``bench`` group's), ``native`` (nginx,
:mod:`.native_service`: its own directives answer each GET where its echo module is installed,
else njs; its CPU counted as the ``store`` group's; the scenario's name ends with ", nginx"),
or ``auto`` (native where nginx and njs are installed).

CPU per GET is read by process (:mod:`.cpu`): the Python workers' against the raw aiohttp
client's is the issue's second target. A peer's CPU is its whole process tree's, its start
of workers included.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lookup_source.bench import journal as journal_module
from lookup_source.bench import methods as m
from lookup_source.bench import timing
from lookup_source.bench.children import ends_with_this_process
from lookup_source.bench.context import Context, Result
from lookup_source.bench.cpu import CpuMeter, tree_cpu_seconds
from lookup_source.bench.stores import http_store

TRANSPORTS = (
    ("aiohttp", "asyncio"),
    ("aiohttp", "uvloop"),
    ("pyreqwest", "asyncio"),
    ("pyreqwest", "uvloop"),
)
"""(``http.client``, ``loop``) pairs asynclookup is run with; the first is 0.5's connector."""

RAW_CLIENTS = (("aiohttp", "asyncio"), ("pyreqwest", "uvloop"))

PEERS = ("daft", "ray")


@dataclass
class TransportRun:
    """What one measured method says, with the name of its row in the report."""

    result: Result
    kind: str  # "asynclookup", "raw", "peer", "floor"
    client: str = ""
    loop: str = ""


def missing(client: str, loop: str) -> str | None:
    """Why this (client, loop) cannot run in this interpreter, or None."""
    for module in {"pyreqwest": "pyreqwest", "aiohttp": "aiohttp"}[client], loop:
        if module == "asyncio":
            continue
        try:
            __import__(module)
        except ImportError:
            return f"{module} is not installed"
    if client == "pyreqwest" and sys.version_info < (3, 11):
        return "pyreqwest needs Python 3.11 or newer"
    return None


def run_transports(spark: Any, args: Any) -> list[TransportRun]:
    from pyspark.sql import functions as F

    keys = args.transports_keys
    runs: list[TransportRun] = []
    service = getattr(args, "transports_service", "python")
    users = max(keys, args.users)
    with http_store(users, args.transports_latency_ms, batch=False, service=service) as store:
        store.name = f"http-transports-{args.transports_latency_ms:g}ms" + (
            store.name[store.name.index(", ") :] if ", " in store.name else ""
        )  # the service, as the store's name says it
        ids = spark.range(keys, numPartitions=args.tasks)  # each key once, in order
        df = ids.select(F.col("id").alias("event_id"), F.col("id").alias("user_id")).cache()
        df.count()
        ctx = Context(spark, store, df, df, args, args.capacity, "distinct")
        meter = CpuMeter(store.server_port)
        timing.METER = meter
        try:
            _warm_up(ctx, keys)
            for client, loop in TRANSPORTS:
                why = missing(client, loop)
                label = f"{client}, {loop}"
                if why:
                    runs.append(
                        _skipped(ctx, f"asynclookup ({label})", why, "asynclookup", client, loop)
                    )
                    continue
                method = m.asynclookup(
                    "ordered", extra={"http.client": client, "loop": loop}, label=label
                )
                result = _measured(ctx, method.__name__, functools.partial(method, ctx), keys)
                runs.append(TransportRun(result, "asynclookup", client, loop))
            runs.append(
                TransportRun(
                    _measured(ctx, "floor", functools.partial(m.floor, ctx), keys), "floor"
                )
            )
            task_keys = [[k for k in range(keys) if k % args.tasks == t] for t in range(args.tasks)]
            for client, loop in RAW_CLIENTS:
                why = missing(client, loop)
                if why:
                    runs.append(
                        _skipped(ctx, f"raw client ({client}, {loop})", why, "raw", client, loop)
                    )
                    continue
                ceiling = functools.partial(
                    m.ceiling, ctx, task_keys, keys, http_client=client, loop=loop
                )
                result = _measured(ctx, f"raw client ({client}, {loop})", ceiling, keys)
                runs.append(TransportRun(result, "raw", client, loop))
        finally:
            timing.METER = None
            df.unpersist()
        for engine in PEERS:
            runs.append(_peer(ctx, engine, keys, args))
    return runs


def _warm_up(ctx: Context, keys: int) -> None:
    """Each transport once on other keys, unmeasured: the workers import it and keep its
    client open, as a long job's do (the raw clients, too, open theirs before they are
    measured)."""
    from lookup_source import lookup_join
    from lookup_source.bench.stores import SCHEMA

    warm = ctx.spark.range(keys, keys + 2_000, numPartitions=ctx.args.tasks)
    warm = warm.withColumnRenamed("id", "user_id")
    for client, loop in TRANSPORTS:
        if missing(client, loop) is None:
            options = {**ctx.store.options, "capacity": str(ctx.capacity)}
            options.update({"http.client": client, "loop": loop})
            timing.timed(lookup_join(warm, "user_id", schema=SCHEMA, options=options))


def _skipped(
    ctx: Context, name: str, why: str, kind: str, client: str = "", loop: str = ""
) -> TransportRun:
    print(f"  {ctx.store.name}: {name} skipped: {why}", flush=True)
    return TransportRun(ctx.result(name, 0, 0.0, note=f"skipped: {why}"), kind, client, loop)


def _measured(ctx: Context, name: str, run: Callable[[], Result], keys: int) -> Result:
    """One method's result, its CPU per GET; a failure kept as failed (the run goes on)."""
    label = f"{ctx.store.name}: {name}"
    print(f"  {label} ...", flush=True)
    timing.LAST_CPU = None
    try:
        result = run()
    except Exception as error:
        reason = journal_module.JOURNAL.failed(label, error)
        return ctx.result(name, 0, 0.0, note=f"FAILED: {reason}")
    if timing.LAST_CPU is not None:
        result.cpu_us_per_row = timing.LAST_CPU.per_row_us(keys)
    journal_module.JOURNAL.done(f"{label}: {result.rows_per_s:,.0f} rows/s")
    return result


def _peer(ctx: Context, engine: str, keys: int, args: Any) -> TransportRun:
    """A peer engine over the same service, in ``--peers-python``; its process tree's CPU."""
    name = f"{engine} (peer)"
    python = args.peers_python
    if not python:
        why = "no --peers-python (an interpreter with the peer and aiohttp installed)"
        return _skipped(ctx, name, why, "peer", engine)
    label = f"{ctx.store.name}: {name}"
    print(f"  {label} ...", flush=True)
    script = os.path.join(os.path.dirname(__file__), "peers.py")
    command = [
        python,
        script,
        "--engine",
        engine,
        "--url",
        ctx.store.target,
        "--keys",
        str(keys),
        "--in-flight",
        str(ctx.capacity),
        "--workers",
        str(ctx.args.tasks),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK", "SPARK"))}
    env.pop("PYTHONPATH", None)
    try:
        process = subprocess.Popen(
            ends_with_this_process(command),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        tree = _TreeSampler(process.pid)
        tail: list[str] = []
        said_lines: list[str] = []
        readers = [
            threading.Thread(target=tree.follow, args=(process.stderr, tail), daemon=True),
            threading.Thread(target=lambda: said_lines.extend(process.stdout or []), daemon=True),
        ]
        for reader in readers:
            reader.start()
        process.wait(timeout=args.peers_timeout_s)
        for reader in readers:
            reader.join(5.0)
        cpu = tree.stop()
        out = "".join(said_lines)
        lines = [line for line in out.splitlines() if line.startswith("{")]
        if process.returncode != 0 or not lines:
            last = (tail or ["no output"])[-1]
            raise RuntimeError(f"exit {process.returncode}: {last[:300]}")
        said = json.loads(lines[-1])
    except Exception as error:
        if "process" in locals() and process.poll() is None:
            process.kill()
        reason = journal_module.JOURNAL.failed(label, error)
        return TransportRun(ctx.result(name, 0, 0.0, note=f"FAILED: {reason}"), "peer", engine)
    if "skipped" in said:
        return _skipped(ctx, name, str(said["skipped"]), "peer", engine)
    if said["checked"] != said["rows"] or said["rows"] != keys:
        reason = journal_module.JOURNAL.failed(
            label, RuntimeError(f"{said['checked']:,} of {said['rows']:,} rows right")
        )
        return TransportRun(ctx.result(name, 0, 0.0, note=f"FAILED: {reason}"), "peer", engine)
    result = ctx.result(
        f"{engine} {said['version']} (peer)",
        said["rows"],
        said["seconds"],
        note="async class, aiohttp; the lookups alone (engine started); CPU: its process tree "
        "meanwhile, its workers' start included",
    )
    result.cpu_us_per_row = {"peer": cpu * 1e6 / keys, "total": cpu * 1e6 / keys}
    journal_module.JOURNAL.done(f"{label}: {result.rows_per_s:,.0f} rows/s")
    return TransportRun(result, "peer", engine)


class _TreeSampler:
    """The CPU seconds a process and all its descendants use between the two lines of
    :mod:`.peers` on its stderr (:meth:`follow`), sampled every 0.1 s (a worker that exits
    counts up to its last sample)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._last: dict[int, float] = {}
        self._start: dict[int, float] | None = None
        self._end: dict[int, float] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peer-cpu", daemon=True)
        self._thread.start()

    def _sample(self) -> dict[int, float]:
        with self._lock:
            for pid, used in tree_cpu_seconds(self.pid).items():
                self._last[pid] = max(self._last.get(pid, 0.0), used)
            return dict(self._last)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self._sample()

    def follow(self, stderr: Any, tail: list[str]) -> None:
        """Read the peer's stderr: mark where its lookups start and end; keep its last lines."""
        from lookup_source.bench.peers import MARK_END, MARK_START

        for line in stderr:
            if line.startswith(MARK_START):
                self._start = self._sample()
            elif line.startswith(MARK_END):
                self._end = self._sample()
            elif line.strip():
                tail[:] = [*tail[-20:], line.rstrip()]

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        start, end = self._start or {}, self._end or self._sample()
        return sum(used - start.get(pid, 0.0) for pid, used in end.items())
