"""One checkpoint file per log directory, not per log, written at a broker's clean stop (issue 21
item 5), as Kafka's ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint`` and
``replication-offset-checkpoint`` (Kafka's ``CheckpointFile`` format: a version line ``0``, the
number of entries, then ``topic partition offset`` per line).

Why: a clean stop used to write a ``recovery-point-checkpoint`` into every changed log's own
directory, a new file (tmp + rename) each, and allocating an inode costs ~0.46 ms of CPU on this
machine's ext4: 10,000 changed logs took ~25 s to stop at load 15. Three files per log
directory cost nothing per log. The per-log file stays the running broker's record (a roll, a
flush, a truncation, retention and DeleteRecords still write it, synchronously, as before), so
which of the two a log's next open trusts is decided here, by :func:`resolve`:

* a clean-shutdown marker **with content** was made by a close that wrote these files (its
  markers are hard links to :data:`MARKER_SOURCE`, which holds :data:`MARKER_TEXT`), and any
  later change of the log removed the marker first: the directory's entry is the log's state.
  If the directory's files are missing, torn or lack the log, the log is recovered (a missing
  file must never pass for a clean stop).
* an **empty** marker was made by a close that wrote the log's own checkpoint (the previous
  version's broker, a log closed alone, the per-file fallback where ``syncfs`` cannot report
  errors): the per-log file is the log's state, as before.
* **no marker** (a crash): the log is recovered from a recovery point. The directory's entry
  is used only if nothing wrote the per-log file after it (its mtime is not newer) and the log
  was not created after it (``partition.metadata``'s ctime is not newer: a topic deleted and
  created again under the same name must not inherit the old log's offsets); otherwise the
  per-log file, if any, else offset 0. Every entry's recovery point lay at durable data when
  it was written, and every later move of a log's start or truncation wrote the per-log file.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from strom.storage.checkpoint import (
    CLEAN_SHUTDOWN,
    RECOVERY_CHECKPOINT,
    read_lines,
    read_values,
    write_atomic,
)
from strom.storage.partition_metadata import PARTITION_METADATA

log = logging.getLogger(__name__)

RECOVERY_POINTS = "recovery-point-offset-checkpoint"
LOG_START_OFFSETS = "log-start-offset-checkpoint"
HIGH_WATERMARKS = "replication-offset-checkpoint"
FILES = (RECOVERY_POINTS, LOG_START_OFFSETS, HIGH_WATERMARKS)
_KEYS = ("recovery-point", "log-start-offset", "high-watermark")
"""The per-log checkpoint's names for the three files' offsets (``checkpoint.read_values``)."""
NO_PRODUCERS = "empty-producer-state-checkpoint"
"""Strom's own fourth file: the logs that had no producer state at the listed offset (their
end at the stop), for which the stop wrote no producer snapshot. A log not listed is loaded
from its newest snapshot as before; a missing file lists nothing."""
NO_PRODUCERS_AT = "no-producers-at"
"""The key of :data:`NO_PRODUCERS`'s offset in a log's values."""
_VERSION = "0"

MARKER_SOURCE = ".clean-shutdown-dir-checkpoints"
"""A file per log directory; a stop that writes the directory's checkpoints makes each log's
clean-shutdown marker a hard link to it (no new inode per log)."""
MARKER_TEXT = b"offsets in the log directory's checkpoint files\n"
"""What such a marker holds: a marker with content means "my offsets are in the directory's
files"; the empty markers of per-log closes (and of the previous version) mean "in mine"."""

TopicPartition = tuple[str, int]


def write_offsets(path: Path, offsets: Mapping[TopicPartition, int], *, sync: bool) -> None:
    """Write one Kafka-format checkpoint file atomically (temp file, fsync unless ``sync`` is
    False, rename, directory fsync): a torn file can only be the temporary one."""
    lines = [_VERSION, str(len(offsets))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in offsets.items()]
    write_atomic(path, "\n".join(lines) + "\n", sync=sync)


def read_offsets(path: Path) -> dict[TopicPartition, int] | None:
    """The entries of a file written by :func:`write_offsets`; None if it is missing or damaged
    (a wrong version, a count that does not match the lines, a line that does not parse)."""
    lines = read_lines(path)
    if lines is None:
        return None
    try:
        if len(lines) < 2 or lines[0] != _VERSION or int(lines[1]) != len(lines) - 2:
            raise ValueError("bad header or entry count")
        offsets: dict[TopicPartition, int] = {}
        for line in lines[2:]:
            topic, partition, offset = line.split(" ")
            offsets[(topic, int(partition))] = int(offset)
    except ValueError as exc:
        log.warning("checkpoint %s is damaged (%s); ignoring it", path, exc)
        return None
    return offsets


