"""Start and stop a peer server process; always stopped, even when a workload fails."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
           ) -> Iterator[subprocess.Popen[bytes]]:
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout_s
        while not ready():
            if proc.poll() is not None:
                raise RuntimeError(f"{cmd[0]} exited with {proc.returncode}: "
                                   f"{log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{cmd[0]} not ready after {timeout_s}s")
            time.sleep(0.05)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


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
