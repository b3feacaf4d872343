"""Sparse per-segment indexes: offset -> file position, and timestamp -> offset.

Reads must cost O(log n) however much a partition holds, so each segment keeps Kafka's two sparse
indexes, one entry per ``index.interval.bytes`` of log:

* ``.index``: 8-byte entries (relative offset int32, file position int32), both increasing.
* ``.timeindex``: 12-byte entries (timestamp int64, relative offset int32); the timestamp is the
  largest seen so far in the segment, so the entries are monotonic and bisectable.

Both live in memory as ``array`` columns (bisect works on them directly); their files get the new
entries when the segment is flushed, and no descriptor stays open (Kafka memory-maps its indexes
and opens them lazily; here the entries are plain arrays, so there is nothing to map). The files
are an optimisation only: a damaged one is rebuilt from the log, so ``load`` returns None instead
of raising when a file fails its sanity checks, and a missing one loads empty (the segment is
then walked, and indexed, from its start).
"""

from __future__ import annotations

import bisect
import os
import struct
from array import array
from pathlib import Path

from strom.storage import fileops

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class _IndexFile:
    """Fixed-size entries kept in memory; the file gets them at ``flush``, holding no descriptor.

    A broker with thousands of partitions cannot keep two index descriptors per segment open
    (issue 21), so the file is opened only to write the entries appended since the last flush
    (one ``pwrite``, then ``fsync``) or to cut it, and closed again. Entries not yet flushed lie
    past the recovery point, where recovery rebuilds the index from the log anyway; a clean
    close flushes them all.
    """

    entry_size: int

    def __init__(self, path: Path, max_entries: int) -> None:
        self.path = path
        self.max_entries = max(1, max_entries)
        self._in_file = 0
        """Entries the file holds (a prefix of those in memory)."""
        self._unsynced = False
        """The file changed since its last fsync."""
        self.stale_tail = True
        """The file may hold bytes past ``_in_file`` entries (one that failed its checks): the
        next flush cuts them. False once loaded, or when the file is known not to exist."""

    def __len__(self) -> int:
        raise NotImplementedError

    def _pack(self, start: int, end: int) -> bytes:
        raise NotImplementedError

    def _truncate_file(self, entries: int) -> None:
        """Memory now holds ``entries``: cut the file if it holds more (rare: truncation)."""
        if entries < self._in_file:
            fd = fileops.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                fileops.ftruncate(fd, entries * self.entry_size)
            finally:
                os.close(fd)
            self._in_file = entries
            self._unsynced = True

    @property
    def pending(self) -> int:
        """Entries appended since the last flush."""
        return len(self) - self._in_file

    def flush(self, *, sync: bool = True) -> None:
        """Append the new entries to the file and fsync it (no-op if nothing changed);
        ``sync=False``: no fsync, the caller makes the file system durable afterwards."""
        count = len(self)
        if count == self._in_file and not self._unsynced and not self.stale_tail:
            return
        fd = fileops.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            if count > self._in_file:
                data = memoryview(self._pack(self._in_file, count))
                position = self._in_file * self.entry_size
                while len(data):
                    n = fileops.pwrite(fd, data, position)
                    data = data[n:]
                    position += n
            if self.stale_tail:
                fileops.ftruncate(fd, count * self.entry_size)
                self.stale_tail = False
            if sync:
                fileops.fsync(fd)
        finally:
            os.close(fd)
        self._in_file = count
        self._unsynced = False

    def close(self) -> None:
        """Nothing to close (no descriptor is held); kept for the segment's symmetry."""

    def delete(self) -> None:
        self._in_file = 0
        self._unsynced = False
        self.path.unlink(missing_ok=True)

    @staticmethod
    def _read(path: Path, entry_size: int) -> bytes | None:
        """The file's bytes (b"" if it does not exist: nothing was flushed yet, and recovery
        walks the segment from its start), or None if its size is not whole entries."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return b""
        if len(data) % entry_size:
            return None
        return data


class OffsetIndex(_IndexFile):
    entry_size = _OFFSET_ENTRY.size

    def __init__(self, path: Path, max_entries: int) -> None:
        super().__init__(path, max_entries)
        self.offsets = array("i")  # relative offsets
        self.positions = array("i")

    @classmethod
    def load(cls, path: Path, max_entries: int, log_size: int) -> OffsetIndex | None:
        """The index from ``path``, or None if it is missing or fails its sanity checks."""
        data = cls._read(path, cls.entry_size)
        if data is None:
            return None
        index = cls(path, max_entries)
        prev_off = prev_pos = -1
        for rel, pos in _OFFSET_ENTRY.iter_unpack(data):
            if rel <= prev_off or pos <= prev_pos or pos >= log_size:
                return None
            index.offsets.append(rel)
            index.positions.append(pos)
            prev_off, prev_pos = rel, pos
        index._in_file = len(index.offsets)
        index.stale_tail = False
        return index

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def full(self) -> bool:
        return len(self.offsets) >= self.max_entries

    def append(self, rel_offset: int, position: int) -> None:
        if self.offsets and (rel_offset <= self.offsets[-1] or position <= self.positions[-1]):
            return
        self.offsets.append(rel_offset)
        self.positions.append(position)

    def _pack(self, start: int, end: int) -> bytes:
        return b"".join(_OFFSET_ENTRY.pack(self.offsets[i], self.positions[i])
                        for i in range(start, end))

    def lookup(self, rel_offset: int) -> tuple[int, int]:
        """(relative offset, position) of the last entry at or before ``rel_offset``, else (0, 0).

        Entries are keyed by a batch's base offset, so the batch containing ``rel_offset`` starts
        at the returned position or later.
        """
        i = bisect.bisect_right(self.offsets, rel_offset) - 1
        if i < 0:
            return 0, 0
        return self.offsets[i], self.positions[i]

    def last(self) -> tuple[int, int] | None:
        return (self.offsets[-1], self.positions[-1]) if self.offsets else None

    def truncate_to_position(self, position: int) -> None:
        """Drop entries pointing at or past ``position`` (the log was cut there)."""
        keep = bisect.bisect_left(self.positions, position)
        if keep < len(self.positions):
            del self.offsets[keep:]
            del self.positions[keep:]
            self._truncate_file(keep)

    def reset(self) -> None:
        del self.offsets[:]
        del self.positions[:]
        self._truncate_file(0)



class TimeIndex(_IndexFile):
    entry_size = _TIME_ENTRY.size

    def __init__(self, path: Path, max_entries: int) -> None:
        super().__init__(path, max_entries)
        self.timestamps = array("q")
        self.offsets = array("i")  # relative base offset of the batch holding the timestamp

    @classmethod
    def load(cls, path: Path, max_entries: int, max_rel_offset: int) -> TimeIndex | None:
        data = cls._read(path, cls.entry_size)
        if data is None:
            return None
        index = cls(path, max_entries)
        prev_ts = prev_off = -1
        for ts, rel in _TIME_ENTRY.iter_unpack(data):
            if ts <= prev_ts or rel < prev_off or rel > max_rel_offset or rel < 0:
                return None
            index.timestamps.append(ts)
            index.offsets.append(rel)
            prev_ts, prev_off = ts, rel
        index._in_file = len(index.timestamps)
        index.stale_tail = False
        return index

    def __len__(self) -> int:
        return len(self.timestamps)

    @property
    def full(self) -> bool:
        return len(self.timestamps) >= self.max_entries

    def append(self, timestamp: int, rel_offset: int) -> None:
        if self.timestamps and timestamp <= self.timestamps[-1]:
            return
        self.timestamps.append(timestamp)
        self.offsets.append(rel_offset)

    def _pack(self, start: int, end: int) -> bytes:
        return b"".join(_TIME_ENTRY.pack(self.timestamps[i], self.offsets[i])
                        for i in range(start, end))

    def lookup_before(self, timestamp: int) -> int | None:
        """Relative offset of the last entry whose timestamp is < ``timestamp``, or None.

        Every record before that entry's batch has a timestamp < ``timestamp``, so a search for
        the first record with timestamp >= ``timestamp`` can start at that batch.
        """
        i = bisect.bisect_left(self.timestamps, timestamp) - 1
        return self.offsets[i] if i >= 0 else None

    def last(self) -> tuple[int, int] | None:
        return (self.timestamps[-1], self.offsets[-1]) if self.timestamps else None

    def truncate_to_offset(self, rel_offset: int) -> None:
        """Drop entries whose batch starts at or after ``rel_offset``."""
        keep = bisect.bisect_left(self.offsets, rel_offset)
        if keep < len(self.offsets):
            del self.timestamps[keep:]
            del self.offsets[keep:]
            self._truncate_file(keep)

    def reset(self) -> None:
        del self.timestamps[:]
        del self.offsets[:]
        self._truncate_file(0)

