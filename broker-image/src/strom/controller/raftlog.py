"""The durable Raft log and hard state (term, vote) behind one small interface.

Why it exists: Raft's safety rests on what a node promised before it crashed - its vote and the
entries it acknowledged - so ``RaftNode`` emits ``Persist`` actions and this module makes them
durable. ``persist(log, action)`` carries one out in the order the action defines. The same
interface has an in-memory implementation for the simulation tests, where a "crash" keeps exactly
what was persisted.

On disk (one directory):

- ``state``: term and vote, written atomically (tmp file, fsync, rename, fsync of the directory).
- ``snapshot``: the latest state machine snapshot with its index and term, written atomically.
- ``log``: an append-only file of records ``u32 length | u32 crc32c | u64 term | u64 index |
  command``, where the CRC-32C covers term, index and command and ``length`` counts the bytes after
  the CRC. Appends are fsync'd before returning. Truncating a conflicting suffix cuts the file at
  the first dropped record and fsyncs. Dropping a compacted prefix rewrites the (small) file
atomically.

Recovery reads records until the first short, corrupt or non-consecutive one and cuts the file
there (a torn write from a crash mid-append is always at the tail, since nothing is acknowledged
before its fsync). Entries covered by the snapshot are dropped at load. If the process dies
between writing a snapshot and rewriting the log, the old log may still hold a suffix that
conflicts with the snapshot's history; that is safe because it is uncommitted and the leader's
consistency check replaces it.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import crc32c

from strom.controller.messages import LogEntry
from strom.controller.raft import EMPTY_SNAPSHOT, Persist, PersistentState, Snapshot
from strom.protocol.errors import ErrorCode, StromError
from strom.storage import fileops
from strom.supervision import FatalError

__all__ = ["DiskRaftLog", "MemoryRaftLog", "MetadataLogError", "RaftLog", "persist"]


class MetadataLogError(FatalError, StromError):
    """The metadata log's directory failed I/O (disk full, read-only, EIO).

    Nothing can be promised to the quorum once a vote or an entry cannot be made durable, so
    the broker stops - as Kafka's broker halts when its metadata log directory fails - with this
    one-line message (no traceback) and a non-zero exit status; its partitions' leadership moves
    to the other brokers, which fence it."""

    def __init__(self, directory: Path, exc: OSError) -> None:
        reason = exc.strerror or str(exc)
        where = f" ({exc.filename})" if exc.filename else ""
        super().__init__(
            ErrorCode.KAFKA_STORAGE_ERROR,
            f"the metadata log directory {directory} failed: {reason}{where}; the broker stops, "
            f"as Kafka does when its metadata log directory fails: free space or repair the "
            f"disk of the first log.dirs entry, then start the broker again")
        self.errno = exc.errno


@contextlib.contextmanager
def _io(directory: Path) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        raise MetadataLogError(directory, exc) from exc

_RECORD_HEAD = struct.Struct(">II")  # length of the rest, crc32c of the body
_BODY_HEAD = struct.Struct(">QQ")  # term, index
_STATE = struct.Struct(">IQq")  # crc of the rest, term, voted_for (-1 for none)
_SNAP_HEAD = struct.Struct(">IQQQ")  # crc of the rest, index, term, data length


class RaftLog(Protocol):
    def load(self) -> PersistentState:
        """Everything persisted so far; called once at start."""
        ...

    def save_hard_state(self, term: int, voted_for: int | None) -> None: ...

    def save_snapshot(self, snapshot: Snapshot) -> None:
        """Durably store the snapshot and drop the log entries up to its index."""
        ...

    def truncate_suffix(self, from_index: int) -> None:
        """Drop the entries at ``from_index`` and after."""
        ...

    def append(self, entries: tuple[LogEntry, ...]) -> None:
        """Durably append entries following the last one."""
        ...


def persist(
    log: RaftLog, action: Persist, last_hard_state: tuple[int, int | None] | None = None
) -> None:
    """Carry out a ``Persist`` action: hard state, snapshot, truncation, then entries.

    ``last_hard_state`` (the previously saved term and vote) lets the caller skip rewriting an
    unchanged hard state.
    """
    if last_hard_state != (action.term, action.voted_for):
        log.save_hard_state(action.term, action.voted_for)
    if action.snapshot is not None:
        log.save_snapshot(action.snapshot)
    if action.truncate_from is not None:
        log.truncate_suffix(action.truncate_from)
    if action.entries:
        log.append(action.entries)


class MemoryRaftLog:
    """The in-memory ``RaftLog``: what a simulated node keeps across a simulated crash."""

    def __init__(self) -> None:
        self.term = 0
        self.voted_for: int | None = None
        self.snapshot = EMPTY_SNAPSHOT
        self.entries: list[LogEntry] = []

    def load(self) -> PersistentState:
        return PersistentState(self.term, self.voted_for, self.snapshot, tuple(self.entries))

    def save_hard_state(self, term: int, voted_for: int | None) -> None:
        self.term, self.voted_for = term, voted_for

    def save_snapshot(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.entries = [e for e in self.entries if e.index > snapshot.index]

    def truncate_suffix(self, from_index: int) -> None:
        self.entries = [e for e in self.entries if e.index < from_index]

    def append(self, entries: tuple[LogEntry, ...]) -> None:
        expected = self.entries[-1].index + 1 if self.entries else self.snapshot.index + 1
        if entries[0].index != expected:
            raise ValueError(f"append at {entries[0].index}, log expects {expected}")
        self.entries.extend(entries)


def _fsync_dir(path: Path) -> None:
    fd = fileops.open(path, os.O_RDONLY)
    try:
        fileops.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[fileops.write(fd, view):]


def _write_file(path: Path, data: bytes, flags: int) -> None:
    """Write ``data`` to ``path`` (created, ``flags`` added) and fsync it, through the storage
    file-system seam (so tests can fail the metadata log's disk as they fail a partition's)."""
    fd = fileops.open(path, os.O_WRONLY | os.O_CREAT | flags, 0o644)
    try:
        _write_all(fd, data)
        fileops.fsync(fd)
    finally:
        os.close(fd)


def _truncate(path: Path, length: int) -> None:
    fd = fileops.open(path, os.O_WRONLY)
    try:
        fileops.ftruncate(fd, length)
        fileops.fsync(fd)
    finally:
        os.close(fd)


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    _write_file(tmp, data, os.O_TRUNC)
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def encode_record(entry: LogEntry) -> bytes:
    body = _BODY_HEAD.pack(entry.term, entry.index) + entry.command
    return _RECORD_HEAD.pack(len(body), crc32c.crc32c(body)) + body


def decode_records(data: bytes) -> tuple[list[LogEntry], list[int]]:
    """The valid prefix of a log file: its entries and each one's byte offset, plus the end."""
    entries: list[LogEntry] = []
    offsets: list[int] = []
    pos = 0
    while pos + _RECORD_HEAD.size <= len(data):
        length, crc = _RECORD_HEAD.unpack_from(data, pos)
        start = pos + _RECORD_HEAD.size
        end = start + length
        if length < _BODY_HEAD.size or end > len(data):
            break
        body = data[start:end]
        if crc32c.crc32c(body) != crc:
            break
        term, index = _BODY_HEAD.unpack_from(body)
        if entries and index != entries[-1].index + 1:
            break
        entries.append(LogEntry(term, index, bytes(body[_BODY_HEAD.size :])))
        offsets.append(pos)
        pos = end
    offsets.append(pos)
    return entries, offsets


