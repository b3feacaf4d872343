"""Open segment files, at most a cap at once: an LRU of ``.log`` file descriptors.

A broker hosting thousands of partitions cannot hold a descriptor per segment: with 10,000
partitions the process would need 10,000+ open files (issue 21: a broker with ~6,600 partitions
holding data could not start again under a hard limit of 20,000, and every Linux default soft
limit is 1,024). Kafka keeps every segment's ``FileChannel`` open and asks operators for 100,000+
descriptors; Strom instead keeps the descriptors of recently used segments (active or not) in
one process-wide LRU with a cap (``log.open.segments.max``) and reopens a segment's file on its
next read or write. Indexes hold no descriptor at all (``strom.storage.index``).

Closing a descriptor loses nothing: written bytes sit in the page cache, and a later ``fsync``
on a new descriptor of the same file makes them durable (Linux reports a write-back error to
the next ``fsync`` of the file even through a descriptor opened after it, since 4.16).

The cache is process-wide because the limit is: several logs (or several in-process brokers in a
test) share one RLIMIT_NOFILE. A lock guards it, since the broker recovers logs in a worker thread.
"""

from __future__ import annotations

import resource
import threading
from collections import OrderedDict
from typing import Protocol

__all__ = ["HANDLES", "MIN_CAP", "FileHandles", "HandleOwner", "auto_cap"]

#: The smallest cap: below this a broker would reopen files on almost every request.
MIN_CAP = 16


class HandleOwner(Protocol):
    """Something whose descriptor the cache may close (a segment)."""

    def drop_fd(self) -> None:
        """Close the descriptor now; the owner reopens its file when it next needs it."""


def auto_cap(soft_limit: int) -> int:
    """The default cap for a soft RLIMIT_NOFILE: leave a quarter (at least 256) of the limit
    for sockets, the metadata log and transient files."""
    if soft_limit == resource.RLIM_INFINITY or soft_limit <= 0:
        return 1 << 20
    return max(MIN_CAP, soft_limit - max(256, soft_limit // 4))


class FileHandles:
    """LRU of owners with an open descriptor; evicts the least recently used beyond ``cap``."""

    def __init__(self, cap: int) -> None:
        self._cap = max(MIN_CAP, cap)
        self._open: OrderedDict[HandleOwner, None] = OrderedDict()
        self._lock = threading.Lock()
        self.opens = 0
        """Descriptors registered (each a file opened or reopened)."""
        self.evictions = 0

    @property
    def cap(self) -> int:
        return self._cap

    @cap.setter
    def cap(self, value: int) -> None:
        with self._lock:
            self._cap = max(MIN_CAP, value)
        self._evict()

    def __len__(self) -> int:
        return len(self._open)

    def has_room(self) -> bool:
        """Whether one more descriptor fits under the cap without closing another."""
        with self._lock:
            return len(self._open) < self._cap

    def opened(self, owner: HandleOwner) -> None:
        """``owner`` just opened its descriptor: count it, evicting others beyond the cap."""
        with self._lock:
            self._open[owner] = None
            self.opens += 1
        self._evict(keep=owner)

    def touch(self, owner: HandleOwner) -> None:
        """``owner`` used its descriptor: most recently used now."""
        with self._lock:
            if owner in self._open:
                self._open.move_to_end(owner)

    def closed(self, owner: HandleOwner) -> None:
        """``owner`` closed its descriptor itself (segment closed or deleted)."""
        with self._lock:
            self._open.pop(owner, None)

    def _evict(self, keep: HandleOwner | None = None) -> None:
        while True:
            with self._lock:
                if len(self._open) <= self._cap:
                    return
                victim = next(iter(self._open))
                if victim is keep:  # never the one being opened (cap >= MIN_CAP > 1)
                    self._open.move_to_end(victim)
                    victim = next(iter(self._open))
                del self._open[victim]
                self.evictions += 1
            victim.drop_fd()


HANDLES = FileHandles(auto_cap(resource.getrlimit(resource.RLIMIT_NOFILE)[0]))
"""The process's segment descriptors; the broker sets ``HANDLES.cap`` at start."""
