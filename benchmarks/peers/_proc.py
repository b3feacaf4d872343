"""Start and stop a peer server process; always stopped, even when a workload fails.

The launching is :mod:`strom.testing.process` (the project's one launcher); this module adds what
only the benchmarks need: finding a peer's binary and sampling a process's memory.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

from strom.testing.process import ManagedProcess, free_port

__all__ = ["RssSampler", "find_binary", "free_port", "rss_bytes", "server"]


def find_binary(name: str, extra_dirs: tuple[str, ...] = ("/usr/sbin", "/usr/bin")) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for d in extra_dirs:
        candidate = Path(d) / name
        if candidate.exists():
            return str(candidate)
    return None


@contextlib.contextmanager
def server(cmd: list[str], log: Path, ready: Callable[[], bool], timeout_s: float = 30
           ) -> Iterator[ManagedProcess]:
    """Start a peer server (:class:`strom.testing.process.ManagedProcess`: log to ``log``,
    bounded wait on ``ready`` with the log tail on failure), yield it, always stop it."""
    proc = ManagedProcess(cmd, log, name=Path(cmd[0]).name)
    proc.start()
    try:
        proc.wait_ready(ready, timeout_s)
        yield proc
    finally:
        proc.stop(timeout=10)


def rss_bytes(pid: int) -> int:
    """Resident set size of a process, from /proc (0 if gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class RssSampler:
    """Track the peak RSS of a process from a background thread (every ``interval_s``)."""

    def __init__(self, pid: int, interval_s: float = 0.05) -> None:
        import threading

        self.pid = pid
        self.interval_s = interval_s
        self.peak = rss_bytes(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.peak = max(self.peak, rss_bytes(self.pid))

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes(self.pid))
