"""Small durable files written atomically: the recovery checkpoint and friends.

A checkpoint that is half-written after a crash is worse than an old one, so every write goes to a
temporary file that is fsynced and then renamed over the old one (rename is atomic on POSIX), and
the directory is fsynced so the rename itself survives power loss. Readers treat a missing or
unparseable file as "no checkpoint" and fall back to the conservative choice (a full recovery scan).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

from strom.storage import fileops

log = logging.getLogger(__name__)

VERSION = "0"
RECOVERY_CHECKPOINT = "recovery-point-checkpoint"
CLEAN_SHUTDOWN = ".clean-shutdown"
TMP_SUFFIX = ".tmp"


def fsync_dir(directory: Path) -> None:
    """Make renames and unlinks inside ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fileops.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, text: str, *, sync: bool = True) -> None:
    """``sync=False``: the caller makes the whole file system durable afterwards (a broker's
    clean stop, :func:`strom.storage.fileops.syncfs`), before anything relies on the file."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = fileops.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        fileops.write(fd, text.encode())
        if sync:
            fileops.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync:
        fsync_dir(path.parent)


def write_values(path: Path, values: Mapping[str, int], *, sync: bool = True) -> None:
    """Write ``name value`` lines after a version line."""
    lines = [VERSION, *(f"{k} {v}" for k, v in values.items())]
    write_atomic(path, "\n".join(lines) + "\n", sync=sync)


def read_lines(path: Path | str) -> list[str] | None:
    """A checkpoint file's lines; None if it is missing or unreadable (logged)."""
    try:
        with open(path, encoding="utf-8") as f:  # not pathlib: read per partition at start
            return f.read().splitlines()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("cannot read checkpoint %s (%s); ignoring it", path, exc)
        return None


def read_values(path: Path | str) -> dict[str, int] | None:
    """Read a file written by ``write_values``; None if it is missing or damaged."""
    lines = read_lines(path)
    if lines is None:
        return None
    if not lines or lines[0] != VERSION:
        log.warning("checkpoint %s has an unknown version; ignoring it", path)
        return None
    values: dict[str, int] = {}
    try:
        for line in lines[1:]:
            if line.strip():
                name, value = line.split()
                values[name] = int(value)
    except ValueError:
        log.warning("checkpoint %s is damaged; ignoring it", path)
        return None
    return values
