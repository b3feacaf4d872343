"""The storage layer's file-system calls, behind one seam that tests can fault.

Why it exists: what a log does when the disk fails (ENOSPC, EMFILE, EIO) must be tested, and
real failures of every kind cannot be produced on demand. Segments, indexes and checkpoints call
these functions instead of ``os`` directly; they are ``os``'s own unless a :class:`Faults` plan
is installed, which makes the chosen calls on the chosen files fail with the chosen errno -
from the n-th call on, once or always.

A broker process installs a plan from ``STROM_FAULT_FS`` at start (a test hook, like
``STROM_FAULT_TASK``): ``ERRNO:OPS[:PATH_PART[:AFTER[:COUNT]]]``, e.g.
``ENOSPC:pwrite,pwritev:/t-0/:3`` fails every data write of partition ``t-0`` after the first 3
(``COUNT`` 0 = always). Only ``open`` sees paths; writes on a descriptor match the path it was
opened with. With ``STROM_FAULT_FS_WHEN=<file>`` as well, the plan applies only while that file
exists, so a test can fill the disk of a running broker at the moment it chooses.
``SLOW<ms>`` in place of the errno makes the chosen calls that much slower instead of failing
them (a disk busy flushing data: ``SLOW400:fsync:/t-`` holds every fsync of topic ``t``'s
files 400 ms in the thread that makes it).
"""

from __future__ import annotations

import ctypes
import errno as errno_mod
import functools
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["ENV", "WHEN_ENV", "Faults", "fsync", "ftruncate", "install", "install_from_env", "open",
           "pwrite", "pwritev", "syncfs", "syncfs_available", "write"]

ENV = "STROM_FAULT_FS"
WHEN_ENV = "STROM_FAULT_FS_WHEN"

Buffer = bytes | bytearray | memoryview


@dataclass
class Faults:
    """Fail ``ops`` on files whose path contains ``path_part`` with ``errno``."""

    errno: int
    ops: frozenset[str]
    path_part: str = ""
    after: int = 0
    """Calls that succeed before the first failure."""
    count: int = 0
    """Failures before the fault clears (0: never clears)."""
    calls: int = 0
    failed: int = 0
    when: str = ""
    """If set, the plan applies only while a file at this path exists."""
    delay_ms: int = 0
    """If set, a matching call sleeps this long and then runs instead of failing."""

    @classmethod
    def parse(cls, text: str) -> Faults:
        parts = text.split(":")
        if len(parts) < 2:
            raise ValueError(f"{ENV}={text!r}: expected ERRNO:OPS[:PATH_PART[:AFTER[:COUNT]]]")
        slow = re.fullmatch(r"SLOW(\d+)", parts[0])
        code = 0 if slow else getattr(errno_mod, parts[0], None)
        if not isinstance(code, int):
            raise ValueError(f"{ENV}={text!r}: {parts[0]!r} is neither an errno name such as "
                             f"ENOSPC nor SLOW<ms>")
        return cls(code, frozenset(parts[1].split(",")), parts[2] if len(parts) > 2 else "",
                   int(parts[3]) if len(parts) > 3 and parts[3] else 0,
                   int(parts[4]) if len(parts) > 4 and parts[4] else 0,
                   delay_ms=int(slow.group(1)) if slow else 0)

    def check(self, op: str, path: str) -> None:
        if op not in self.ops or self.path_part not in path:
            return
        if self.when and not os.path.exists(self.when):
            return
        if self.count and self.failed >= self.count:
            return
        self.calls += 1
        if self.calls <= self.after:
            return
        self.failed += 1
        if self.delay_ms:
            time.sleep(self.delay_ms / 1000)
            return
        raise OSError(self.errno, f"{os.strerror(self.errno)} (injected by {ENV})", path)



_faults: Faults | None = None
_paths: dict[int, str] = {}
"""The path each descriptor was opened with (a reused number is overwritten at its open)."""


def install(faults: Faults | None) -> None:
    """Make every later call go through ``faults`` (None: plain ``os`` again)."""
    global _faults
    _faults = faults


def install_from_env() -> Faults | None:
    text = os.environ.get(ENV, "")
    faults = Faults.parse(text) if text else None
    if faults is not None:
        faults.when = os.environ.get(WHEN_ENV, "")
    install(faults)
    return _faults


def open(path: str | os.PathLike[str], flags: int, mode: int = 0o777) -> int:
    if _faults is not None:
        _faults.check("open", os.fspath(path))
    fd = os.open(path, flags, mode)
    _paths[fd] = os.fspath(path)
    return fd


def _check(op: str, fd: int) -> None:
    if _faults is not None:
        _faults.check(op, _paths.get(fd, ""))


def pwrite(fd: int, data: Buffer, position: int) -> int:
    _check("pwrite", fd)
    return os.pwrite(fd, data, position)


def pwritev(fd: int, buffers: Sequence[Buffer], position: int) -> int:
    _check("pwritev", fd)
    return os.pwritev(fd, buffers, position)


def write(fd: int, data: Buffer) -> int:
    _check("write", fd)
    return os.write(fd, data)


def fsync(fd: int) -> None:
    _check("fsync", fd)
    os.fsync(fd)


def ftruncate(fd: int, length: int) -> None:
    _check("ftruncate", fd)
    os.ftruncate(fd, length)


@functools.cache
def _libc_syncfs() -> Callable[[int], int] | None:
    """Linux's ``syncfs(2)`` when it reports write-back errors (Linux 5.8+; before, it returned
    0 whatever happened, so a failed write could not be told from a durable one)."""
    if os.uname().sysname != "Linux":
        return None
    match = re.match(r"(\d+)\.(\d+)", os.uname().release)
    if match is None or (int(match.group(1)), int(match.group(2))) < (5, 8):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    call: Callable[[int], int] = fn
    return call


def syncfs_available() -> bool:
    """Whether :func:`syncfs` can stand in for an fsync of every file written."""
    return _libc_syncfs() is not None


def syncfs(fd: int) -> None:
    """Make every file of the file system holding ``fd`` durable (``syncfs(2)``), as one
    ``fsync`` per file would, and raise OSError if a write-back on it failed since ``fd`` was
    opened. Open ``fd`` (a directory is fine) before writing what it must cover."""
    _check("syncfs", fd)
    fn = _libc_syncfs()
    if fn is None:
        raise OSError(errno_mod.ENOSYS, "syncfs is not available here")
    if fn(fd) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), _paths.get(fd, ""))
