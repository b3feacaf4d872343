"""Raise the broker's open-file limit at start, size the segment-file LRU, or refuse to start.

A broker's descriptors are its sockets, the metadata log, transient files (checkpoints,
snapshots, index writes) and its open segment files. Segment files sit in an LRU with a cap
(``log.open.segments.max``, ``strom.storage.handles``), so the need no longer grows with the
partitions hosted (issue 21: at 3 descriptors per partition a broker with ~6,600 partitions
holding data could not start again under a hard limit of 20,000). Linux starts processes with a
soft ``RLIMIT_NOFILE`` (often 1,024) far below the hard one; the broker raises its soft limit to
the hard one itself (any process may), derives the cap from it unless one is configured, and if
the hard limit cannot hold the cap plus ``BASE_FILES`` it exits at once naming the limit and the
setting instead of failing on the thousandth file.

``plan_file_limits`` is pure; ``raise_open_file_limit`` does the I/O.
"""

from __future__ import annotations

import logging
import resource

from strom.storage.handles import HANDLES, auto_cap

log = logging.getLogger(__name__)

#: Files the broker needs besides segment files: sockets, the metadata log, snapshots,
#: checkpoints and index writes (opened and closed at once), libraries.
BASE_FILES = 256


class FileLimitError(Exception):
    """The hard RLIMIT_NOFILE cannot hold what the broker needs."""


def plan_file_limits(soft: int, hard: int, segments_max: int) -> tuple[int, int]:
    """(soft limit to set, segment-file cap). The soft limit goes up to the hard one
    (``RLIM_INFINITY`` stays as is, never lower than ``soft``); ``segments_max`` 0 derives the
    cap from it. Raises FileLimitError when the cap and ``BASE_FILES`` do not fit under ``hard``."""
    infinity = resource.RLIM_INFINITY
    target = soft if soft == infinity or (hard != infinity and soft >= hard) else hard
    cap = segments_max if segments_max > 0 else auto_cap(target)
    if hard != infinity and cap + BASE_FILES > hard:
        setting = (f"log.open.segments.max={segments_max}" if segments_max > 0
                   else f"log.open.segments.max (0: derived, at least {cap})")
        raise FileLimitError(
            f"this broker needs at least {cap + BASE_FILES} open files ({setting} segment files "
            f"+ {BASE_FILES} for sockets and other files) but the hard limit RLIMIT_NOFILE is "
            f"{hard}: raise it (ulimit -Hn / -n, LimitNOFILE= in the systemd unit, the "
            f"container runtime's nofile ulimit, or nofile in /etc/security/limits.conf), or "
            f"lower log.open.segments.max")
    return target, cap


def raise_open_file_limit(segments_max: int = 0) -> tuple[int, int]:
    """Set the soft RLIMIT_NOFILE to the hard one and the segment-file LRU's cap; return both.
    Raises FileLimitError if they cannot fit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target, cap = plan_file_limits(soft, hard, segments_max)
    if target != soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        log.info("open-file limit raised from %d to %d", soft, target)
    HANDLES.cap = cap
    log.info("at most %d segment files open at once (log.open.segments.max%s)", HANDLES.cap,
             "" if segments_max > 0 else ": derived from the open-file limit")
    return target, HANDLES.cap