@dataclass(frozen=True, slots=True)
class DirCheckpoints:
    """What one log directory's checkpoint files said at start."""

    entries: Mapping[TopicPartition, dict[str, int]] | None
    """Per log: ``recovery-point``, ``log-start-offset``, ``high-watermark`` (-1: none); None
    if a file is missing or damaged (then no entry counts, and marked logs recover)."""
    written_ns: int
    """The recovery-point file's mtime: per-log files newer than it were written after it."""

    @classmethod
    def read(cls, log_dir: Path) -> DirCheckpoints:
        files = [read_offsets(log_dir / name) for name in FILES]
        recovery, starts, hws = files
        if recovery is None or starts is None or hws is None:
            if any(f is not None for f in files):
                log.warning("log directory %s: its checkpoint files are incomplete (%s); logs "
                            "that relied on them are recovered", log_dir,
                            ", ".join(n for n, f in zip(FILES, files, strict=True) if f is None))
            return cls(None, 0)
        free = read_offsets(log_dir / NO_PRODUCERS) or {}
        entries = {tp: {_KEYS[0]: rp, _KEYS[1]: starts.get(tp, -2), _KEYS[2]: hws.get(tp, -1),
                        NO_PRODUCERS_AT: free.get(tp, -1)}
                   for tp, rp in recovery.items()}
        entries = {tp: e for tp, e in entries.items() if e[_KEYS[1]] >= 0}
        return cls(entries, os.stat(log_dir / RECOVERY_POINTS).st_mtime_ns)

    def entry(self, tp: TopicPartition) -> dict[str, int] | None:
        return None if self.entries is None else self.entries.get(tp)


@dataclass(frozen=True, slots=True)
class LogOffsets:
    """One log's entry for the directory's files, at a clean stop."""

    topic: str
    partition: int
    recovery_point: int
    log_start_offset: int
    high_watermark: int
    """-1: not managed (the log's high watermark tracks its end)."""
    no_producers: bool
    """The log has no producer state at ``recovery_point`` (its end) and so no snapshot."""


def write_dir(log_dir: Path, logs: Iterable[LogOffsets], *, sync: bool) -> None:
    """Write the directory's three files for ``logs`` (every log of the directory that is not
    offline: a file replaces the previous one whole)."""
    rows = list(logs)
    write_offsets(log_dir / NO_PRODUCERS, {(o.topic, o.partition): o.recovery_point
                                           for o in rows if o.no_producers}, sync=sync)
    write_offsets(log_dir / LOG_START_OFFSETS,
                  {(o.topic, o.partition): o.log_start_offset for o in rows}, sync=sync)
    write_offsets(log_dir / HIGH_WATERMARKS,
                  {(o.topic, o.partition): o.high_watermark for o in rows}, sync=sync)
    write_offsets(log_dir / RECOVERY_POINTS,  # the last: its mtime dates the set (resolve)
                  {(o.topic, o.partition): o.recovery_point for o in rows}, sync=sync)


def make_marker_source(log_dir: Path) -> Path | None:
    """The file in ``log_dir`` that markers are hard-linked to, holding :data:`MARKER_TEXT`;
    None if it cannot be made (markers are then files of their own with the same text)."""
    source = log_dir / MARKER_SOURCE
    try:
        if os.stat(source).st_size == len(MARKER_TEXT):
            return source
    except FileNotFoundError:
        pass
    except OSError:
        return None
    try:
        write_atomic(source, MARKER_TEXT.decode(), sync=False)  # made durable by the stop's syncfs
    except OSError:
        return None
    return source


def resolve(directory: str, tp: TopicPartition, dirs: DirCheckpoints | None
            ) -> tuple[dict[str, int] | None, bool]:
    """The offsets a log opens with, and whether it was shut down cleanly (module docstring).

    ``dirs``: its log directory's files (None: read them here, for a log opened alone)."""
    try:
        marker_size: int | None = os.stat(os.path.join(directory, CLEAN_SHUTDOWN)).st_size
    except FileNotFoundError:
        marker_size = None
    if marker_size == 0:  # a per-log close: the previous version's layout
        values = read_values(os.path.join(directory, RECOVERY_CHECKPOINT))
        return values, values is not None
    if dirs is None:
        dirs = DirCheckpoints.read(Path(directory).parent)
    entry = dirs.entry(tp)
    if marker_size is not None:
        if entry is not None:
            return dict(entry), True
        log.warning("%s-%d: shut down cleanly but missing from the log directory's checkpoint "
                    "files; recovering it", *tp)
    elif entry is not None and _entry_is_current(directory, dirs.written_ns):
        return dict(entry), False
    return read_values(os.path.join(directory, RECOVERY_CHECKPOINT)), False


def _entry_is_current(directory: str, written_ns: int) -> bool:
    """Nothing wrote the log's own checkpoint after the directory's, and the log existed
    before it (a deleted and recreated topic's new log has a newer ``partition.metadata``)."""
    try:
        metadata = os.stat(os.path.join(directory, PARTITION_METADATA))
    except FileNotFoundError:
        return False
    if metadata.st_ctime_ns >= written_ns:  # file times tick coarsely: equal is not older
        return False
    try:
        own = os.stat(os.path.join(directory, RECOVERY_CHECKPOINT))
    except FileNotFoundError:
        return True
    return own.st_mtime_ns < written_ns
