"""One log segment: a ``.log`` file of whole RecordBatch v2 batches plus its two sparse indexes.

A partition's log is a list of segments so that retention can delete whole files and reads can
jump to the right file by base offset. A segment only ever grows at its end (appends), is cut at a
batch boundary (truncation, recovery), or is replaced whole (compaction). All file access is by
``os.pread``/``os.pwrite`` on the segment's descriptor, so a read costs one index bisect, a few
header reads and one ``pread`` of the bytes returned. The descriptor is opened on first use and
sits in the process's LRU of segment files (``strom.storage.handles``), which closes the least
recently used ones beyond its cap; the next use reopens the file.

Not thread-safe: a partition log and its segments are owned by one task.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from strom.protocol.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    OFFSETS_PREFIX,
    BatchHeader,
    compute_crc,
    offsets_prefix,
    parse_header,
)
from strom.storage import fileops
from strom.storage.config import INT32_MAX
from strom.storage.handles import HANDLES
from strom.storage.index import OffsetIndex, TimeIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
CLEANED_SUFFIX = ".cleaned"
#: Appended to the files of a segment deleted by retention until ``file.delete.delay.ms`` passed.
DELETED_SUFFIX = ".deleted"
_SCAN_CHUNK = 1 << 20
_IOV_MAX = 1024  # POSIX minimum is 16, Linux allows 1024 buffers per pwritev


def _pwritev_all(fd: int, iov: Sequence[bytes | memoryview], position: int,
                 total: int | None = None) -> None:
    """Write ``iov`` contiguously at ``position``: ``pwritev`` in groups, short writes resumed.
    ``total``, the bytes of ``iov`` if the caller knows them, spares slicing and summing when
    one group holds them all (a batch or two per partition, issue 21)."""
    whole = total is not None and len(iov) <= _IOV_MAX
    for i in range(0, len(iov), _IOV_MAX):
        group = iov if whole else iov[i:i + _IOV_MAX]
        size = total if whole and total is not None else sum(len(b) for b in group)
        written = fileops.pwritev(fd, group, position)
        if written < size:  # pragma: no cover - short writes are rare on files
            rest = memoryview(b"".join(group))[written:]
            while len(rest):
                n = fileops.pwrite(fd, rest, position + written)
                written += n
                rest = rest[n:]
        position += size
_HEADER = struct.Struct(">qiibIhiqqqhii")  # as protocol.batch; positions are file positions


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


def segment_paths(directory: Path, base_offset: int) -> tuple[Path, Path, Path]:
    name = segment_name(base_offset)
    return (directory / (name + LOG_SUFFIX), directory / (name + INDEX_SUFFIX),
            directory / (name + TIME_INDEX_SUFFIX))


@dataclass(frozen=True, slots=True)
class ScanResult:
    """Outcome of walking a segment's batches: where the valid bytes end, and why if early."""

    valid_size: int
    file_size: int
    problem: str | None
    batches: int

    @property
    def truncated_bytes(self) -> int:
        return self.file_size - self.valid_size