class DiskRaftLog:
    """The ``RaftLog`` in a directory; see the module docstring for the layout."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.dir = Path(directory)
        with _io(self.dir):
            self.dir.mkdir(parents=True, exist_ok=True)
        self._state_path = self.dir / "state"
        self._snap_path = self.dir / "snapshot"
        self._log_path = self.dir / "log"
        self._snapshot = EMPTY_SNAPSHOT
        self._entries: list[LogEntry] = []  # what the log file holds, in order
        self._offsets: list[int] = [0]  # byte offset of each entry, then the end of the file
        self._loaded = False

    # -- loading ---------------------------------------------------------------------------

    def load(self) -> PersistentState:
        with _io(self.dir):
            return self._load()

    def _load(self) -> PersistentState:
        term, voted_for = self._load_state()
        self._snapshot = self._load_snapshot()
        data = self._log_path.read_bytes() if self._log_path.exists() else b""
        entries, offsets = decode_records(data)
        if offsets[-1] != len(data):  # a torn or corrupt tail: cut it off
            _truncate(self._log_path, offsets[-1])
        self._entries, self._offsets = entries, offsets
        self._loaded = True
        kept = tuple(e for e in entries if e.index > self._snapshot.index)
        if kept and kept[0].index != self._snapshot.index + 1:
            kept = ()  # a gap after the snapshot: nothing after it can be used
        if len(kept) != len(entries):
            self._rewrite(kept)  # the snapshot was saved but the log not yet compacted
        return PersistentState(term, voted_for, self._snapshot, kept)

    def _load_state(self) -> tuple[int, int | None]:
        if not self._state_path.exists():
            return 0, None
        raw = self._state_path.read_bytes()
        if len(raw) != _STATE.size:
            raise ValueError(f"{self._state_path}: {len(raw)} bytes, expected {_STATE.size}")
        crc, term, vote = _STATE.unpack(raw)
        if crc != crc32c.crc32c(raw[4:]):
            raise ValueError(f"{self._state_path}: CRC mismatch (the hard state is corrupt)")
        return term, (None if vote < 0 else vote)

    def _load_snapshot(self) -> Snapshot:
        if not self._snap_path.exists():
            return EMPTY_SNAPSHOT
        raw = self._snap_path.read_bytes()
        if len(raw) < _SNAP_HEAD.size:
            raise ValueError(f"{self._snap_path}: truncated snapshot header")
        crc, index, term, length = _SNAP_HEAD.unpack_from(raw)
        if len(raw) != _SNAP_HEAD.size + length or crc != crc32c.crc32c(raw[4:]):
            raise ValueError(f"{self._snap_path}: corrupt snapshot (length or CRC mismatch)")
        return Snapshot(index, term, bytes(raw[_SNAP_HEAD.size :]))

    # -- writing ---------------------------------------------------------------------------

    def _check_loaded(self) -> None:
        if not self._loaded:
            raise RuntimeError("DiskRaftLog.load() must be called before writing")

    def save_hard_state(self, term: int, voted_for: int | None) -> None:
        rest = _STATE.pack(0, term, -1 if voted_for is None else voted_for)[4:]
        with _io(self.dir):
            _write_atomically(self._state_path, struct.pack(">I", crc32c.crc32c(rest)) + rest)

    def save_snapshot(self, snapshot: Snapshot) -> None:
        self._check_loaded()
        rest = _SNAP_HEAD.pack(0, snapshot.index, snapshot.term, len(snapshot.data))[4:]
        rest += snapshot.data
        with _io(self.dir):
            _write_atomically(self._snap_path, struct.pack(">I", crc32c.crc32c(rest)) + rest)
            self._snapshot = snapshot
            self._rewrite(tuple(e for e in self._entries if e.index > snapshot.index))

    def _rewrite(self, entries: tuple[LogEntry, ...]) -> None:
        records = [encode_record(e) for e in entries]
        _write_atomically(self._log_path, b"".join(records))
        self._entries = list(entries)
        self._offsets = [0]
        for r in records:
            self._offsets.append(self._offsets[-1] + len(r))

    def truncate_suffix(self, from_index: int) -> None:
        self._check_loaded()
        if not self._entries or from_index > self._entries[-1].index:
            return
        k = max(0, from_index - self._entries[0].index)
        with _io(self.dir):
            _truncate(self._log_path, self._offsets[k])
        del self._entries[k:]
        del self._offsets[k + 1 :]

    def append(self, entries: tuple[LogEntry, ...]) -> None:
        self._check_loaded()
        if not entries:
            return
        expected = self._entries[-1].index + 1 if self._entries else self._snapshot.index + 1
        if entries[0].index != expected:
            raise ValueError(f"append at {entries[0].index}, log expects {expected}")
        records = [encode_record(e) for e in entries]
        with _io(self.dir):
            try:
                _write_file(self._log_path, b"".join(records), os.O_APPEND)
            except OSError:  # leave no partial record behind (recovery would cut it anyway)
                with contextlib.suppress(OSError):
                    _truncate(self._log_path, self._offsets[-1])
                raise
        for e, r in zip(entries, records, strict=True):
            self._entries.append(e)
            self._offsets.append(self._offsets[-1] + len(r))
