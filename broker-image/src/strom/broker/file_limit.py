"""Raise the broker's open-file limit at start, or refuse to start with a clear reason.

A partition holding data keeps at least three files open (its active segment's log, offset
index and time index), so a broker's need grows with the partitions in its log dirs. Linux
starts processes with a soft ``RLIMIT_NOFILE`` (often 1,024) far below the hard one; without
raising it a broker with a few hundred partitions died mid-load on ``EMFILE`` and one with ~6,600
could not start again (issue 21). Kafka's guidance is to run brokers with 100,000+; here the
broker raises its soft limit to the hard one itself (any process may) and, if even the hard limit
cannot hold the estimate for what is already on disk, exits at once naming the limit and how to
raise it instead of failing on the thousandth file.

``plan_soft_limit`` is pure; ``raise_open_file_limit`` does the I/O.
"""

from __future__ import annotations

import logging
import os
import resource
from collections.abc import Iterable
from pathlib import Path

from strom.storage.manager import parse_partition_dir

log = logging.getLogger(__name__)

#: Files a partition with data keeps open at least (active segment: log, index, time index).
FILES_PER_PARTITION = 3
#: Files the broker needs besides partitions: sockets, the metadata log, snapshots, libraries.
BASE_FILES = 256


class FileLimitError(Exception):
    """The hard RLIMIT_NOFILE cannot hold what the broker needs."""


def files_needed(partitions: int) -> int:
    return BASE_FILES + FILES_PER_PARTITION * partitions


def plan_soft_limit(soft: int, hard: int, needed: int) -> int:
    """The soft limit to set: the hard one (``RLIM_INFINITY`` stays as is), never lower than
    ``soft``; raises FileLimitError when ``needed`` does not fit under ``hard``."""
    infinity = resource.RLIM_INFINITY
    if hard != infinity and needed > hard:
        raise FileLimitError(
            f"this broker needs at least {needed} open files ({FILES_PER_PARTITION} per "
            f"partition in log.dirs + {BASE_FILES}) but the hard limit RLIMIT_NOFILE is {hard}: "
            f"raise it (ulimit -Hn / -n, LimitNOFILE= in the systemd unit, the container "
            f"runtime's nofile ulimit, or nofile in /etc/security/limits.conf), or move "
            f"partitions to other brokers")
    if soft == infinity or (hard != infinity and soft >= hard):
        return soft
    return hard


def count_partitions(log_dirs: Iterable[Path]) -> int:
    """Partition directories (``topic-N``) in the log dirs; a missing dir counts none."""
    count = 0
    for directory in log_dirs:
        try:
            with os.scandir(directory) as entries:
                count += sum(1 for e in entries
                             if e.is_dir() and parse_partition_dir(e.name) is not None)
        except FileNotFoundError:
            continue
    return count


def raise_open_file_limit(log_dirs: Iterable[Path]) -> int:
    """Set the soft RLIMIT_NOFILE to the hard one; return it. Raises FileLimitError if the
    partitions already in ``log_dirs`` cannot fit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    partitions = count_partitions(log_dirs)
    target = plan_soft_limit(soft, hard, files_needed(partitions))
    if target != soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        log.info("open-file limit raised from %d to %d (%d partitions in log.dirs)", soft,
                 target, partitions)
    return target
