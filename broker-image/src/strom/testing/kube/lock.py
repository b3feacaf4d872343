"""The machine-wide lock on the single-node cluster (``/tmp/kubestrom.lock``).

Only one cluster can exist on a machine (fixed network namespace, addresses and directories), and
several sessions share the machine, so everything that brings it up, uses it or takes it down
holds an exclusive ``flock`` on one file for as long as it does. The same lock is taken by shell
commands (``flock -w 5400 /tmp/kubestrom.lock CMD``) and by the pytest fixture
(:mod:`strom.testing.kube.fixture`), so the two kinds of user exclude each other.

``flock(1)`` keeps its descriptor open in the command it runs (no ``-o``), and that descriptor is
inherited through ``uv run`` into pytest. A second ``open`` + ``flock`` in the same process tree
would wait for itself, so :func:`hold` first looks for an inherited descriptor on the lock file
and re-locks that one (a no-op when it already holds the lock). Waiting is bounded: past the
deadline :class:`LockBusy` names the file, the holder's PID and command line (read from
``/proc/locks``) and how long it waited.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

DEFAULT_PATH = Path(os.environ.get("STROM_KUBE_LOCK", "/tmp/kubestrom.lock"))
#: Seconds :func:`hold` waits for another holder by default (``STROM_KUBE_LOCK_WAIT``).
DEFAULT_WAIT_S = float(os.environ.get("STROM_KUBE_LOCK_WAIT", "3600"))
POLL_S = 1.0


class LockBusy(RuntimeError):
    """The lock stayed held by someone else past the wait."""


def inherited_fd(path: Path) -> int | None:
    """A descriptor of this process open on ``path`` (e.g. inherited from ``flock(1)``)."""
    target = os.path.realpath(path)
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/self/fd/{name}") == target:
                    return int(name)
    return None


def parse_holders(proc_locks: str, inode: int) -> list[int]:
    """PIDs holding a FLOCK on ``inode``, from the text of ``/proc/locks``."""
    pids = []
    for line in proc_locks.splitlines():
        fields = line.split()
        # "3: FLOCK  ADVISORY  WRITE 11173 fe:00:794735 0 EOF" (blocked waiters carry "->")
        if len(fields) < 6 or fields[1] != "FLOCK" or "->" in fields:
            continue
        with contextlib.suppress(ValueError, IndexError):
            if int(fields[5].rsplit(":", 1)[1]) == inode and int(fields[4]) > 0:
                pids.append(int(fields[4]))
    return pids


def describe_holders(path: Path) -> str:
    try:
        inode = path.stat().st_ino
        pids = parse_holders(Path("/proc/locks").read_text(), inode)
    except OSError:
        return "holder unknown"
    names = []
    for pid in pids:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            names.append(f"pid {pid}: {b' '.join(argv).decode(errors='replace').strip()[:200]}")
        except OSError:
            names.append(f"pid {pid}")
    return "; ".join(names) or "holder unknown"


def _try(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


@contextlib.contextmanager
def hold(path: Path = DEFAULT_PATH, wait_s: float = DEFAULT_WAIT_S,
         say: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold the exclusive lock on ``path`` for the ``with`` block, waiting at most ``wait_s``.

    ``say`` (a callable taking a string) is told once when the wait starts."""
    fd = inherited_fd(path)
    if fd is not None and _try(fd):
        yield  # the caller's flock(1) holds it for us (and releases it)
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        start = time.monotonic()
        if not _try(fd):
            if say is not None:
                say(f"waiting up to {wait_s:.0f} s for {path} ({describe_holders(path)})")
            if not _wait(fd, wait_s):
                raise LockBusy(
                    f"the single-node Kubernetes is in use: {path} is still locked after "
                    f"{time.monotonic() - start:.0f} s ({describe_holders(path)}); wait for "
                    f"it, or run the tests under `flock -w 5400 {path} ...`, or raise "
                    "STROM_KUBE_LOCK_WAIT")
        yield
    finally:
        os.close(fd)  # closing the only descriptor releases the lock


class _Expired(Exception):
    pass


def _expire(_signum: int, _frame: object) -> None:
    raise _Expired


def _wait(fd: int, wait_s: float) -> bool:
    """Block in ``flock`` like ``flock -w`` does, so this waiter queues in the kernel with the
    shell's waiters instead of polling behind them; the deadline is a SIGALRM timer (main
    thread, and only if no other timer runs, e.g. pytest-timeout's; else it polls)."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getitimer(signal.ITIMER_REAL)[0] > 0):
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if _try(fd):
                return True
            time.sleep(POLL_S)
        return _try(fd)
    previous = signal.signal(signal.SIGALRM, _expire)
    try:
        signal.setitimer(signal.ITIMER_REAL, max(wait_s, 0.001))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except _Expired:
            return False
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        return True
    finally:
        signal.signal(signal.SIGALRM, previous)
