"""A cluster budget across executors and jobs: ``local-cluster[2,2,1024]`` (two executors of
two cores, separate JVMs and Python workers) runs two jobs at once that name one budget, kept
by a real Redis, against a real HTTP service with a quota that counts what it receives
(:class:`~lookup_source.bench.quota.QuotaService`, which refuses with 429 what goes beyond).

What is shown, every row right in each phase: requests in flight never above
``budget.max-in-flight``; requests in any one-second window never above ``budget.rate`` (+5%);
cost per second within ``budget.cost-per-minute`` / 60 (+5%); a skewed input (one partition
10x the others) uses the quota at 90% or so with a budget (asserted: 60%, and half as much
again as the static split, for a loaded machine), where ``rate.limit.total``'s even
split leaves most of it idle; Redis restarted mid-phase: the tasks fall back to their static
share and resume, never more than one grant too many in flight. The job runs in a Python
process of its own (the test session keeps its single SparkSession); its figures are printed
with ``-s``. An executor killed mid-job (SIGKILL, its JVM and its Python workers): the job ends
with every row right, and the leases its workers held return within the lease time. Marked
``cluster``: it runs once, in CI's main leg (each surface's budget runs on every PySpark).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from lookup_source.bench.quota import QuotaService
from tests.servers import RedisServer, own_redis_server

pytestmark = pytest.mark.cluster

JOB = Path(__file__).with_name("budget_job.py")
PHASES = ("rate", "skew_budget", "skew_static", "cost", "in_flight", "restart")
"""In this order: the phases that measure how much of the quota is used before the executor is
killed (its replacement's workers start cold)."""
LEASE_S = 3.0
"""The jobs' budget.lease.ms."""


def descendants(pid: int) -> list[tuple[int, str]]:
    """The processes under ``pid`` (from /proc), with their command lines."""
    children: dict[int, list[int]] = {}
    commands: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        parent = int(
            next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:"))
        )
        children.setdefault(parent, []).append(int(entry.name))
        commands[int(entry.name)] = command
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append((child, commands.get(child, "")))
            todo.append(child)
    return found


class Faults:
    """During the ``in_flight`` phase, once the jobs have sent 300 requests: SIGKILL one executor
    JVM of the job and its Python workers (holding leases), and read in the budget's
    Redis when their leases lapse (no one renews them now). During the ``restart`` phase, at 300
    requests: kill the budget's Redis, and start it again (empty) 1.5 s later (longer than a
    task goes without asking it, leases renewed every second, also on a busy machine)."""

    def __init__(self, service: QuotaService, redis: RedisServer) -> None:
        self.service, self.redis = service, redis
        self.job_pid = 0
        self.dead_leases = 0  # leases the killed executor's workers held when it died
        self.returned_s: float | None = None  # when the last of them lapses, from the kill
        self.done = threading.Event()

    def watch(self) -> None:
        killed = restarted = False
        kills = 0
        while not self.done.is_set() and not (killed and restarted):
            busy = len(self.service.arrivals) >= 300
            if self.service.phase == "in_flight" and busy and not killed:
                # again while no worker holds a lease; and once more if the workers of the one
                # killed gave theirs back between the reading and the kill (a busy machine)
                kills += self._kill_an_executor()
                killed = self.dead_leases > 0 or kills >= 2
            if self.service.phase == "restart" and busy and not restarted:
                self.redis.kill()
                time.sleep(1.5)
                self.redis.start()
                restarted = True
            time.sleep(0.01)

    def _holders(self, store: Any) -> dict[str, int]:
        """The budget's leases now, by the holding process's pid (holders are host:pid:r)."""
        held: dict[str, int] = {}
        for key in store.scan_iter(match="asynclookup:budget:*:leases"):
            for holder, count in store.hgetall(key).items():
                pid = holder.decode().split(":")[1]
                held[pid] = held.get(pid, 0) + int(count)
        return held

    def _kill_an_executor(self) -> bool:
        """SIGKILL the executor whose Python workers hold the most leases now (which one
        runs the tasks is Spark's), and read when those leases lapse; False (nothing killed)
        while no worker holds one."""
        import redis

        store = redis.Redis.from_url(self.redis.url)
        try:
            held = self._holders(store)
            executors = [
                pid
                for pid, command in descendants(self.job_pid)
                if "CoarseGrainedExecutorBackend" in command
            ]
            holding = {
                executor: sum(held.get(str(pid), 0) for pid, _ in descendants(executor))
                for executor in executors
            }
            if not holding or max(holding.values()) == 0:
                return False
            chosen = max(holding, key=lambda executor: holding[executor])
            self._kill(chosen, store)
            return True
        finally:
            store.close()

    def _kill(self, executor: int, store: Any) -> None:
        dying = [pid for pid, _ in descendants(executor)]
        workers = {str(pid) for pid in dying}
        for pid in [executor, *dying]:  # the executor's container dies: all of it at once
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        seconds, micros = store.time()  # the coordinator's clock, which leases lapse by
        now_ms = seconds * 1000 + micros / 1000
        lapse_ms = []
        for key in store.scan_iter(match="asynclookup:budget:*:leases"):
            expiry = key[: -len(b"leases")] + b"expiry"
            for holder, count in store.hgetall(key).items():
                if holder.decode().split(":")[1] in workers:  # host:pid:random
                    self.dead_leases += int(count)
                    lapse_ms.append(store.zscore(expiry, holder) or now_ms)
        if lapse_ms:  # no one renews them now: they are free again once lapsed
            self.returned_s = max(0.0, (max(lapse_ms) - now_ms) / 1000)


@pytest.fixture(scope="module")
def report(spark_work_dir: None) -> dict[str, Any]:
    root = str(Path(__file__).resolve().parents[2])
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p),
    }
    with own_redis_server() as redis, QuotaService(cost_of=lambda key: 1 + key % 3) as service:
        faults = Faults(service, redis)
        watcher = threading.Thread(target=faults.watch)
        job = subprocess.Popen(
            [
                sys.executable,
                str(JOB),
                "local-cluster[2,2,1024]",
                redis.url,
                service.base_url,
                *PHASES,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        faults.job_pid = job.pid
        watcher.start()
        try:
            stdout, stderr = job.communicate(timeout=600)
        finally:
            faults.done.set()
            watcher.join()
            job.kill()
    assert job.returncode == 0, stderr[-4000:]
    found: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    found["in_flight"]["dead_leases"] = faults.dead_leases
    found["in_flight"]["returned_s"] = faults.returned_s
    for name, figures in found.items():
        print(f"{name}: {figures['seconds']:.2f} s, service {figures['service']}")
    return found


def coordinated(phase: dict[str, Any]) -> None:
    for lookup in phase["lookups"]:
        assert lookup["budget"].startswith("coordinated"), lookup
        assert lookup["grants"] > 0 and lookup["failed_keys"] == 0


def test_two_jobs_never_have_more_in_flight_than_the_budget(report: dict[str, Any]) -> None:
    phase = report["in_flight"]
    service = phase["service"]
    assert service["refused"] == 0  # the service allows 6 in flight: none was ever over
    assert service["peak_in_flight"] == 6  # and the budget was used to the full
    assert service["requests"] >= 390 + 120  # every row right (checked in the job)
    coordinated(phase)


def test_an_executor_killed_mid_job_returns_its_leases_within_the_lease_time(
    report: dict[str, Any],
) -> None:
    phase = report["in_flight"]
    print(f"killed: {phase['dead_leases']} leases held, lapsing in {phase['returned_s']} s")
    assert phase["dead_leases"] > 0  # an executor and its workers died mid-job, holding leases
    # no one renews them now: they return to the budget within the lease time
    assert phase["returned_s"] is not None and phase["returned_s"] <= LEASE_S + 0.05
    assert phase["service"]["peak_in_flight"] <= 6  # the job ran on (its tasks again), within


def test_two_jobs_keep_the_rate_in_every_second(report: dict[str, Any]) -> None:
    phase = report["rate"]
    service = phase["service"]
    assert service["most_in_1s"] <= 300 * 1.05
    # none refused but what the service's own lateness explains, each in its own second
    # (QuotaService.unexplained_refusals): a late answer's slots are due as reserved (CI saw
    # 10 of 885 refused when they were placed from the answer; 16 beside another Spark job,
    # every row right, its loop late)
    assert service["unexplained_refusals"] == 0, service
    assert service["requests"] == 585 + 300
    # the quota used while keys remained: 0.92 measured on a quiet machine, 0.79 beside a full
    # test suite, 0.57 beside CI's other leg and a SQL suite on a slower machine (the tasks
    # then wait for a core, not for the budget); what the budget guarantees is the bound
    # above, and that it does not leave the quota mostly idle (the even split of
    # rate.limit.total does, at about a quarter: the skew phases)
    used = service["requests"] / (300 * max(service["busy_s"], 1e-9))
    assert used >= 0.5, used
    coordinated(phase)


def test_a_skewed_input_uses_the_quota_where_the_static_split_leaves_it_idle(
    report: dict[str, Any],
) -> None:
    budget, static = report["skew_budget"]["service"], report["skew_static"]["service"]
    assert budget["requests"] == static["requests"] == 390
    budget_used = budget["requests"] / (300 * budget["busy_s"])
    static_used = static["requests"] / (300 * static["busy_s"])
    # 0.91 and 0.27 measured on a quiet machine: the budget follows the skew where the even
    # split leaves the quota idle (asserted as that difference, which a slower machine keeps)
    assert static_used < 0.5, static_used  # 300 keys of one task at a quarter of the rate
    assert budget_used >= max(0.6, 1.5 * static_used), (budget_used, static_used)
    assert budget["most_in_1s"] <= 300 * 1.05
    assert budget["unexplained_refusals"] == 0, budget  # as above
    assert report["skew_static"]["lookups"][0]["budget"] == ""  # no budget: today's split


def test_cost_per_minute_holds_in_every_second(report: dict[str, Any]) -> None:
    service = report["cost"]["service"]
    assert service["requests"] == 390 + 180
    # a second's share (+5%) and one request, as the service counts them: when its handlers
    # run, which beside another Spark job may be late by a share of a second (seen: 428 cost
    # units in one second for 400), so what came over 1 + late_s s may land in one second
    late = service["late_s"]
    assert service["most_cost_in_1s"] <= 400 * (1.05 + late) + 3, (service, late)
    used = (service["requests"] * 2) / (400 * service["busy_s"])  # keys cost 2 on average
    assert used >= 0.6, used  # the bound above is the guarantee; 0.9 on a quiet machine
    coordinated(report["cost"])


def test_a_redis_restart_mid_job_falls_back_and_resumes(report: dict[str, Any]) -> None:
    phase = report["restart"]
    service = phase["service"]
    assert service["requests"] == 450 + 240  # every row right (checked in the job), none lost
    assert sum(lookup["fallbacks"] for lookup in phase["lookups"]) >= 1
    # four tasks at once: at most one grant (of one lease) too many each, for a moment
    assert service["peak_in_flight"] <= 6 + 4
    assert all(lookup["grants"] > 0 for lookup in phase["lookups"])
