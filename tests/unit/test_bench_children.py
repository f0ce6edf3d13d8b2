"""The bench's child processes end with the process that started them, even one killed by
SIGKILL (which runs none of its cleanup): a plain child, and nginx with its workers."""

from __future__ import annotations

import functools
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from lookup_source.bench import children
from lookup_source.bench.children import ends_with_this_process, parent_death_launcher
from lookup_source.bench.native_site import native_service_available
from tests.helpers import waited_for

needs_launcher = pytest.mark.skipif(
    parent_death_launcher() is None, reason="no setpriv with --pdeathsig (Linux, util-linux 2.33+)"
)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for a parent that does not reap it has ended)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def ended_within(pids: list[int], seconds: float) -> list[int]:
    """Those of ``pids`` still running after ``seconds``."""
    waited_for(lambda: not any(alive(pid) for pid in pids), seconds, every_s=0.05)
    return [pid for pid in pids if alive(pid)]


def killed_parent(script: str, temporary: str) -> list[int]:
    """Run ``script`` in a Python process (its temporary files in ``temporary``) that prints
    the pids it wants watched on one line, then SIGKILL it; the pids."""
    parent = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": temporary},
    )
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline()
        pids = [int(word) for word in line.split()]
        assert pids, f"the parent said {line!r}"
        assert all(alive(pid) for pid in pids)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
    return pids


def test_the_command_is_run_by_the_launcher_only_from_the_main_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(children, "parent_death_launcher", lambda: "/bin/setpriv")
    command = ["nginx", "-g", "daemon off;"]
    assert ends_with_this_process(command) == [
        "/bin/setpriv",
        "--pdeathsig",
        "TERM",
        "--",
        "nginx",
        "-g",
        "daemon off;",
    ]
    assert ends_with_this_process(command, signal_name="KILL")[2] == "KILL"
    from_a_thread: list[list[str]] = []
    helper = threading.Thread(target=lambda: from_a_thread.append(ends_with_this_process(command)))
    helper.start()
    helper.join()
    assert from_a_thread == [command]  # its signal would come when that thread ends
    monkeypatch.setattr(children, "parent_death_launcher", lambda: None)
    assert ends_with_this_process(command) == command


def fake_setpriv(tmp_path: pathlib.Path, body: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A ``setpriv`` of ``body`` (a shell script) found first, on Linux, none tried yet."""
    path = str(tmp_path / "setpriv")
    with open(path, "w", encoding="ascii") as handle:
        handle.write("#!/bin/sh\n" + body)
    os.chmod(path, 0o755)
    monkeypatch.setattr(children.shutil, "which", lambda name: path)
    monkeypatch.setattr(children.sys, "platform", "linux")
    # a cache of its own for the test, the module's own (the real setpriv's) back after it
    fresh = functools.lru_cache(maxsize=1)(children._tried_launcher.__wrapped__)
    monkeypatch.setattr(children, "_tried_launcher", fresh)
    return path


def test_a_launcher_without_pdeathsig_is_not_used(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    # util-linux before 2.33: the option is unknown, it says so and fails
    fake_setpriv(
        tmp_path, "echo \"setpriv: unrecognized option '--pdeathsig'\" >&2\nexit 1\n", monkeypatch
    )
    assert parent_death_launcher() is None
    assert ends_with_this_process(["nginx"]) == ["nginx"]


def test_a_launcher_that_cannot_arm_the_signal_is_not_used(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    # it knows the option, but the sandbox refuses prctl: its help alone would have said yes
    fake_setpriv(
        tmp_path,
        'case "$1" in --help) echo " --pdeathsig keep|clear|<signal>";; '
        '*) echo "setpriv: set parent death signal failed" >&2; exit 1;; esac\n',
        monkeypatch,
    )
    assert parent_death_launcher() is None


def test_a_launcher_that_works_is_tried_once_and_kept(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    calls = tmp_path / "calls"
    path = fake_setpriv(tmp_path, f'echo "$@" >> {calls}\nshift 3\nexec "$@"\n', monkeypatch)
    assert parent_death_launcher() == path
    assert parent_death_launcher() == path
    assert calls.read_text().splitlines() == ["--pdeathsig TERM -- true"]  # tried once
    assert ends_with_this_process(["nginx"]) == [path, "--pdeathsig", "TERM", "--", "nginx"]


def test_a_try_that_times_out_is_not_kept(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    path = fake_setpriv(tmp_path, "exit 0\n", monkeypatch)
    real_run = children.subprocess.run
    timeouts = [1]

    def run(*args: object, **kwargs: object) -> object:
        if timeouts:  # a busy machine: the first try does not answer in time
            timeouts.pop()
            raise children.subprocess.TimeoutExpired(cmd=path, timeout=10)
        return real_run(*args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(children.subprocess, "run", run)
    assert parent_death_launcher() is None  # not known yet: no signal for this child
    assert parent_death_launcher() == path  # asked again, and it works


@needs_launcher
def test_a_child_ends_when_its_parent_is_killed(tmp_path: pathlib.Path) -> None:
    script = (
        "import subprocess, time\n"
        "from lookup_source.bench.children import ends_with_this_process\n"
        "child = subprocess.Popen(ends_with_this_process(['sleep', '120']))\n"
        "while open(f'/proc/{child.pid}/comm').read().strip() != 'sleep':\n"
        "    time.sleep(0.01)  # setpriv has set its signal and become sleep\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    pids = killed_parent(script, str(tmp_path))
    assert ended_within(pids, 30.0) == []


@needs_launcher
@pytest.mark.skipif(native_service_available() is not None, reason="nginx with njs not installed")
def test_nginx_and_its_workers_end_when_the_bench_is_killed(tmp_path: pathlib.Path) -> None:
    script = textwrap.dedent(
        """
        import os, time
        from lookup_source.bench.native_service import NativeUserService
        service = NativeUserService(users=10, latency_ms=0, worker_processes=2).start()
        master = str(service.process.pid)
        def parent(pid):
            try:
                with open(f"/proc/{pid}/stat") as stat:
                    return stat.read().rsplit(")", 1)[1].split()[1]
            except OSError:
                return ""
        deadline = time.monotonic() + 60  # it answers before it has forked both workers
        while True:
            workers = [p for p in os.listdir("/proc") if p.isdigit() and parent(p) == master]
            if len(workers) >= 2 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        print(master, *workers, flush=True)
        time.sleep(120)
        """
    )
    pids = killed_parent(script, str(tmp_path))
    assert len(pids) == 3  # the master and its two workers
    assert ended_within(pids, 30.0) == []