class LogSegment:
    """A segment file and its indexes. ``next_offset`` is one past its last batch."""

    def __init__(self, directory: Path, base_offset: int, *, index_interval_bytes: int,
                 max_index_bytes: int, created_ms: int, fd: int | None, size: int,
                 index: OffsetIndex | None, time_index: TimeIndex | None) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.log_path, index_path, time_index_path = segment_paths(directory, base_offset)
        self.index_interval_bytes = index_interval_bytes
        self.created_ms = created_ms
        self._fd = fd
        self._unborn = False
        """The ``.log`` file does not exist yet: the first use creates it."""
        if fd is not None:
            HANDLES.opened(self)
        self.size = size
        self.index_valid = index is not None and time_index is not None
        # "is None", not "or": an empty index is falsy (it has __len__)
        self.index = (index if index is not None
                      else OffsetIndex(index_path, max_index_bytes // OffsetIndex.entry_size))
        self.time_index = (time_index if time_index is not None
                           else TimeIndex(time_index_path, max_index_bytes // TimeIndex.entry_size))
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.max_timestamp_batch = base_offset  # base offset of the batch holding max_timestamp
        self.bytes_since_index = 0
        self.dirty = False  # written since the last fsync

    # ---- lifecycle -------------------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, base_offset: int, *, index_interval_bytes: int,
               max_index_bytes: int, now_ms: int, fresh: bool = False) -> LogSegment:
        """A new, empty segment. ``fresh``: no file of it can exist (a new partition's
        directory, or one recovery found without segments), so none is removed, and the
        ``.log`` file is created by the first write (or before it by :meth:`create_file`,
        which a broker calls in the background): creating 10,000 partitions spent a third of
        its file-system time creating empty segment files (issue 21)."""
        log_path, index_path, time_path = segment_paths(directory, base_offset)
        fd: int | None = None
        if not fresh:
            fd = fileops.open(log_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            index_path.unlink(missing_ok=True)
            time_path.unlink(missing_ok=True)
        entries = max_index_bytes
        index = OffsetIndex(index_path, entries // OffsetIndex.entry_size)
        time_index = TimeIndex(time_path, entries // TimeIndex.entry_size)
        index.stale_tail = time_index.stale_tail = False  # just unlinked
        segment = cls(directory, base_offset, index_interval_bytes=index_interval_bytes,
                      max_index_bytes=max_index_bytes, created_ms=now_ms, fd=fd, size=0,
                      index=index, time_index=time_index)
        segment._unborn = fresh
        return segment

    @classmethod
    def open(cls, directory: Path, base_offset: int, *, index_interval_bytes: int,
             max_index_bytes: int, now_ms: int) -> LogSegment:
        """Open an existing segment; its end and indexes are settled by ``load_tail``/``scan``."""
        log_path, index_path, time_path = segment_paths(directory, base_offset)
        size = os.stat(log_path).st_size  # the file is opened on first read or write
        index = OffsetIndex.load(index_path, max_index_bytes // OffsetIndex.entry_size, size)
        time_index = TimeIndex.load(time_path, max_index_bytes // TimeIndex.entry_size,
                                    INT32_MAX)
        return cls(directory, base_offset, index_interval_bytes=index_interval_bytes,
                   max_index_bytes=max_index_bytes, created_ms=now_ms, fd=None, size=size,
                   index=index, time_index=time_index)

    @property
    def fd(self) -> int:
        """The ``.log`` file's descriptor, (re)opened if the LRU closed it. Fetch it for each
        call: another segment's open may close it."""
        fd = self._fd
        if fd is None:
            flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if self._unborn else 0)
            fd = self._fd = fileops.open(self.log_path, flags, 0o644)
            self._unborn = False
            HANDLES.opened(self)
        else:
            HANDLES.touch(self)
        return fd

    @property
    def unborn(self) -> bool:
        """Its ``.log`` file does not exist yet (a fresh segment, never written)."""
        return self._unborn

    def create_file(self) -> None:
        """Create the ``.log`` file of an unborn segment now, empty, so that its first write
        neither creates it (~0.6 ms of CPU on this machine's ext4) nor, while the descriptor
        LRU has room, opens it: the descriptor is kept, as Kafka keeps a segment's channel
        open from its creation (an open cost ~18 us a partition inside the first Produce
        requests to a fresh 1,000-partition topic, issue 21 item 1). When the LRU is full the
        descriptor is closed again (keeping it would close a descriptor in use). A no-op for
        any other segment."""
        if self._unborn and self._fd is None:
            fd = fileops.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            self._unborn = False
            if HANDLES.has_room():
                self._fd = fd
                HANDLES.opened(self)
            else:
                os.close(fd)

    @property
    def has_fd(self) -> bool:
        return self._fd is not None

    def drop_fd(self) -> None:
        """Close the descriptor (the LRU evicts it, or the segment closes); a later use reopens
        the file. Written bytes stay in the page cache and ``dirty`` still asks for an fsync."""
        fd, self._fd = self._fd, None
        if fd is not None:
            HANDLES.closed(self)
            os.close(fd)

    def flush(self, *, sync: bool = True) -> None:
        """fsync the log and write out (and fsync) the indexes; ``sync=False`` only writes the
        indexes out, for a caller that makes the whole file system durable afterwards."""
        if self.dirty:
            if sync:
                fileops.fsync(self.fd)
            self.index.flush(sync=sync)
            self.time_index.flush(sync=sync)
            self.dirty = False

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self.drop_fd()

    def delete(self) -> None:
        self.drop_fd()
        self._unborn = False
        self.log_path.unlink(missing_ok=True)
        self.index.delete()
        self.time_index.delete()

    def retire(self) -> list[Path]:
        """Close the segment and rename its files ``*.deleted``; returns the new paths (the
        caller removes them later; a restart removes them as leftovers)."""
        self.drop_fd()
        self._unborn = False
        retired = []
        for path in (self.log_path, self.index.path, self.time_index.path):
            target = path.with_name(path.name + DELETED_SUFFIX)
            with contextlib.suppress(FileNotFoundError):
                os.replace(path, target)
                retired.append(target)
        return retired

    # ---- writing ---------------------------------------------------------------------------

    @property
    def empty(self) -> bool:
        return self.size == 0

    def _index_batch(self, h: BatchHeader, position: int) -> None:
        """Account one batch at ``position`` in the indexes and the segment's summary fields."""
        if h.max_timestamp > self.max_timestamp:
            self.max_timestamp = h.max_timestamp
            self.max_timestamp_batch = h.base_offset
        if self.bytes_since_index > self.index_interval_bytes:
            self.index.append(h.base_offset - self.base_offset, position)
            if self.max_timestamp >= 0:
                self.time_index.append(self.max_timestamp,
                                       self.max_timestamp_batch - self.base_offset)
            self.bytes_since_index = 0
        self.bytes_since_index += h.size
        self.next_offset = h.next_offset

    def fits(self, h: BatchHeader, segment_bytes: int) -> bool:
        """Whether batch ``h`` may go into this segment (size, index room, relative offsets)."""
        if self.empty:
            return h.last_offset - self.base_offset <= INT32_MAX
        return (self.size + h.size <= segment_bytes
                and not self.index.full and not self.time_index.full
                and h.last_offset - self.base_offset <= INT32_MAX)

    def append(self, buf: bytes | bytearray | memoryview, headers: Sequence[BatchHeader], *,
               offsets_from_headers: bool = False) -> None:
        """Write the contiguous batches ``headers`` (positions inside ``buf``) with one write.

        ``offsets_from_headers``: each batch's first 16 bytes (base offset, length, leader
        epoch) are taken from its header object instead of ``buf`` — the leader assigns offsets
        this way without copying the producer's bytes (one ``pwritev``).
        """
        if offsets_from_headers and len(headers) == 1:  # one batch a partition (issue 21)
            h = headers[0]
            size = h.size
            position = self.size
            _pwritev_all(self.fd, [offsets_prefix(h), memoryview(buf)[
                h.position + OFFSETS_PREFIX:h.position + size]], position, size)
            self._index_batch(h, position)
            self.size = position + size
            self.dirty = True
            return
        start = headers[0].position
        end = headers[-1].position + headers[-1].size
        if offsets_from_headers:
            mv = memoryview(buf)
            iov: list[bytes | memoryview] = []
            total = 0
            for h in headers:
                iov.append(offsets_prefix(h))
                iov.append(mv[h.position + OFFSETS_PREFIX:h.position + h.size])
                total += h.size
            _pwritev_all(self.fd, iov, self.size, total)
        else:
            data = memoryview(buf)[start:end]
            written = fileops.pwrite(self.fd, data, self.size)
            while written < len(data):  # pragma: no cover - short writes are rare on files
                written += fileops.pwrite(self.fd, data[written:], self.size + written)
        for h in headers:
            self._index_batch(h, self.size + h.position - start)
        self.size += end - start
        self.dirty = True

    def truncate_to_position(self, position: int) -> None:
        """Cut the file at ``position`` (a batch boundary) and re-derive the summary fields."""
        fileops.ftruncate(self.fd, position)
        self.size = position
        self.index.truncate_to_position(position)
        last = self.index.last()
        self.time_index.truncate_to_offset(
            (last[0] + 1) if last is not None else 0)
        self.dirty = True
        self.load_tail(check_crc=False)

    # ---- reading ---------------------------------------------------------------------------

    def read_at(self, position: int, length: int) -> bytes:
        length = min(length, self.size - position)
        return os.pread(self.fd, length, position) if length > 0 else b""

    def header_at(self, position: int) -> BatchHeader | None:
        if self.size - position < HEADER_SIZE:
            return None
        h = _header(os.pread(self.fd, HEADER_SIZE, position), 0, position)
        return h if self._fits(h, position) else None

    def _fits(self, h: BatchHeader, position: int) -> bool:
        """Whether ``h``, read at ``position``, declares a batch that lies within the file."""
        return h.batch_length >= HEADER_SIZE - LOG_OVERHEAD and position + h.size <= self.size

    def headers_from(self, position: int) -> Iterator[BatchHeader]:
        """Batch headers from ``position`` to the end, one small pread each."""
        while True:
            h = self.header_at(position)
            if h is None:
                return
            yield h
            position += h.size

    def read_indexed(self, offset: int, max_bytes: int) -> tuple[bytes, int] | None:
        """Bytes from the batch that starts at ``offset``, when the offset index says one does
        (an entry for exactly ``offset``, or ``offset`` is the segment's base and the index
        has no entry before it), in ONE pread: (at least that whole batch and up to
        ``max_bytes``, the batch's size). None when the index does not say so or the bytes
        there are not such a batch: the caller finds the batch header by header
        (:meth:`find`). A catch-up read from the log start is this case: over 1,000
        partitions a consumer's Fetch answer read ~177 partitions with two preads each (the
        header, then the data), at ~25 us a pread on this VM (issue 21)."""
        rel, position = self.index.lookup(offset - self.base_offset)
        if self.base_offset + rel != offset:
            return None
        length = min(max(max_bytes, HEADER_SIZE), self.size - position)
        if length < HEADER_SIZE:
            return None
        data = os.pread(self.fd, length, position)
        if len(data) < HEADER_SIZE:
            return None
        h = _header(data, 0, position)
        if h.base_offset != offset or h.magic != MAGIC or not self._fits(h, position):
            return None
        if h.size > len(data):  # the batch is bigger than max_bytes: return it whole (KIP-74)
            data = self.read_at(position, h.size)
        return data, h.size

    def find(self, offset: int) -> BatchHeader | None:
        """Header of the first batch whose last offset is >= ``offset``, or None."""
        _, position = self.index.lookup(offset - self.base_offset)
        for h in self.headers_from(position):
            if h.last_offset >= offset:
                return h
        return None

    def find_timestamp(self, timestamp: int) -> BatchHeader | None:
        """Header of the first batch whose max timestamp is >= ``timestamp``, or None."""
        rel = self.time_index.lookup_before(timestamp)
        position = 0 if rel is None else self.index.lookup(rel)[1]
        for h in self.headers_from(position):
            if h.max_timestamp >= timestamp:
                return h
        return None

    def iter_batches(self, position: int = 0) -> Iterator[tuple[BatchHeader, memoryview]]:
        """(header, batch bytes) for every batch, reading the file in large chunks."""
        while position < self.size:
            chunk = os.pread(self.fd, min(_SCAN_CHUNK, self.size - position), position)
            h = parse_header(chunk) if len(chunk) >= HEADER_SIZE else None
            if h is None:
                return
            if h.size > len(chunk):
                chunk = os.pread(self.fd, h.size, position)
            view = memoryview(chunk)
            rel = 0
            while len(chunk) - rel >= HEADER_SIZE:
                h = _header(chunk, rel, position + rel)
                if rel + h.size > len(chunk) or h.batch_length < HEADER_SIZE - LOG_OVERHEAD:
                    break
                yield h, view[rel:rel + h.size]
                rel += h.size
            if rel == 0:
                return
            position += rel

    # ---- recovery --------------------------------------------------------------------------

    def load_tail(self, *, check_crc: bool) -> ScanResult:
        """Settle ``next_offset``/``max_timestamp`` by walking from the last index entry.

        Used when the indexes are trusted (clean shutdown, or after a truncation); the walk covers
        at most ``index.interval.bytes`` plus one batch, so it is cheap.
        """
        last = self.index.last()
        t_last = self.time_index.last()
        self.next_offset = self.base_offset
        self.max_timestamp, self.max_timestamp_batch = -1, self.base_offset
        if t_last is not None:
            self.max_timestamp, self.max_timestamp_batch = t_last[0], self.base_offset + t_last[1]
        if last is None:
            self.bytes_since_index = 0
            return self.scan(0, check_crc=check_crc, strict=False)
        rel, position = last
        h = self.header_at(position)
        if h is None or h.base_offset != self.base_offset + rel:
            return ScanResult(0, self.size, "offset index points at no batch", 0)
        self.bytes_since_index = self.index_interval_bytes + 1  # re-indexing it is a no-op
        return self.scan(position, check_crc=check_crc, strict=False, expect=h.base_offset)

    def reset_indexes(self) -> None:
        self.index.reset()
        self.time_index.reset()
        self.next_offset = self.base_offset
        self.max_timestamp, self.max_timestamp_batch = -1, self.base_offset
        self.bytes_since_index = 0
        self.index_valid = True

    def scan(self, position: int, *, check_crc: bool, strict: bool, expect: int | None = None,
             on_batch: Callable[[BatchHeader], None] | None = None) -> ScanResult:
        """Walk and index batches from ``position``, stopping at the first invalid one.

        Checks length, magic, counts, offset order (``strict``: offsets must be contiguous, as in
        a log never compacted; otherwise only increasing, since compaction leaves gaps), the
        relative-offset range and, with ``check_crc``, the CRC-32C. Does not truncate: the caller
        decides (and logs) what to do with bytes past ``valid_size``.
        """
        expected = self.base_offset if expect is None else expect
        end = self.size
        buf = b""
        buf_start = position
        batches = 0
        problem: str | None = None
        while position < end:
            rel = position - buf_start
            if len(buf) - rel < HEADER_SIZE:
                buf = os.pread(self.fd, min(_SCAN_CHUNK, end - position), position)
                buf_start, rel = position, 0
                if len(buf) < HEADER_SIZE:
                    problem = f"torn batch header ({len(buf)} bytes)"
                    break
            h = parse_header(buf, rel)
            problem = _check_header(h, position, end, expected, strict, self.base_offset)
            if problem is not None:
                break
            if check_crc:
                if rel + h.size > len(buf):
                    buf = os.pread(self.fd, max(_SCAN_CHUNK, h.size), position)
                    buf_start, rel = position, 0
                if compute_crc(buf, rel, h.size) != h.crc:
                    problem = f"CRC-32C mismatch in batch at offset {h.base_offset}"
                    break
            self._index_batch(h, position)
            if on_batch is not None:
                on_batch(h)
            expected = h.next_offset
            position += h.size
            batches += 1
        return ScanResult(position, end, problem, batches)


def _header(buf: bytes, at: int, position: int) -> BatchHeader:
    """Parse the header at ``buf[at:]``, recording ``position`` (its place in the file)."""
    (base_offset, batch_length, leader_epoch, magic, crc, attributes, last_offset_delta,
     base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence,
     records_count) = _HEADER.unpack_from(buf, at)
    return BatchHeader._make((base_offset, batch_length, leader_epoch, magic, crc, attributes,
                              last_offset_delta, base_timestamp, max_timestamp, producer_id,
                              producer_epoch, base_sequence, records_count, position))


def _check_header(h: BatchHeader, position: int, end: int, expected: int, strict: bool,
                  base_offset: int) -> str | None:
    if h.batch_length < HEADER_SIZE - LOG_OVERHEAD or position + h.size > end:
        return (f"batch at byte {position} declares length {h.batch_length} but only "
                f"{end - position - LOG_OVERHEAD} bytes follow (torn write)")
    if h.magic != MAGIC:
        return f"batch at byte {position} has magic {h.magic}"
    if h.records_count < 0 or h.last_offset_delta < 0 or \
            h.records_count > h.last_offset_delta + 1:
        return f"batch at byte {position} has inconsistent record count / offset delta"
    if h.base_offset < expected or (strict and h.base_offset != expected):
        return (f"batch at byte {position} has base offset {h.base_offset}, expected "
                f"{'' if strict else 'at least '}{expected}")
    if h.last_offset - base_offset > INT32_MAX:
        return f"batch at byte {position} has offset {h.last_offset} beyond the segment's range"
    return None
