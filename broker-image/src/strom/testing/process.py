"""The one way the project launches local server processes: Strom brokers for tests, benchmarks
and ``strom dev``, dedicated controllers for tests, Apache Kafka for the reference cluster, Redis
and NATS for the benchmarks.

Each launcher used to carry its own copy of the same four steps, and the copies drifted (one
waited without a deadline on a dead child, one had no log tail in its error, one never reaped).
Here they are once:

1. **start** a process in its own session (Ctrl-C in the caller's terminal does not reach it),
   stdin closed, stdout and stderr appended to a log file that starts with a banner line
   (:meth:`ManagedProcess.start`);
2. **wait for readiness** with a bounded deadline, polling a probe the caller gives; a child that
   exits meanwhile, or a deadline that passes, raises :class:`ProcessStartError` naming the
   process, the exit code, the log file and the log's last lines
   (:meth:`ManagedProcess.wait_ready`, :func:`wait_all_ready`);
3. **stop by PID**: SIGTERM, then SIGKILL after a grace period, for a child of this interpreter
   (:meth:`ManagedProcess.stop`) or for PIDs read back from a file by a later command
   (:func:`stop_pids`, which only signals a PID whose command line still names what was started,
   so a recycled PID is never hit);
4. **clean up**: :func:`temp_dir` removes its directory at exit, and every child this interpreter
   started is reaped (no zombies in a long-lived caller) and, if its :class:`ManagedProcess` is
   dropped without a stop, killed by a finalizer.

Readiness is the caller's: an HTTP ``/readyz`` for a Strom broker, ApiVersions for Kafka, a PING
for Redis. This module only knows processes, files and signals (no pytest, no Strom imports).
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

__all__ = [
    "STOP_TIMEOUT_S",
    "ManagedProcess",
    "ProcessStartError",
    "StopOutcome",
    "free_port",
    "free_ports",
    "log_tail",
    "pid_alive",
    "pid_runs",
    "started_processes",
    "starts_processes",
    "stop_pids",
    "temp_dir",
    "wait_all_ready",
]

#: Grace period between SIGTERM and SIGKILL.
STOP_TIMEOUT_S = 15.0
#: How many log lines an error carries.
TAIL_LINES = 40

StopOutcome = Literal["stopped", "killed", "not running"]

#: Children this interpreter started, by PID, so :func:`pid_alive` can reap them.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}
#: Names of every process :meth:`ManagedProcess.start` started here, in order (the pytest plugin
#: checks that a test that starts one carries the ``integration`` marker).
_STARTED: list[str] = []


def started_processes() -> tuple[str, ...]:
    """The names of the processes started so far by this interpreter, oldest first."""
    return tuple(_STARTED)


class ProcessStartError(RuntimeError):
    """A process exited during start-up or was not ready in time.

    ``str()`` is the full message (reason, then the log's last lines); :attr:`reason` and
    :attr:`last_line` are for callers that report on one line (the CLI).
    """

    def __init__(self, name: str, reason: str, log_path: Path, returncode: int | None) -> None:
        self.name = name
        self.reason = reason
        self.log_path = log_path
        self.returncode = returncode
        tail = log_tail(log_path)
        lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
        self.last_line = lines[-1] if lines else ""
        super().__init__(f"{name} {reason}\n--- last lines of {log_path}:\n{tail}")


# --- ports and directories --------------------------------------------------------------------


EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
"""The kernel's range for outgoing connections' local ports."""

TEST_PORTS_FLOOR = 20000
"""Test ports are picked at or above this (below it live well-known defaults, e.g. 9092, 19092)."""

_PICK_ATTEMPTS = 500


def port_pick_range(range_file: Path = EPHEMERAL_RANGE_FILE) -> range:
    """Ports to pick test ports from: outside the kernel's ephemeral range.

    A port picked by binding to port 0 lies in the ephemeral range, so between the pick and the
    broker's own bind any outgoing connection (another broker's, a client's) can take it as its
    local port, and the broker then fails with "address already in use" (seen in CI: a broker's
    Kafka listener, 1 run in 2,592 tests). Ports outside that range are never handed out by the
    kernel; only another test's explicit bind can take one, and the pick checks that.
    """
    try:
        low, high = (int(x) for x in range_file.read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    if low - TEST_PORTS_FLOOR >= 1000:
        return range(TEST_PORTS_FLOOR, low)
    return range(high + 1, 65536)


def _bind_outside_ephemeral(host: str, taken: set[int]) -> socket.socket:
    """A socket bound to a random port outside the ephemeral range (port 0 if none is free)."""
    ports = port_pick_range()
    for _ in range(_PICK_ATTEMPTS if len(ports) else 0):
        port = random.choice(ports)
        if port in taken:
            continue
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind((host, port))
        except OSError:
            sock.close()
            continue
        return sock
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((host, 0))
    return sock


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago, outside the kernel's ephemeral range."""
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct free ports, all held open while choosing so none is handed out twice.

    A cluster needs its ports before any node starts (each voter names the others' ports).
    """
    socks: list[socket.socket] = []
    taken: set[int] = set()
    try:
        for _ in range(count):
            sock = _bind_outside_ephemeral(host, taken)
            socks.append(sock)
            taken.add(int(sock.getsockname()[1]))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for sock in socks:
            sock.close()


F = TypeVar("F", bound=Callable[..., Any])


def starts_processes(fixture_function: F) -> F:
    """Flag a fixture function as one that starts processes: every test using it (directly or
    through other fixtures) gets the ``integration`` marker (``strom.testing.pytest_plugin``).
    Put it under ``@pytest.fixture``."""
    fixture_function.__strom_starts_processes__ = True  # type: ignore[attr-defined]
    return fixture_function


@contextlib.contextmanager
def temp_dir(prefix: str = "strom-", parent: Path | str | None = None) -> Iterator[Path]:
    """A fresh directory, removed with everything in it when the block ends (also on error).

    Stop the processes writing into it first (inside the block).
    """
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# --- logs -------------------------------------------------------------------------------------


def log_tail(path: Path | str, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of a log file (reads at most its last 64 KiB)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 65536))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return "(no log captured)"
    return "\n".join(text.splitlines()[-lines:])


# --- PIDs -------------------------------------------------------------------------------------


def _reap(pid: int) -> None:
    proc = _CHILDREN.get(pid)
    if proc is not None and proc.poll() is not None:
        _CHILDREN.pop(pid, None)


def pid_alive(pid: int | None) -> bool:
    """True if ``pid`` runs. A zombie (dead, not reaped) is not running; a child of this
    interpreter is reaped on the way."""
    if not pid or pid <= 0:
        return False
    _reap(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc (not Linux): trust kill(0)
    return stat.rpartition(")")[2].split()[0] != "Z"


def pid_runs(pid: int | None, marker: str | None) -> bool:
    """True if ``pid`` is alive and, where ``/proc`` shows it, its command line contains
    ``marker`` (``None``: any command). Guards every signal sent to a PID read from a file."""
    if not pid_alive(pid):
        return False
    if marker is None:
        return True
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return marker.encode() in cmdline


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def stop_pids(pids: Sequence[int | None], timeout: float = STOP_TIMEOUT_S, *,
              marker: str | None = None,
              on_kill: Callable[[int], None] | None = None) -> list[StopOutcome]:
    """SIGTERM every live PID at once, SIGKILL those still alive after ``timeout`` seconds.

    A PID that is not running (or whose command line lacks ``marker``) is left alone and reported
    ``"not running"``. Returns one outcome per PID, in order. ``on_kill`` is told each PID about
    to get SIGKILL. Each gets SIGCONT first, so a paused (SIGSTOP) process can exit too.
    """
    outcomes: list[StopOutcome] = ["not running"] * len(pids)
    running: dict[int, int] = {}
    for i, pid in enumerate(pids):
        if pid is not None and pid_runs(pid, marker):
            _signal(pid, signal.SIGCONT)
            _signal(pid, signal.SIGTERM)
            running[i] = pid
    deadline = time.monotonic() + timeout
    while running and time.monotonic() < deadline:
        for i, pid in list(running.items()):
            if not pid_alive(pid):
                outcomes[i] = "stopped"
                del running[i]
        if running:
            time.sleep(0.05)
    for i, pid in running.items():
        if on_kill is not None:
            on_kill(pid)
        _signal(pid, signal.SIGKILL)
        kill_deadline = time.monotonic() + 5.0
        while pid_alive(pid) and time.monotonic() < kill_deadline:
            time.sleep(0.02)
        outcomes[i] = "killed"
    return outcomes


def _kill_quietly(pid: int) -> None:
    """Finalizer of a dropped ManagedProcess: SIGCONT (if paused), then SIGKILL."""
    for sig in (signal.SIGCONT, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


# --- one process ------------------------------------------------------------------------------


class ManagedProcess:
    """One server process with its output in ``log_path``. Not started until :meth:`start`.

    ``name`` ("broker 0", "kafka node 1", "redis-server") starts every error message. With
    ``detach=True`` the process outlives a dropped object (``strom dev up`` leaves its brokers
    running; a later ``strom dev down`` stops them with :func:`stop_pids`); otherwise a finalizer
    kills it if it is dropped while running.
    """

    def __init__(self, argv: Sequence[str], log_path: Path | str, *, name: str | None = None,
                 env: Mapping[str, str] | None = None, cwd: Path | str | None = None,
                 detach: bool = False) -> None:
        if not argv:
            raise ValueError("ManagedProcess needs a command (argv is empty)")
        self.argv = [str(a) for a in argv]
        self.log_path = Path(log_path)
        self.name = name or Path(self.argv[0]).name
        self.env = dict(env or {})
        self.cwd = None if cwd is None else Path(cwd)
        self.detach = detach
        self._proc: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise RuntimeError(f"{self.name} was not started")
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        return None if self._proc is None else self._proc.poll()

    def is_alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, banner: str | None = None) -> ManagedProcess:
        """Start the process (a second start while it runs is an error); return self."""
        if self.is_alive():
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env.update(self.env)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        line = banner if banner is not None else f"--- start {stamp}: {' '.join(self.argv)}"
        with open(self.log_path, "ab") as log:
            log.write(f"{line}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                cwd=self.cwd, env=env, start_new_session=True, close_fds=True)
        _CHILDREN[self._proc.pid] = self._proc
        _STARTED.append(self.name)
        if self._finalizer is not None:
            self._finalizer.detach()
        self._finalizer = (None if self.detach
                           else weakref.finalize(self, _kill_quietly, self._proc.pid))
        return self

    def check_running(self) -> None:
        """Raise :class:`ProcessStartError` if the process has exited."""
        code = self.returncode
        if self._proc is not None and code is not None:
            raise ProcessStartError(self.name, f"exited with code {code} during start-up",
                                    self.log_path, code)

    def wait_ready(self, probe: Callable[[], bool], timeout: float, *,
                   interval: float = 0.05) -> float:
        """Poll ``probe`` until it returns True; return the seconds waited.

        Raises :class:`ProcessStartError` (with the log tail) as soon as the process exits, or
        when ``timeout`` seconds pass. A probe that raises counts as "not yet".
        """
        return wait_all_ready([self], lambda _: probe(), timeout, interval=interval)

    def log_tail(self, lines: int = TAIL_LINES) -> str:
        return log_tail(self.log_path, lines)

    def send_signal(self, sig: signal.Signals) -> None:
        if self.is_alive():
            _signal(self.pid, sig)

    def kill(self) -> None:
        """SIGKILL (no flush, no clean shutdown) and reap."""
        if self.is_alive():
            _kill_quietly(self.pid)
            assert self._proc is not None
            self._proc.wait(timeout=STOP_TIMEOUT_S)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> StopOutcome:
        """SIGTERM, wait up to ``timeout`` seconds, then SIGKILL; never raises for a dead one."""
        if not self.is_alive():
            return "not running"
        (outcome,) = stop_pids([self.pid], timeout)
        assert self._proc is not None
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=5.0)
        return outcome

    def wait_stopped(self, timeout: float) -> bool:
        """Wait for the process to exit; True if it did (or never ran)."""
        if self._proc is None:
            return True
        try:
            self._proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def __repr__(self) -> str:
        if self._proc is None:
            state = "not started"
        else:
            state = "running" if self.is_alive() else f"exited {self.returncode}"
        return f"<ManagedProcess {self.name} {state}>"


def wait_all_ready(processes: Sequence[ManagedProcess],
                   probe: Callable[[ManagedProcess], bool], timeout: float, *,
                   interval: float = 0.05,
                   progress: Callable[[ManagedProcess | None, float, int], None] | None = None,
                   ) -> float:
    """Wait until ``probe(p)`` is True for every process, within one deadline; return seconds.

    Fails fast with :class:`ProcessStartError` when any of them exits, and at the deadline names
    the first one still not ready. ``progress(p, elapsed, pending)`` is told each process as it
    becomes ready, and ``progress(None, elapsed, pending)`` about every two seconds while
    ``pending`` of them are not yet ready.
    """
    start = time.monotonic()
    deadline = start + timeout
    pending = list(processes)
    last_note = start
    while pending:
        for proc in list(pending):
            proc.check_running()
            try:
                ready = probe(proc)
            except Exception:  # a probe that fails means "not yet"
                ready = False
            if ready:
                pending.remove(proc)
                if progress is not None:
                    progress(proc, time.monotonic() - start, len(pending))
        if not pending:
            break
        now = time.monotonic()
        if now >= deadline:
            first = pending[0]
            first.check_running()
            raise ProcessStartError(first.name, f"was not ready within {timeout:.0f} s",
                                    first.log_path, None)
        if progress is not None and now - last_note >= 2:
            progress(None, now - start, len(pending))
            last_note = now
        time.sleep(min(interval, max(0.0, deadline - now)))
    return time.monotonic() - start
