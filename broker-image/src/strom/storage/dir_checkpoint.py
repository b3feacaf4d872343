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

The **leader epochs** (:data:`LEADER_EPOCHS`, issue 21 item 5): a stop writes every log's epoch
cache into one file per directory instead of a ``leader-epoch-checkpoint`` per log whose epochs
changed (a new inode each, most of what a stop of freshly written logs still cost). A log
opened **clean** (no recovery) from a marker with :data:`MARKER_TEXT` takes its epochs from
that file; if the file is missing or damaged, lacks the log, or its row was written at a log
end short of the entry's recovery point, the log is recovered from its own pair instead
(recovery point and epoch file). Every other opening reads the log's own epoch file: a
marker with :data:`MARKER_TEXT_OFFSETS` (the previous version's stop, which still wrote it)
or an empty one, and every **recovery**. The own file lags the directory's only by entries
that start in the active segment (a roll and a flush save the epochs before the recovery
point moves, and a log whose epochs came from the directory's file counts them as unsaved),
and recovery always scans the active segment from its start: so a recovered log rebuilds
what its own file lacks, from the directory's entry's recovery point or its own alike.
Markers tell the versions apart by size (one ``stat``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, TypeVar

from strom.storage.checkpoint import (
    CLEAN_SHUTDOWN,
    RECOVERY_CHECKPOINT,
    read_lines,
    read_values,
    write_atomic,
)
from strom.storage.epoch import check_increasing
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
LEADER_EPOCHS = "leader-epochs-checkpoint"
"""Strom's own fifth file: per log, the log end it was written at and its leader-epoch entries
(``topic partition end count epoch offset ...``), as its ``leader-epoch-checkpoint`` held them.
A log absent from it has its epochs in its own file (a log not read since a start that took
them from there)."""
_VERSION = "0"

MARKER_SOURCE = ".clean-shutdown-dir-checkpoints"
"""A file per log directory; a stop that writes the directory's checkpoints makes each log's
clean-shutdown marker a hard link to it (no new inode per log)."""
MARKER_TEXT = b"offsets and leader epochs in the log directory's checkpoint files\n"
"""What such a marker holds: a marker with content means "my offsets are in the directory's
files", this one "and my leader epochs"; the empty markers of per-log closes (and of older
versions) mean "in mine"."""
MARKER_TEXT_OFFSETS = b"offsets in the log directory's checkpoint files\n"
"""The previous version's marker text: offsets in the directory's files, epochs in the log's
own ``leader-epoch-checkpoint`` (a stop wrote it). Told apart from :data:`MARKER_TEXT` by its
size (one ``stat``)."""

Epochs = list[tuple[int, int]]

TopicPartition = tuple[str, int]
_V = TypeVar("_V")


def write_offsets(path: Path, offsets: Mapping[TopicPartition, int], *, sync: bool) -> None:
    """Write one Kafka-format checkpoint file atomically (temp file, fsync unless ``sync`` is
    False, rename, directory fsync): a torn file can only be the temporary one."""
    _write_rows(path, [f"{topic} {partition} {offset}"
                       for (topic, partition), offset in offsets.items()], sync=sync)


def read_offsets(path: Path) -> dict[TopicPartition, int] | None:
    """The entries of a file written by :func:`write_offsets`; None if it is missing or damaged
    (a wrong version, a count that does not match the lines, a line that does not parse)."""
    def row(fields: list[str]) -> tuple[TopicPartition, int]:
        topic, partition, offset = fields
        return (topic, int(partition)), int(offset)

    return _read_rows(path, row)


def write_epochs(path: Path, rows: Mapping[TopicPartition, tuple[int, Epochs]], *,
                 sync: bool) -> None:
    """Write :data:`LEADER_EPOCHS`: per log its end offset and its (epoch, start offset)s."""
    _write_rows(path, [" ".join([topic, str(partition), str(end), str(len(entries)),
                                 *(f"{e} {o}" for e, o in entries)])
                       for (topic, partition), (end, entries) in rows.items()], sync=sync)


def read_epochs(path: Path) -> dict[TopicPartition, tuple[int, Epochs]] | None:
    """The rows of a file written by :func:`write_epochs`; None if it is missing or damaged."""
    def row(fields: list[str]) -> tuple[TopicPartition, tuple[int, Epochs]]:
        topic, partition, end, count, *pairs = fields
        numbers = [int(n) for n in pairs]
        if len(numbers) != 2 * int(count):
            raise ValueError(f"{topic}-{partition}: entry count mismatch")
        entries = list(zip(numbers[::2], numbers[1::2], strict=True))
        check_increasing(entries)
        return (topic, int(partition)), (int(end), entries)

    return _read_rows(path, row)


def _write_rows(path: Path, rows: list[str], *, sync: bool) -> None:
    """The checkpoint format: a version line, the number of rows, the rows."""
    write_atomic(path, "\n".join([_VERSION, str(len(rows)), *rows]) + "\n", sync=sync)


def _read_rows(path: Path, row: Callable[[list[str]], tuple[TopicPartition, _V]]
               ) -> dict[TopicPartition, _V] | None:
    """The rows of a file written by :func:`_write_rows`, each parsed by ``row`` (which raises
    ValueError on a bad one); None if the file is missing or damaged."""
    lines = read_lines(path)
    if lines is None:
        return None
    try:
        if len(lines) < 2 or lines[0] != _VERSION or int(lines[1]) != len(lines) - 2:
            raise ValueError("bad header or entry count")
        return dict(row(line.split(" ")) for line in lines[2:])
    except ValueError as exc:
        log.warning("checkpoint %s is damaged (%s); ignoring it", path, exc)
        return None


@dataclass(frozen=True, slots=True)
class DirCheckpoints:
    """What one log directory's checkpoint files said at start."""

    entries: Mapping[TopicPartition, dict[str, int]] | None
    """Per log: ``recovery-point``, ``log-start-offset``, ``high-watermark`` (-1: none); None
    if a file is missing or damaged (then no entry counts, and marked logs recover)."""
    written_ns: int
    """The recovery-point file's mtime: per-log files newer than it were written after it."""
    epochs: Mapping[TopicPartition, tuple[int, Epochs]] | None = None
    """:data:`LEADER_EPOCHS`' rows (None: missing or damaged)."""

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
        return cls(entries, os.stat(log_dir / RECOVERY_POINTS).st_mtime_ns,
                   read_epochs(log_dir / LEADER_EPOCHS))

    def entry(self, tp: TopicPartition) -> dict[str, int] | None:
        return None if self.entries is None else self.entries.get(tp)

    def epochs_for(self, tp: TopicPartition, recovery_point: int) -> Epochs | None:
        """The log's epochs if its row reaches ``recovery_point`` (the entry it goes with)."""
        row = None if self.epochs is None else self.epochs.get(tp)
        return row[1] if row is not None and row[0] >= recovery_point else None


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
    epochs: Epochs | None = None
    """Its leader epochs; None: held by its own file only (a log not read since a start that
    took them from there)."""


def write_dir(log_dir: Path, logs: Iterable[LogOffsets], *, sync: bool) -> None:
    """Write the directory's files for ``logs`` (every log of the directory that is not
    offline: a file replaces the previous one whole); the epochs first (a row serves only an
    entry whose recovery point it reaches, so a stop killed halfway leaves usable pairs), the
    recovery points last."""
    rows = list(logs)
    write_epochs(log_dir / LEADER_EPOCHS, {(o.topic, o.partition): (o.recovery_point, o.epochs)
                                           for o in rows if o.epochs is not None}, sync=sync)
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


class Opening(NamedTuple):
    """What a log opens with (:func:`resolve`)."""

    values: dict[str, int] | None
    """Its offsets (None: none known, recover from offset 0)."""
    clean: bool
    """Shut down cleanly: no recovery."""
    epochs: Epochs | None
    """Its leader epochs from the directory's file; None: from its own file."""


def resolve(directory: str, tp: TopicPartition, dirs: DirCheckpoints | None) -> Opening:
    """The offsets and epochs a log opens with, and whether it was shut down cleanly (module
    docstring).

    ``dirs``: its log directory's files (None: read them here, for a log opened alone)."""
    try:
        marker_size: int | None = os.stat(os.path.join(directory, CLEAN_SHUTDOWN)).st_size
    except FileNotFoundError:
        marker_size = None
    if marker_size == 0:  # a per-log close: an older version's layout, or a log closed alone
        values = read_values(os.path.join(directory, RECOVERY_CHECKPOINT))
        return Opening(values, values is not None, None)
    if dirs is None:
        dirs = DirCheckpoints.read(Path(directory).parent)
    entry = dirs.entry(tp)
    if marker_size is not None:
        if entry is not None:
            if marker_size == len(MARKER_TEXT_OFFSETS):  # the previous version's stop
                return Opening(dict(entry), True, None)
            epochs = dirs.epochs_for(tp, entry[_KEYS[0]])
            if epochs is not None:
                return Opening(dict(entry), True, epochs)
            log.warning("%s-%d: shut down cleanly but its leader epochs are missing from the "
                        "log directory's checkpoint files; recovering it", *tp)
        else:
            log.warning("%s-%d: shut down cleanly but missing from the log directory's "
                        "checkpoint files; recovering it", *tp)
    elif entry is not None and _entry_is_current(directory, dirs.written_ns):
        return Opening(dict(entry), False, None)  # recovered: its own epochs suffice
    return Opening(read_values(os.path.join(directory, RECOVERY_CHECKPOINT)), False, None)


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
