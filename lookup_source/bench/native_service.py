"""The bench's user service in nginx: the same answers as
:class:`lookup_source.service.UserService`, at a fraction of its CPU per request, so that a
scenario's ratios are not flattened by the service's own Python on the same cores (issue 61,
item 3). GETs are answered by nginx's own directives where its echo module is installed
(:mod:`.native_gets`: about nginx's floor, 18 to 20 core-µs a GET against 16 to 17 for a bare
``return`` on a 2-core machine), else by its JavaScript module (njs: about 1.5x that); batch
POSTs by njs::

    with NativeUserService(users=10_000, latency_ms=5) as service:
        service.url              # http://127.0.0.1:PORT/users/{key}
        service.request_count()  # how many lookups it has answered
        service.distinct_keys()  # how many distinct keys were asked (GET)
        service.peak_in_flight() # the most requests it held at once

It writes an ``nginx.conf`` and a ``users.js`` into a fresh temporary directory, starts
``nginx -p DIR -c DIR/nginx.conf -g 'daemon off;'`` on a free loopback port, and removes the
directory when it stops; nginx also stops when the process that started it dies, by SIGKILL
too (:mod:`.children`). Every body is byte for byte ``json.dumps(user_record(id))``: the
record's fields after ``name`` repeat with the id modulo :data:`PERIOD`, and their JSON text is
generated here from :func:`~lookup_source.service.user_record` itself (checked on a sample of
ids at each start, so the two cannot drift apart). Its bookkeeping is read from nginx's access
log, on demand.

Differences from the Python service: a GET's key is an integer when it is ASCII digits (leading
zeros allowed) where nginx's directives answer, ``[+-]?digits`` (underscores between digits
allowed, spaces around it stripped) where njs does, so other spellings Python's ``int()`` takes
(a sign, spaces, non-ASCII digits) are 404 here; a method other than GET or HEAD is a 405; a
batch body that is not JSON is a 400 (a 500
there), a batch key that is a non-integer number is skipped. None of these happen in the bench.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import weakref
from array import array
from bisect import bisect_right
from types import TracebackType
from typing import TypeVar

from lookup_source.bench.native_gets import EchoGets
from lookup_source.bench.native_site import (
    BATCH_PATH,
    PREFIX,
    NativeServiceUnavailable,
    check_records,
    checked_gets,
    chosen_gets,
    native_service_available,
    nginx_binary,
    nginx_command,
    nginx_conf,
    nginx_version_text,
    njs_module,
    users_js,
)

ServiceT = TypeVar("ServiceT", bound="NativeUserService")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _kill_group(process: subprocess.Popen[bytes], directory: str | None) -> None:
    """The last resort (also at interpreter exit): nginx's whole process group killed, its
    directory removed."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)  # the workers too, whatever the master did
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(5)
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)


def most_at_once(starts: list[int], ends: list[int]) -> int:
    """The most intervals open at once, of those starting at ``starts`` and ending at
    ``ends`` (each sorted; one ending when another starts does not overlap it)."""
    peak = ended = 0
    for started, start in enumerate(starts, 1):
        ended = bisect_right(ends, start, lo=ended)
        peak = max(peak, started - ended)
    return peak


# -- the service ----------------------------------------------------------------------------


