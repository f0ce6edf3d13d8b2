"""The bench's own child processes (nginx, the latency proxy, the peers' runs) end with the
process that started them, however it ends.

A bench killed by SIGTERM or SIGKILL runs none of its cleanup (``finally``, ``weakref.finalize``,
``atexit``), so a service it started would keep its port and its cores, and the next run would
measure beside it. On Linux a process can ask for a signal when its parent dies
(``prctl(PR_SET_PDEATHSIG)``); util-linux's ``setpriv --pdeathsig`` sets it and then runs the
command in its own place (same pid), so no Python runs between ``fork`` and ``exec``::

    subprocess.Popen(ends_with_this_process(["nginx", "-g", "daemon off;"]))

The signal follows the *thread* that started the child, not the process: a child started from
any other thread than the main one is left as given (its starter's own cleanup stays the only
one), so that a helper thread ending cannot stop a service still in use. A parent that dies
in the instant before ``setpriv`` has set the signal (before the command runs) leaves its child.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
import threading

PARENT_DEATH_SIGNAL = "TERM"
"""What the child gets when its parent dies: nginx's master stops at once, its workers with it."""


def ends_with_this_process(
    command: list[str], *, signal_name: str = PARENT_DEATH_SIGNAL
) -> list[str]:
    """``command``, run so that it gets SIG``signal_name`` when this process dies; unchanged
    where that cannot be arranged (not Linux, no ``setpriv``, not the main thread)."""
    setpriv = parent_death_launcher()
    if setpriv is None or threading.current_thread() is not threading.main_thread():
        return list(command)
    return [setpriv, "--pdeathsig", signal_name, "--", *command]


def parent_death_launcher() -> str | None:
    """util-linux's ``setpriv`` on Linux, where it can arm the signal here: tried once by
    running ``setpriv --pdeathsig TERM -- true`` (a ``setpriv`` older than 2.33 does not know
    the option; a sandbox may refuse ``prctl``). A try that fails for want of time (a busy
    machine) is not kept: the next child tries again."""
    try:
        return _tried_launcher()
    except subprocess.TimeoutExpired:
        return None


@functools.lru_cache(maxsize=1)
def _tried_launcher() -> str | None:
    """The answer of one try, kept (a try that times out raises: not kept)."""
    setpriv = shutil.which("setpriv") if sys.platform.startswith("linux") else None
    if setpriv is None:
        return None
    try:
        tried = subprocess.run(
            [setpriv, "--pdeathsig", PARENT_DEATH_SIGNAL, "--", "true"],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise  # unknown yet: not kept (a SubprocessError, so before the line below)
    except (OSError, subprocess.SubprocessError):
        return None
    return setpriv if tried.returncode == 0 else None
