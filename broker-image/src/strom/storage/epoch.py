"""The leader-epoch cache: which leader epoch started at which offset.

Replication needs it to truncate a follower correctly after a leader change (Kafka KIP-101,
OffsetsForLeaderEpoch): the follower asks "where did my latest epoch end on your log?" and cuts its
own log there instead of trusting its high watermark. The cache is a short ordered list of
(epoch, start offset), persisted in ``leader-epoch-checkpoint`` in Kafka's text format::

    0            <- version
    2            <- entry count
    0 0          <- epoch start_offset
    3 1520
"""

from __future__ import annotations

import bisect
import itertools
import logging
from pathlib import Path

from strom.storage.checkpoint import write_atomic

log = logging.getLogger(__name__)

FILE_NAME = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    """Ordered (epoch, start_offset) entries; epochs and start offsets both strictly increase."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: list[tuple[int, int]] = []
        self.unsaved = False
        """The log's own file (``path``) is behind these entries: changed by an append since
        the last save, or read from the log directory's file of a clean stop (which a stop
        writes instead of a file per log). An append that starts a new epoch does
        not write the checkpoint; the log's next flush, roll (or close alone) does, before its
        recovery point moves past the new entry, so the own file always covers the own
        recovery point. Kafka stopped fsyncing it on the request path too
        (KAFKA-15046): two fsyncs and a file creation per partition's first write in an epoch
        stalled a broker with 1,000 partitions for seconds. An entry lost in a crash lies past
        the recovery point, where recovery rebuilds the cache from the batches."""

    @classmethod
    def load(cls, path: Path) -> LeaderEpochCache:
        cache = cls(path)
        try:
            lines = path.read_text().split("\n")
            if lines[0] != "0":
                raise ValueError("unknown version")
            count = int(lines[1])
            entries = [(int(a), int(b)) for a, b in (line.split() for line in lines[2:2 + count])]
            if len(entries) != count:
                raise ValueError("entry count mismatch")
            check_increasing(entries)
            cache._entries = entries
        except FileNotFoundError:
            pass
        except (ValueError, IndexError, OSError) as exc:
            log.warning("leader-epoch checkpoint %s is damaged (%s); rebuilding from the log",
                        path, exc)
        return cache

    @classmethod
    def of(cls, path: Path, entries: list[tuple[int, int]]) -> LeaderEpochCache:
        """A cache holding ``entries`` (read from elsewhere: the log directory's file of a
        clean stop, whose reader :func:`strom.storage.dir_checkpoint.read_epochs` checked them
        as :meth:`load` checks its own file's); ``path`` is where :meth:`save` writes it."""
        cache = cls(path)
        cache._entries = list(entries)
        return cache

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int | None:
        return self._entries[-1][0] if self._entries else None

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset`` if it is newer; True if it changed."""
        if epoch < 0:
            return False
        if self._entries:
            last_epoch, last_start = self._entries[-1]
            if epoch <= last_epoch:
                return False
            if start_offset < last_start:
                # A newer epoch cannot start before an older one: the old entries are stale.
                self._entries = [(e, o) for e, o in self._entries if o < start_offset]
        self._entries.append((epoch, start_offset))
        return True

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop entries starting at or after ``end_offset`` (the log was truncated there)."""
        kept = [(e, o) for e, o in self._entries if o < end_offset]
        changed = len(kept) != len(self._entries)
        self._entries = kept
        return changed

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log now starts at ``start_offset``: drop older entries, clamp the one covering it."""
        if not self._entries or self._entries[0][1] >= start_offset:
            return False
        idx = bisect.bisect_right([o for _, o in self._entries], start_offset) - 1
        epoch = self._entries[idx][0]
        self._entries = [(epoch, start_offset), *self._entries[idx + 1:]]
        return True

    def clear(self) -> None:
        self._entries = []

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch of the entry covering ``offset`` (the last one starting at or before it), or
        -1 when none does: Kafka's LeaderEpochFileCache.epochForOffset, which ListOffsets
        answers for the log start offset so a consumer reset there can validate it (KIP-320)."""
        i = bisect.bisect_right([o for _, o in self._entries], offset) - 1
        return self._entries[i][0] if i >= 0 else UNDEFINED_EPOCH

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's OffsetsForLeaderEpoch answer: (largest epoch <= ``epoch``, its end offset)."""
        if epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if epoch == self._entries[-1][0]:
            return epoch, log_end_offset
        epochs = [e for e, _ in self._entries]
        higher = bisect.bisect_right(epochs, epoch)
        if higher >= len(self._entries):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return epoch, self._entries[0][1]
        return self._entries[higher - 1][0], self._entries[higher][1]

    def save(self, *, sync: bool = True) -> None:
        lines = ["0", str(len(self._entries)), *(f"{e} {o}" for e, o in self._entries)]
        write_atomic(self.path, "\n".join(lines) + "\n", sync=sync)
        self.unsaved = False


def check_increasing(entries: list[tuple[int, int]]) -> None:
    """Raise ValueError unless epochs strictly increase and start offsets do not decrease."""
    for (e1, o1), (e2, o2) in itertools.pairwise(entries):
        if not (e1 < e2 and o1 <= o2):
            raise ValueError("entries are not increasing")