class NativeUserService:
    """User profiles ``0 .. users-1`` at ``GET /users/{id}`` and ``POST /users/batch``,
    answered by nginx after ``latency_ms``; a context manager, like
    :class:`~lookup_source.service.UserService`."""

    def __init__(
        self,
        *,
        users: int = 10_000,
        latency_ms: float = 5.0,
        port: int = 0,
        worker_processes: int = 1,
        worker_connections: int = 4096,
        log_flush_ms: int = 50,
        start_timeout_s: float = 15.0,
        stop_timeout_s: float = 10.0,
        gets: str = "auto",
    ) -> None:
        self.gets = checked_gets(gets)
        """What answers GETs: ``directives`` (nginx's, echo module), ``njs``, or ``auto``."""
        self.gets_by = ""
        """Which of the two answered them."""
        self._echo: EchoGets | None = None
        self.users = users
        self.latency_s = latency_ms / 1000.0
        self.latency_ms = latency_ms
        self.host = "127.0.0.1"
        self.port = port
        self._requested_port = port
        self.worker_processes = worker_processes
        self.worker_connections = worker_connections
        self.log_flush_ms = log_flush_ms
        """Log lines are buffered and written at least this often (0: each at once)."""
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.directory: str | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize[..., NativeUserService] | None = None
        self._lock = threading.Lock()
        self._offset = 0
        self._requests = 0
        self._keys_served = 0
        self._asked: set[str] = set()
        self._connections: set[str] = set()
        self._starts = array("q")
        self._ends = array("q")

    # -- the interface of UserService ------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base_url}{PREFIX}{{key}}"

    @property
    def batch_url(self) -> str:
        return f"{self.base_url}{BATCH_PATH}"

    def request_count(self) -> int:
        """The requests answered so far (GET and batch POST), from the access log."""
        self._read_log()
        return self._requests

    @property
    def requests(self) -> int:
        return self.request_count()

    @property
    def keys_served(self) -> int:
        """Keys asked so far: one per GET, a batch's length per batch POST."""
        self._read_log()
        return self._keys_served

    @property
    def connections(self) -> int:
        """The client connections that have sent a request so far."""
        self._read_log()
        return len(self._connections)

    def forget_asked(self) -> None:
        """Start counting distinct keys afresh."""
        self._read_log()
        with self._lock:
            self._asked.clear()

    # -- its own bookkeeping -----------------------------------------------------------------

    def distinct_keys(self) -> int:
        """The distinct keys asked by GET so far (as written in the path)."""
        self._read_log()
        return len(self._asked)

    def keys_asked(self) -> frozenset[str]:
        self._read_log()
        with self._lock:
            return frozenset(self._asked)

    def peak_in_flight(self) -> int:
        """The most requests held at once so far: each from its start (``$msec`` less
        ``$request_time``) to its end (``$msec``), to the millisecond (a request lasts at
        least the millisecond it started in; one ending when another starts does not overlap
        it)."""
        self._read_log()
        with self._lock:
            return most_at_once(sorted(self._starts), sorted(self._ends))

    # -- start and stop ----------------------------------------------------------------------

    def start(self: ServiceT) -> ServiceT:
        why = native_service_available()
        nginx = nginx_binary()
        if why is not None or nginx is None:
            raise NativeServiceUnavailable(why or "nginx is not installed")
        module = njs_module(nginx)[0]
        check_records(self.users)
        self._echo = chosen_gets(self.gets, self.users, self.latency_ms)
        self.gets_by = "njs" if self._echo is None else "directives"
        directory = tempfile.mkdtemp(prefix="asynclookup-nginx-")
        self.directory = directory
        try:
            with open(os.path.join(directory, "users.js"), "w", encoding="utf-8") as handle:
                handle.write(users_js(self.users, self.latency_ms))
            for attempt in range(5):
                port = self._requested_port or _free_port()
                if self._launch(nginx, module, port):
                    self.port = port
                    return self
                in_use = "Address already in use" in self._error_text()
                if self._requested_port or not in_use or attempt == 4:
                    raise RuntimeError(f"nginx did not start: {self._error_text()[-2000:]}")
        except BaseException:
            self._cleanup()
            raise
        raise AssertionError("unreachable")

    def _launch(self, nginx: str, module: str | None, port: int) -> bool:
        """Start nginx on ``port``; False when it exits or never answers."""
        directory = self.directory
        assert directory is not None
        conf = os.path.join(directory, "nginx.conf")
        with open(conf, "w", encoding="utf-8") as handle:
            handle.write(
                nginx_conf(
                    directory,
                    port,
                    module,
                    worker_processes=self.worker_processes,
                    worker_connections=self.worker_connections,
                    log_flush_ms=self.log_flush_ms,
                    version_text=nginx_version_text(nginx),
                    gets=self._echo,
                )
            )
        for name in ("error.log", "stderr.log", "nginx.pid"):
            if os.path.exists(os.path.join(directory, name)):
                os.unlink(os.path.join(directory, name))
        with open(os.path.join(directory, "stderr.log"), "wb") as stderr:
            process = subprocess.Popen(
                nginx_command(nginx, directory, conf),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,
            )
        self.process = process
        self._finalizer = weakref.finalize(self, _kill_group, process, directory)
        pid_file = os.path.join(directory, "nginx.pid")
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if process.poll() is not None:
                self._abandon()
                return False
            if os.path.exists(pid_file):
                try:
                    with socket.create_connection((self.host, port), timeout=0.5):
                        return True
                except OSError:
                    pass
            time.sleep(0.02)
        self._stop_process()
        self._abandon()
        return False

    def _abandon(self) -> None:
        """A launch that failed: its processes killed, its finalizer dropped (the directory
        stays, for the next launch and the error's text)."""
        if self._finalizer is not None and self._finalizer.detach() is not None:
            assert self.process is not None
            _kill_group(self.process, None)
        self._finalizer = None

    def _error_text(self) -> str:
        if self.directory is None:
            return ""
        text = ""
        for name in ("stderr.log", "error.log"):
            try:
                with open(os.path.join(self.directory, name), encoding="utf-8") as handle:
                    text += handle.read()
            except OSError:
                pass
        return text.strip() or "no message"

    def _stop_process(self) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        for sig, wait in ((signal.SIGQUIT, self.stop_timeout_s), (signal.SIGTERM, 3.0)):
            try:
                process.send_signal(sig)  # graceful, then fast shutdown
                process.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue
            except ProcessLookupError:
                return

    def _cleanup(self) -> None:
        if self._finalizer is not None:
            self._finalizer()  # kills what is left of the group, removes the directory
            self._finalizer = None
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
        self.directory = None

    def stop(self) -> None:
        """Stop nginx (SIGQUIT, then SIGTERM, then SIGKILL to its group), keep its last
        counts, remove its directory."""
        if self.directory is None:
            return
        self._stop_process()
        self._read_log(wait=False)  # nginx flushed its buffer as it exited
        self._cleanup()

    def __enter__(self: ServiceT) -> ServiceT:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- the access log ----------------------------------------------------------------------

    def _read_log(self, *, wait: bool = True) -> None:
        """Take in the log lines written since the last read; while nginx runs, first let
        its buffer's flush interval pass, so that what was answered before the call is in."""
        directory = self.directory
        if directory is None:
            return
        running = self.process is not None and self.process.poll() is None
        if wait and running and self.log_flush_ms > 0:
            time.sleep(self.log_flush_ms / 1000 + 0.03)
        with self._lock:
            try:
                with open(os.path.join(directory, "access.log"), "rb") as handle:
                    handle.seek(self._offset)
                    data = handle.read()
            except OSError:
                return
            end = data.rfind(b"\n") + 1
            self._offset += end
            for line in data[:end].decode("utf-8", "replace").splitlines():
                self._take(line)

    def _take(self, line: str) -> None:
        fields = line.split(" ", 6)
        if len(fields) < 7:
            return
        msec, request_time, _status, connection, keys, method, uri = fields
        if not uri.startswith(PREFIX):
            return
        try:
            end = round(float(msec) * 1000)
            start = end - round(float(request_time) * 1000)
        except ValueError:
            return
        self._requests += 1
        self._keys_served += int(keys) if keys.isdigit() else 1
        self._connections.add(connection)
        if not (uri == BATCH_PATH and method == "POST"):
            self._asked.add(uri[len(PREFIX) :])
        self._starts.append(start)
        self._ends.append(max(end, start + 1))
