"""Sparse per-segment indexes: offset -> file position, and timestamp -> offset.

Reads must cost O(log n) however much a partition holds, so each segment keeps Kafka's two sparse
indexes, one entry per ``index.interval.bytes`` of log:

* ``.index``: 8-byte entries (relative offset int32, file position int32), both increasing.
* ``.timeindex``: 12-byte entries (timestamp int64, relative offset int32); the timestamp is the
  largest seen so far in the segment, so the entries are monotonic and bisectable.

Both live in memory as ``array`` columns (bisect works on them directly) and are appended to their
files as they grow. The files are an optimisation only: a missing or damaged one is rebuilt from the
log, so ``load`` returns None instead of raising when a file fails its sanity checks.
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
    """An append-only file of fixed-size entries, with truncate and rewrite."""

    entry_size: int

    def __init__(self, path: Path, max_entries: int) -> None:
        self.path = path
        self.max_entries = max(1, max_entries)
        self._fd: int | None = None

    def _file(self) -> int:
        if self._fd is None:
            self._fd = fileops.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        return self._fd

    def _write(self, data: bytes) -> None:
        fileops.write(self._file(), data)

    def _truncate_file(self, entries: int) -> None:
        fileops.ftruncate(self._file(), entries * self.entry_size)

    def _rewrite(self, data: bytes) -> None:
        fd = self._file()
        fileops.ftruncate(fd, 0)
        fileops.write(fd, data)

    def flush(self) -> None:
        if self._fd is not None:
            fileops.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    @staticmethod
    def _read(path: Path, entry_size: int) -> bytes | None:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
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
        self._write(_OFFSET_ENTRY.pack(rel_offset, position))

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

    def write_all(self) -> None:
        """Rewrite the file from memory (after a rebuild)."""
        self._rewrite(b"".join(_OFFSET_ENTRY.pack(o, p)
                               for o, p in zip(self.offsets, self.positions, strict=True)))


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
        self._write(_TIME_ENTRY.pack(timestamp, rel_offset))

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

    def write_all(self) -> None:
        self._rewrite(b"".join(_TIME_ENTRY.pack(t, o)
                               for t, o in zip(self.timestamps, self.offsets, strict=True)))
