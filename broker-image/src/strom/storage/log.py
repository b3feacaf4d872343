"""One partition replica's log: ordered segments, offsets, reads, retention, compaction, recovery.

This is the storage engine's front door for the broker and replication. It owns every file in
``<log.dir>/<topic>-<partition>/``: the segments, ``recovery-point-checkpoint`` (recovery point, log
start offset, high watermark), ``leader-epoch-checkpoint`` and the clean-shutdown marker.

The hot paths do per-batch Python work: a leader's append validates the batch headers and CRCs,
decodes every record once in the compiled codec to validate it (``strom.protocol.validation``,
Kafka's LogValidator), patches base offset and leader epoch into the header (both outside the
CRC) and writes the bytes with one ``pwrite``; a read bisects the segment list, bisects one
offset index, walks a few batch headers and returns one ``pread`` of whole batches.

Not thread-safe by design: each log is owned by one task (the partition's owner in the broker).
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import itertools
import logging
import os
import shutil
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, NamedTuple, Self, TypeVar, cast, overload

from strom.protocol.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    parse_header,
    patch_offsets,
    set_log_append_time,
    set_max_timestamp,
    validate_batches,
)
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.records import Compression, decode_batches, recompress
from strom.protocol.validation import RecordPolicy, validate_records
from strom.storage import (
    compaction,
    dir_checkpoint,
    partition_metadata,
    producer_state,
    recovery,
    retention,
)
from strom.storage.checkpoint import (
    CLEAN_SHUTDOWN,
    RECOVERY_CHECKPOINT,
    fsync_dir,
    write_values,
)
from strom.storage.config import INT32_MAX, LogConfig
from strom.storage.dir_checkpoint import NO_PRODUCERS_AT, DirCheckpoints, Epochs, LogOffsets
from strom.storage.epoch import FILE_NAME as EPOCH_FILE
from strom.storage.epoch import LeaderEpochCache
from strom.storage.producer_state import DEFAULT_EXPIRATION_MS, ProducerStateManager
from strom.storage.segment import CLEANED_SUFFIX, LogSegment

log = logging.getLogger(__name__)

_OFFSET_LEN = struct.Struct(">qi")
_PRODUCER_EXPIRY_CHECK_MS = 10 * 60 * 1000  # producer.id.expiration.check.interval.ms


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class AppendResult(NamedTuple):
    """What one append did (a tuple: one is made per appended produce request)."""

    base_offset: int
    last_offset: int
    record_count: int
    size_bytes: int
    log_append_time_ms: int  # -1 unless the topic uses LogAppendTime
    max_timestamp: int
    duplicate: bool = False  # an idempotent producer's retry of a batch the log already holds


class TimestampAndOffset(NamedTuple):
    """A record found by time (Kafka's FileRecords.TimestampAndOffset): its offset, timestamp
    and the leader epoch of its batch (-1 if the batch has none), which ListOffsets answers so
    a consumer that resets to the offset can validate it (KIP-320)."""

    offset: int
    timestamp: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class _Deferred:
    """What a deferred open keeps for the load on first use."""

    producer_id_expiration_ms: int
    values: dict[str, int]
    """The offsets it opened with (its log directory's checkpoint or its own)."""
    epochs: Epochs | None = None
    """Its leader epochs from its log directory's checkpoint; None: in its own file."""


_T = TypeVar("_T")


class _ReadOnFirstUse(Generic[_T]):
    """A part of a log that a deferred open reads on first use: the segments, their base
    offsets, the leader epochs, the producer state (issue 21 item 5).

    A non-data descriptor: the value lives in the log's ``__dict__`` (set by ``__init__`` and
    by :meth:`PartitionLog.load`) and an instance attribute wins over such a descriptor, so a
    loaded log reads it as a plain attribute, as cheap as any on the append path. Only while
    it is absent, i.e. the log is deferred, does ``__get__`` run: it loads the log first."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, plog: None, owner: type | None = None) -> Self: ...

    @overload
    def __get__(self, plog: PartitionLog, owner: type | None = None) -> _T: ...

    def __get__(self, plog: PartitionLog | None, owner: type | None = None) -> _T | Self:
        if plog is None:
            return self
        plog.load()
        try:
            return cast(_T, vars(plog)[self.name])
        except KeyError:
            raise AttributeError(f"{self.name} of {plog.topic}-{plog.partition} is not loaded "
                                 "after load()") from None

    def forget(self, plog: PartitionLog) -> None:
        """Drop the value so that the next use reads it (a deferred open)."""
        vars(plog).pop(self.name, None)


@dataclass(frozen=True)
class ReadResult:
    records: bytes
    log_start_offset: int
    log_end_offset: int
    high_watermark: int


class PartitionLog:
    """The log of one partition replica. Open with ``PartitionLog.open``."""

    def __init__(self, directory: Path, config: LogConfig, *, topic: str, partition: int,
                 clock: Callable[[], int], segments: list[LogSegment], log_start_offset: int,
                 high_watermark: int | None, epochs: LeaderEpochCache) -> None:
        self.directory = directory
        self.log_dir = directory.parent
        """The log directory (a ``log.dirs`` entry) holding it, computed once: the log manager
        groups 10,000 logs by it several times at a stop (``Path.parent`` and its hash were a
        fifth of a stop's CPU)."""
        self._config = config
        self._derive(config)
        self.topic = topic
        self.partition = partition
        self._clock = clock
        self._deferred: _Deferred | None = None
        """Set while the log is opened lazily: what its checkpoint said; the segments, epochs
        and producer state are read on first use (see :meth:`open`, ``defer``)."""
        self._end = segments[-1].next_offset if segments else 0
        """The log end offset while deferred (from the checkpoint)."""
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._log_start_offset = log_start_offset
        self._recovery_point = self._end
        self._hw = high_watermark if high_watermark is not None else 0
        self._hw_managed = high_watermark is not None
        self._epochs = epochs
        self._touched = True
        """Changed since it was opened, or opened after an unclean shutdown: its close writes
        the checkpoints, a producer snapshot and the clean-shutdown marker. False only for a
        log opened clean with nothing rebuilt and not changed since: closing it writes nothing
        (a clean stop of 10,000 partitions took 31 s, issue 21 item 5)."""
        self._marker_kept = False
        """The clean-shutdown marker of the last close is still on disk: the files are exactly
        as that close left them, so a crash before the first change needs no recovery of this
        log. The first change of a file removes it first (:meth:`_touch`)."""
        self._unflushed_messages = 0
        self._last_flush_ms = clock()
        #: Where the last compaction pass stopped: segments ending at or before it are clean.
        self._first_dirty_offset = 0
        #: When the earliest tombstone the last pass kept may go (None: no tombstone kept).
        self._tombstone_expiry: int | None = None
        #: Files of segments deleted by retention, removed after ``file.delete.delay.ms``:
        #: (when, paths), oldest first.
        self._retired: list[tuple[int, list[Path]]] = []
        self._producers = ProducerStateManager(end_offset=log_start_offset)
        self._last_producer_expiry = clock()
        self._closed = False
        self.offline: str | None = None
        """Why the log takes no more writes (its log directory failed I/O), else None."""
        self.on_io_error: Callable[[PartitionLog, OSError], None] | None = None
        """Told when a write of this log failed (the log manager takes the directory offline)."""
        self.on_check_due: Callable[[PartitionLog], None] | None = None
        """Told when :meth:`next_check_ms` may have moved earlier (a write to an empty active
        segment or after a flush, a new config, a load, a truncation): the log manager then
        schedules the next :meth:`maybe_roll` sooner (:mod:`strom.storage.due`)."""
        self.topic_id: str | None = None
        """The topic id in its ``partition.metadata``, as read at open or last written."""

    # ---- opening ---------------------------------------------------------------------------

    @classmethod
    def open(cls, directory: Path, config: LogConfig, *, topic: str, partition: int,
             clock: Callable[[], int] = wall_clock_ms,
             producer_id_expiration_ms: int = DEFAULT_EXPIRATION_MS,
             defer: bool = False, dirs: DirCheckpoints | None = None) -> PartitionLog:
        """Open the log in ``directory``, creating it if new, recovering it if not.

        A new log (the directory did not exist) is not flushed: it holds nothing to make
        durable, and its first flush (or clean close) writes the checkpoint; until then a
        restart recovers it from offset 0, which is what the missing checkpoint means. Three
        fsyncs and a dozen look-ups per new partition made creating 10,000 partitions take
        minutes (issue 21).

        ``defer``: if the log was shut down cleanly (marker and checkpoint present), read only
        its checkpoint now - log start, log end (the recovery point of a clean close) and high
        watermark, what a partition needs to lead - and the rest (segments, indexes, the tail
        check, epochs, producer state) on first use or from :meth:`load`. A broker with 10,000
        clean partitions spent 7.8 s opening them before it could serve (issue 21 item 5). A
        log that was not shut down cleanly is recovered at once whatever ``defer`` says.

        ``dirs``: the log directory's checkpoint files, as the log manager read them once for
        all its logs (None: read here); which offsets count is
        :func:`strom.storage.dir_checkpoint.resolve`'s rule."""
        path = os.fspath(directory)  # os.path, not pathlib, below: done for every partition
        existed = False
        try:
            os.mkdir(path)
        except FileExistsError:
            existed = True
        except FileNotFoundError:  # the log directory itself is new
            directory.mkdir(parents=True)
        if not existed:
            return cls._create(directory, config, topic=topic, partition=partition, clock=clock,
                               producer_id_expiration_ms=producer_id_expiration_ms)
        values, clean, epochs = dir_checkpoint.resolve(path, (topic, partition), dirs)
        if defer and clean and values is not None:
            self = cls._open_deferred(directory, config, topic=topic, partition=partition,
                                      clock=clock, values=values, epochs=epochs,
                                      producer_id_expiration_ms=producer_id_expiration_ms)
        else:
            self = cls._open_now(directory, config, topic=topic, partition=partition,
                                 clock=clock, producer_id_expiration_ms=producer_id_expiration_ms,
                                 values=values, clean=clean, dir_epochs=epochs)
        self.topic_id = partition_metadata.read_topic_id(path)
        return self

    @classmethod
    def _open_deferred(cls, directory: Path, config: LogConfig, *, topic: str, partition: int,
                       clock: Callable[[], int], values: dict[str, int], epochs: Epochs | None,
                       producer_id_expiration_ms: int) -> PartitionLog:
        end = max(values.get("recovery-point", 0), 0)  # a clean close flushed to the end
        log_start = min(max(values.get("log-start-offset", 0), 0), end)
        hw_value = values.get("high-watermark", -1)
        hw = min(max(hw_value, log_start), end) if hw_value >= 0 else None
        self = cls(directory, config, topic=topic, partition=partition, clock=clock,
                   segments=[], log_start_offset=log_start, high_watermark=hw,
                   epochs=LeaderEpochCache(directory))
        self._end = self._recovery_point = end
        self._deferred = _Deferred(producer_id_expiration_ms, values, epochs)
        for part in (cls._segments, cls._bases, cls._epochs, cls._producers):
            part.forget(self)  # read by load(), on first use
        self._touched, self._marker_kept = False, True
        return self

    @property
    def loaded(self) -> bool:
        """False while a deferred open has not read the segments yet."""
        return self._deferred is None

    def load(self) -> None:
        """Finish a deferred open now (a no-op otherwise): what first use would do.

        Reads and checks the segments as a clean open does (the tail after the last index
        entry is walked with CRC checks and a corrupt tail is cut). If the files disagree
        with the checkpoint that was served meanwhile, the files win, as an eager open would
        have decided, and the difference is logged."""
        deferred = self._deferred
        if deferred is None:
            return
        try:
            full = type(self)._open_now(
                self.directory, self.config, topic=self.topic, partition=self.partition,
                clock=self._clock, producer_id_expiration_ms=deferred.producer_id_expiration_ms,
                values=deferred.values, clean=True, dir_epochs=deferred.epochs)
        except OSError as exc:
            self.take_offline(_io_reason(exc))
            if self.on_io_error is not None:
                self.on_io_error(self, exc)
            raise StromError(ErrorCode.KAFKA_STORAGE_ERROR,
                             f"cannot read the log of {self.topic}-{self.partition} in "
                             f"{self.directory}: {exc}") from None
        end = full.log_end_offset
        if end != self._end:
            log.warning("%s-%d: its files end at offset %d, its clean-shutdown checkpoint said "
                        "%d; the files win", self.topic, self.partition, end, self._end)
        self._segments, self._bases = full._segments, full._bases
        self._epochs, self._producers = full._epochs, full._producers
        self._recovery_point = min(full._recovery_point, end)
        self._log_start_offset = min(max(self._log_start_offset, full._log_start_offset), end)
        self._hw = min(max(self._hw, self._log_start_offset), end)
        if full._touched:  # it rebuilt and flushed something, and removed the marker
            self._touched, self._marker_kept = True, False
        if full.offline is not None and self.offline is None:
            self.offline = full.offline
        self._deferred = None
        self._check_due()

    @classmethod
    def _open_now(cls, directory: Path, config: LogConfig, *, topic: str, partition: int,
                  clock: Callable[[], int], producer_id_expiration_ms: int,
                  values: dict[str, int] | None, clean: bool,
                  dir_epochs: Epochs | None = None) -> PartitionLog:
        """``values``/``clean``: the offsets to open with and whether the last shutdown was
        clean (:func:`strom.storage.dir_checkpoint.resolve`); clean only while the marker is
        still there (a deferred log changed before its load is not). ``dir_epochs``: its leader
        epochs from the log directory's checkpoint (None: read its own file)."""
        started = time.monotonic()
        marker = directory / CLEAN_SHUTDOWN
        names = os.listdir(directory)  # one listing for the whole open
        clean = clean and CLEAN_SHUTDOWN in names and values is not None
        values = values or {}
        if dir_epochs is None:
            epochs = LeaderEpochCache.load(directory / EPOCH_FILE)
        else:
            epochs = LeaderEpochCache.of(directory / EPOCH_FILE, dir_epochs)
        epochs_before = epochs.entries
        now = clock()
        segments = recovery.load_segments(
            directory, config, recovery_point=values.get("recovery-point", 0), clean=clean,
            now_ms=now, on_batch=lambda h: _assign_epoch(epochs, h), names=names)
        log_start = values.get("log-start-offset", 0)
        if not segments:
            segments = [LogSegment.create(directory, log_start,
                                          index_interval_bytes=config.index_interval_bytes,
                                          max_index_bytes=config.segment_index_bytes,
                                          now_ms=now, fresh=True)]
        if not clean:  # fsync whatever recovery read past the recovery point, or rewrote
            for seg in segments:
                if seg.next_offset > values.get("recovery-point", 0):
                    seg.dirty = True
        end = segments[-1].next_offset
        log_start = min(max(log_start, segments[0].base_offset), end)
        hw_value = values.get("high-watermark", -1)
        hw = min(max(hw_value, log_start), end) if hw_value >= 0 else None
        self = cls(directory, config, topic=topic, partition=partition, clock=clock,
                   segments=segments, log_start_offset=log_start, high_watermark=hw,
                   epochs=epochs)
        epochs.truncate_from_end(end)
        epochs.truncate_from_start(log_start)
        epochs_changed = epochs.entries != epochs_before
        # saved by the flush below (a failed disk: read-only); from the directory's file: its
        # own file is behind, saved by its next flush or roll (before its recovery point moves)
        epochs.unsaved = epochs_changed or dir_epochs is not None
        self._producers.expiration_ms = producer_id_expiration_ms
        self._rebuild_producer_state(
            names, empty_at=values.get(NO_PRODUCERS_AT, -1) if clean else -1)
        self._touched = not clean or any(seg.dirty for seg in segments) or epochs_changed
        self._marker_kept = not self._touched
        try:
            if self._touched:
                self.flush()  # after a clean shutdown with nothing rebuilt: nothing to write
                marker.unlink(missing_ok=True)
            # else the marker stays: the files are as the clean close left them until the
            # first change, which removes it (_touch); a crash before that needs no recovery
        except OSError as exc:  # e.g. a full disk: serve reads, take no writes (the manager
            self.offline = _io_reason(exc)  # takes the whole directory offline)
            log.error("%s-%d opened read-only: its directory fails writes (%s)", topic,
                      partition, self.offline)
        elapsed = time.monotonic() - started
        if not clean or elapsed > 1.0:
            log.info("opened %s-%d: offsets %d..%d in %d segments (%s shutdown, %.2fs)", topic,
                     partition, log_start, end, len(segments),
                     "clean" if clean else "unclean", elapsed)
        return self

    @classmethod
    def _create(cls, directory: Path, config: LogConfig, *, topic: str, partition: int,
                clock: Callable[[], int], producer_id_expiration_ms: int) -> PartitionLog:
        """A new, empty log in the new ``directory``: one segment file and nothing to read
        (no checkpoint, epochs, snapshots or segments to look for)."""
        now = clock()
        segment = LogSegment.create(directory, 0, index_interval_bytes=config.index_interval_bytes,
                                    max_index_bytes=config.segment_index_bytes, now_ms=now,
                                    fresh=True)
        self = cls(directory, config, topic=topic, partition=partition, clock=clock,
                   segments=[segment], log_start_offset=0, high_watermark=None,
                   epochs=LeaderEpochCache(directory / EPOCH_FILE))
        self._producers.expiration_ms = producer_id_expiration_ms
        return self

    def create_segment_file(self) -> bool:
        """Create the file of a new log's first segment before its first write (which would
        otherwise create it, see ``LogSegment.create``); True if it did. Raises OSError (the
        log is unchanged: its first write tries again and answers the error)."""
        if self._closed or self.offline is not None or self._deferred is not None:
            return False
        active = self._segments[-1]
        if not active.unborn:
            return False
        active.create_file()
        return True

    def write_topic_id(self, topic_id: str) -> None:
        """Record the topic id this directory belongs to (``partition.metadata``)."""
        partition_metadata.write_topic_id(self.directory, topic_id)
        self.topic_id = topic_id

    # ---- configuration ---------------------------------------------------------------------

    @property
    def config(self) -> LogConfig:
        return self._config

    @config.setter
    def config(self, config: LogConfig) -> None:
        self._config = config
        self._derive(config)

    def _derive(self, config: LogConfig) -> None:
        """What every append reads from the config, computed once per config, not per batch
        (properties that split ``cleanup.policy``, a RecordPolicy each: issue 21)."""
        self._policy = RecordPolicy(
            config.log_append_time, config.compact, config.message_timestamp_before_max_ms,
            config.message_timestamp_after_max_ms)
        self._compact = config.compact
        self._max_segment_ms = config.max_segment_ms

    # ---- state read on first use (a deferred open) ------------------------------------------

    _segments: _ReadOnFirstUse[list[LogSegment]] = _ReadOnFirstUse()
    _bases: _ReadOnFirstUse[list[int]] = _ReadOnFirstUse()
    _epochs: _ReadOnFirstUse[LeaderEpochCache] = _ReadOnFirstUse()
    _producers: _ReadOnFirstUse[ProducerStateManager] = _ReadOnFirstUse()

    def _open_segments(self) -> list[LogSegment]:
        """The segments with open files, without reading a deferred log (it has none)."""
        return [] if self._deferred is not None else self._segments

    def _touch(self) -> None:
        """Before the first change of any file since a clean open: remove the clean-shutdown
        marker (from then on a crash means recovery past the recovery point, and close writes
        everything)."""
        self._touched = True
        if self._marker_kept:
            self._marker_kept = False
            (self.directory / CLEAN_SHUTDOWN).unlink(missing_ok=True)

    # ---- offsets ---------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        if self._deferred is not None:
            return self._end
        return self._segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        if self._deferred is not None:  # the files' sizes, without reading the log
            return files_size(self.directory)
        return sum(s.size for s in self._segments)

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def high_watermark(self) -> int:
        """Defaults to (and tracks) the log end offset until replication sets it."""
        return self._hw if self._hw_managed else self.log_end_offset

    @high_watermark.setter
    def high_watermark(self, value: int) -> None:
        hw = min(max(value, self._log_start_offset), self.log_end_offset)
        if hw != self._hw or not self._hw_managed:
            self._touched = True  # the next close checkpoints it; no file changes yet
        self._hw = hw
        self._hw_managed = True

    @property
    def epochs(self) -> list[tuple[int, int]]:
        return self._epochs.entries

    def epoch_for_offset(self, offset: int) -> int:
        """The leader epoch ``offset`` was written in, from the epoch cache; -1 if unknown."""
        return self._epochs.epoch_for_offset(offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) as Kafka's OffsetsForLeaderEpoch; (-1, -1) if unknown."""
        return self._epochs.end_offset_for(epoch, self.log_end_offset)

    # ---- appending -------------------------------------------------------------------------

    def append_as_leader(self, records: bytes | memoryview, leader_epoch: int) -> AppendResult:
        """Validate, assign offsets to and append the producer's batches; all or nothing.

        An I/O error (disk full, no file handle, EIO) cuts whatever part of the batches reached
        the file, takes the log offline and raises KAFKA_STORAGE_ERROR: a record is in the log
        if and only if its append returned."""
        return self._append_as_leader(records, leader_epoch)[0]

    def append_many_as_leader(self, parts: Sequence[bytes | memoryview], leader_epoch: int
                              ) -> list[AppendResult] | None:
        """Append the batches of several produce requests in one pass (one validation walk, one
        write), all or nothing, with a result per part as if each had been appended alone, in
        order, by :meth:`append_as_leader`.

        Only when that equivalence is certain: None (the log unchanged) when a part is not a
        whole number of batches by their length fields (joined, two halves could pass as one
        batch), or the topic recompresses (offsets of batches move). Raises as
        :meth:`append_as_leader` does for the whole: nothing is written, and the caller appends
        the parts one by one to learn which one failed and why (a duplicate idempotent batch
        among several is such an error, DUPLICATE_SEQUENCE_NUMBER)."""
        counts = [_batch_count(part) for part in parts]
        if 0 in counts or self.config.compression_type != "producer":
            return None
        joined = b"".join(parts)
        whole, patched = self._append_as_leader(joined, leader_epoch)
        append_time = whole.log_append_time_ms
        results: list[AppendResult] = []
        first = 0
        for count in counts:
            if count == 1:  # one batch a request: what librdkafka's pipelined requests hold
                h = patched[first]
                first += 1
                results.append(AppendResult(
                    base_offset=h.base_offset, last_offset=h.base_offset + h.last_offset_delta,
                    record_count=h.records_count, size_bytes=h.size,
                    log_append_time_ms=append_time, max_timestamp=h.max_timestamp))
                continue
            mine = patched[first:first + count]
            first += count
            results.append(AppendResult(
                base_offset=mine[0].base_offset, last_offset=mine[-1].last_offset,
                record_count=sum(h.records_count for h in mine),
                size_bytes=sum(h.size for h in mine), log_append_time_ms=append_time,
                max_timestamp=max(h.max_timestamp for h in mine)))
        return results

    def _append_as_leader(self, records: bytes | memoryview, leader_epoch: int
                          ) -> tuple[AppendResult, list[BatchHeader]]:
        """:meth:`append_as_leader`, also returning the appended batches' headers (none for a
        duplicate)."""
        self._check_writable()
        latest = self._epochs.latest_epoch
        if latest is not None and leader_epoch < latest:
            raise StromError(ErrorCode.FENCED_LEADER_EPOCH,
                             f"leader epoch {leader_epoch} is older than the log's latest epoch "
                             f"{latest}")
        config = self.config
        headers = validate_batches(records, max_batch_bytes=config.max_message_bytes)
        now = self._clock()
        policy = self._policy
        max_stamps = validate_records(records, headers, policy, now)
        if config.compression_type != "producer":
            rebuilt = recompress(records, headers, Compression.parse(config.compression_type))
            if rebuilt is not None:
                records = rebuilt
                headers = validate_batches(records)
        # one batch per partition is what a produce over many partitions sends: its checks
        # without a generator each (issue 21)
        single = headers[0] if len(headers) == 1 else None
        if (single.producer_id >= 0 if single is not None
                else any(h.producer_id >= 0 for h in headers)):
            dup = self._producers.check_all(headers)
            if dup is not None:
                return AppendResult(
                    base_offset=dup.first_offset, last_offset=dup.last_offset,
                    record_count=dup.last_offset - dup.first_offset + 1, size_bytes=0,
                    log_append_time_ms=-1, max_timestamp=max(h.max_timestamp for h in headers),
                    duplicate=True), []
        append_time = policy.log_append_time
        offset = self.log_end_offset
        buf: bytes | bytearray | memoryview = records
        wrong_max = not append_time and (
            single.max_timestamp != max_stamps[0] if single is not None
            else any(h.max_timestamp != ts for h, ts in zip(headers, max_stamps, strict=True)))
        if append_time or wrong_max:  # attributes, maxTimestamp and the CRC change: a copy
            buf = bytearray(records)
            for h, ts in zip(headers, max_stamps, strict=True):
                patch_offsets(buf, h.position, offset, leader_epoch)
                if append_time:
                    set_log_append_time(buf, h.position, h.size, now)
                elif h.max_timestamp != ts:
                    set_max_timestamp(buf, h.position, h.size, ts)
                offset += h.last_offset_delta + 1
            patched = [parse_header(buf, h.position) for h in headers]
        else:  # only fields outside the CRC: written from the headers, the bytes not copied
            patched = []
            for h in headers:
                patched.append(h.with_offsets(offset, leader_epoch))
                offset += h.last_offset_delta + 1
        start = self.log_end_offset
        try:
            if self._epochs.assign(leader_epoch, patched[0].base_offset):
                self._epochs.unsaved = True  # saved by the next flush
            self._write(buf, patched, now, offsets_from_headers=buf is records)
        except OSError as exc:
            raise self._io_failed(exc, start) from None
        if len(patched) == 1:
            first = patched[0]
            return AppendResult(
                base_offset=first.base_offset, last_offset=first.last_offset,
                record_count=first.records_count, size_bytes=len(buf),
                log_append_time_ms=now if append_time else -1,
                max_timestamp=first.max_timestamp), patched
        return AppendResult(
            base_offset=patched[0].base_offset, last_offset=patched[-1].last_offset,
            record_count=sum(h.records_count for h in patched), size_bytes=len(buf),
            log_append_time_ms=now if append_time else -1,
            max_timestamp=max(h.max_timestamp for h in patched)), patched

    def append_as_follower(self, records: bytes | memoryview) -> AppendResult:
        """Append batches whose offsets and epochs a leader assigned; all or nothing (an I/O
        error is handled as in :meth:`append_as_leader`)."""
        self._check_writable()
        headers = validate_batches(records)
        end = self.log_end_offset
        if headers[0].base_offset < end:
            raise StromError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"follower append starts at offset {headers[0].base_offset} but the "
                             f"log ends at {end}; truncate the log first")
        for prev, h in itertools.pairwise(headers):
            if h.base_offset < prev.next_offset:
                raise StromError(ErrorCode.CORRUPT_MESSAGE,
                                 f"record batch at byte {h.position} has base offset "
                                 f"{h.base_offset} before the previous batch's end "
                                 f"{prev.next_offset}")
        now = self._clock()
        try:
            changed = False
            for h in headers:
                changed = self._epochs.assign(h.leader_epoch, h.base_offset) or changed
            if changed:
                self._epochs.unsaved = True  # saved by the next flush
            self._write(records, headers, now)
        except OSError as exc:
            raise self._io_failed(exc, end) from None
        return AppendResult(
            base_offset=headers[0].base_offset, last_offset=headers[-1].last_offset,
            record_count=sum(h.records_count for h in headers), size_bytes=len(records),
            log_append_time_ms=-1, max_timestamp=max(h.max_timestamp for h in headers))

    def _must_roll(self, seg: LogSegment, h: BatchHeader, now: int) -> bool:
        if seg.empty:
            return h.base_offset != seg.base_offset
        if h.base_offset != seg.next_offset and not self._compact:
            return True  # keep never-compacted segments contiguous (recovery relies on it)
        return (seg.size + h.size > self._config.segment_bytes or seg.index.full
                or seg.time_index.full or h.last_offset - seg.base_offset > INT32_MAX
                or now - seg.created_ms > self._max_segment_ms)

    def _write(self, buf: bytes | bytearray | memoryview, headers: Sequence[BatchHeader],
               now: int, *, offsets_from_headers: bool = False) -> None:
        self._touch()
        # A time-based check comes due only when the active segment gets its first records
        # or the first unflushed ones come: only then is the log manager told (one branch).
        became_due = not self._unflushed_messages
        if len(headers) == 1:  # a produce over many partitions: one batch each (issue 21)
            h = headers[0]
            seg = self._segments[-1]
            if self._must_roll(seg, h, now):
                seg = self._roll(now, h.base_offset)
            if seg.empty:
                seg.created_ms = now
                became_due = True
            seg.append(buf, headers, offsets_from_headers=offsets_from_headers)
            self._producers.update(h)
            self._unflushed_messages += h.records_count
            if (self._unflushed_messages >= self._config.flush_messages
                    or now - self._last_flush_ms >= self._config.flush_ms):
                self.flush()
            if became_due:
                self._check_due()
            return
        i = 0
        while i < len(headers):
            seg = self._segments[-1]
            if self._must_roll(seg, headers[i], now):
                seg = self._roll(now, headers[i].base_offset)
            if seg.empty:
                seg.created_ms = now
                became_due = True
            j = i + 1
            size = seg.size + headers[i].size
            while j < len(headers):
                h = headers[j]
                if (size + h.size > self.config.segment_bytes or h.base_offset
                        != headers[j - 1].next_offset or h.last_offset - seg.base_offset
                        > INT32_MAX):
                    break
                size += h.size
                j += 1
            seg.append(buf, headers[i:j], offsets_from_headers=offsets_from_headers)
            self._producers.update_all(headers[i:j])
            i = j
        self._unflushed_messages += sum(h.records_count for h in headers)
        if (self._unflushed_messages >= self._config.flush_messages
                or now - self._last_flush_ms >= self._config.flush_ms):
            self.flush()
        if became_due:
            self._check_due()

    def _new_segment(self, base_offset: int, now: int) -> LogSegment:
        return LogSegment.create(self.directory, base_offset,
                                 index_interval_bytes=self.config.index_interval_bytes,
                                 max_index_bytes=self.config.segment_index_bytes, now_ms=now)

    def _roll(self, now: int, base_offset: int | None = None) -> LogSegment:
        """Start a new active segment at ``base_offset`` (default: the log end offset)."""
        self._touch()
        active = self._segments[-1]
        base = self.log_end_offset if base_offset is None else base_offset
        if active.empty:
            if active.base_offset == base:
                return active
            active.delete()
            self._segments.pop()
            self._bases.pop()
        else:
            active.flush()  # as Kafka: a rolled segment is flushed, so recovery can skip it
        seg = self._new_segment(base, now)
        self._segments.append(seg)
        self._bases.append(base)
        self._producers.end_offset = max(self._producers.end_offset, base)
        producer_state.write_snapshot(self.directory, self._producers)
        fsync_dir(self.directory)
        if not active.empty:
            if self._epochs.unsaved:  # before the recovery point moves past its new entries
                self._epochs.save()  # (recovery rebuilds epochs only past the recovery point)
            self._recovery_point = max(self._recovery_point, active.next_offset)
            self._write_checkpoint()
        return seg

    def next_check_ms(self) -> int | None:
        """When :meth:`maybe_roll` next has something to do (wall-clock ms): the active
        segment's roll by ``segment.ms``, ``flush.ms`` of unflushed records, the producer-id
        expiry check; None while the log is offline, closed or not loaded yet (nothing to do
        until a load, which tells ``on_check_due``). Calling ``maybe_roll`` earlier is
        harmless; a change that makes this earlier calls ``on_check_due``."""
        if self.offline is not None or self._deferred is not None or self._closed:
            return None
        due = self._last_producer_expiry + _PRODUCER_EXPIRY_CHECK_MS
        active = self._segments[-1]
        if not active.empty:
            due = min(due, active.created_ms + self._max_segment_ms + 1)
        if self._unflushed_messages:
            due = min(due, self._last_flush_ms + self._config.flush_ms)
        return due

    def _check_due(self) -> None:
        if self.on_check_due is not None:
            self.on_check_due(self)

    def maybe_roll(self, now_ms: int | None = None) -> None:
        """Roll the active segment if segment.ms (for a compacted topic, at most
        max.compaction.lag.ms) has passed; also applies flush.ms. A log not loaded yet (a
        deferred open) has nothing unflushed; its roll waits for its load."""
        if self.offline is not None or self._deferred is not None:
            return
        now = self._clock() if now_ms is None else now_ms
        active = self._segments[-1]
        if not active.empty and now - active.created_ms > self._max_segment_ms:
            self._roll(now)
        if now - self._last_producer_expiry >= _PRODUCER_EXPIRY_CHECK_MS:
            self._last_producer_expiry = now
            self._producers.expire(now)
        if self._unflushed_messages and now - self._last_flush_ms >= self.config.flush_ms:
            self.flush()

    # ---- reading ---------------------------------------------------------------------------

    def _out_of_range(self, offset: int) -> StromError:
        return StromError(ErrorCode.OFFSET_OUT_OF_RANGE,
                          f"offset {offset} is out of range for {self.topic}-{self.partition}: "
                          f"valid offsets are {self._log_start_offset}..{self.log_end_offset} "
                          f"(log start..log end)")

    def _segment_index(self, offset: int) -> int:
        """The index of the segment that holds ``offset`` (the first one if it lies before)."""
        return max(bisect.bisect_right(self._bases, offset) - 1, 0)

    def _locate(self, offset: int) -> tuple[LogSegment, BatchHeader] | None:
        """The segment and header of the first batch whose last offset is >= ``offset``."""
        i = self._segment_index(offset)
        for seg in self._segments[i:]:
            h = seg.find(offset)
            if h is not None:
                return seg, h
        return None

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None) -> ReadResult:
        """Whole batches from the one containing ``offset``, up to ``max_bytes`` (at least one).

        Nothing at or beyond ``max_offset`` (exclusive; batches are whole, so reading stops at
        the first batch whose base offset is >= it). Stays within one segment.
        """
        self._check_open()
        end = self.log_end_offset
        if offset < self._log_start_offset or offset > end or offset < 0:
            raise self._out_of_range(offset)
        limit = end if max_offset is None else min(max_offset, end)
        data = b""
        if offset < limit:
            # the batch starting at ``offset`` in one pread when the index points at it (a
            # read from the log start), else found header by header, then read
            seg = self._segments[self._segment_index(offset)]
            direct = seg.read_indexed(offset, max_bytes)
            if direct is not None:
                data = _whole_batches(direct[0], direct[1], limit)
            else:
                found = self._locate(offset)
                if found is not None and found[1].base_offset < limit:
                    seg, h = found
                    data = seg.read_at(h.position, max(max_bytes, h.size))
                    data = _whole_batches(data, h.size, limit)
        return ReadResult(data, self._log_start_offset, end, self.high_watermark)

    def offset_for_timestamp(self, timestamp_ms: int) -> TimestampAndOffset | None:
        """The first record with timestamp >= ``timestamp_ms`` (with its batch's epoch), or None."""
        self._check_open()
        for seg in self._segments:
            if seg.max_timestamp < timestamp_ms:
                continue
            h = seg.find_timestamp(timestamp_ms)
            if h is None:
                continue
            for header in seg.headers_from(h.position):
                if header.max_timestamp < timestamp_ms or header.is_control:
                    continue
                for r in decode_batches(seg.read_at(header.position, header.size)):
                    if r.timestamp >= timestamp_ms and r.offset >= self._log_start_offset:
                        return TimestampAndOffset(r.offset, r.timestamp,
                                                  _epoch_or_none(header.leader_epoch))
        return None

    def offset_of_max_timestamp(self) -> TimestampAndOffset | None:
        """The first record with the largest timestamp (with its batch's epoch), for ListOffsets
        -3; None if the log is empty."""
        self._check_open()
        best: LogSegment | None = None
        for seg in self._segments:
            if seg.max_timestamp >= 0 and (best is None or seg.max_timestamp > best.max_timestamp):
                best = seg
        if best is None:
            return None
        h = best.find(best.max_timestamp_batch)
        if h is None:
            return None
        epoch = _epoch_or_none(h.leader_epoch)
        for r in decode_batches(best.read_at(h.position, h.size)):
            if r.timestamp == best.max_timestamp:
                return TimestampAndOffset(r.offset, r.timestamp, epoch)
        return TimestampAndOffset(h.last_offset, best.max_timestamp, epoch)

    # ---- truncation ------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove every record at or after ``offset``; cuts at the batch containing it."""
        self._check_writable()
        if offset < 0:
            raise self._out_of_range(offset)
        if offset >= self.log_end_offset:
            return
        if offset < self._log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return
        self._touch()
        i = self._segment_index(offset)
        for seg in self._segments[i + 1:]:
            seg.delete()
        del self._segments[i + 1:]
        del self._bases[i + 1:]
        seg = self._segments[i]
        h = seg.find(offset)
        if h is not None:
            seg.truncate_to_position(h.position)
        end = self.log_end_offset
        log.info("truncated %s-%d to offset %d", self.topic, self.partition, end)
        self._hw = min(self._hw, end)
        self._recovery_point = min(self._recovery_point, end)
        self._first_dirty_offset = min(self._first_dirty_offset, end)  # new records are dirty
        if self._epochs.truncate_from_end(end):
            self._epochs.save()
        self._write_checkpoint()
        self._rebuild_producer_state()
        self._check_due()  # an older, non-empty segment may be the active one now

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete everything; the log restarts, empty, at ``offset``."""
        self._check_writable()
        self._touch()
        for seg in self._segments:
            seg.delete()
        seg = self._new_segment(offset, self._clock())
        self._segments = [seg]
        self._bases = [offset]
        self._log_start_offset = offset
        self._recovery_point = offset
        self._hw = offset
        self._first_dirty_offset = offset
        self._epochs.clear()
        self._epochs.save()
        producer_state.delete_snapshots(self.directory, below=None, above=-1)
        self._producers.clear(offset)
        fsync_dir(self.directory)
        self._write_checkpoint()
        self._check_due()

    def advance_log_start_offset(self, offset: int) -> None:
        """DeleteRecords: hide records below ``offset``; whole segments go at next retention."""
        self._check_writable()
        if offset > self.high_watermark or offset < 0:
            raise self._out_of_range(offset)
        if offset > self._log_start_offset:
            self._touch()
            self._log_start_offset = offset
            if self._epochs.truncate_from_start(offset):
                self._epochs.save()
            self._write_checkpoint()

    # ---- retention and compaction ----------------------------------------------------------

    def apply_retention(self, now_ms: int | None = None) -> int:
        """Delete whole oldest segments per retention.ms / retention.bytes; returns how many.

        See ``strom.storage.retention``: an expired non-empty active segment is rolled first.
        """
        self._check_open()
        if self.offline is not None or self._deferred is not None:
            return 0  # a log not loaded yet: retention waits for its load
        now = self._clock() if now_ms is None else now_ms
        self.purge_retired(now)
        infos = [retention.SegmentInfo(s.base_offset, s.next_offset, s.size,
                                       s.max_timestamp if s.max_timestamp >= 0 else s.created_ms)
                 for s in self._segments]
        decision = retention.decide(infos, self.config, now, self._log_start_offset)
        if decision.delete_count == 0:
            return 0
        self._touch()
        if decision.roll_active:
            self._roll(now)
        doomed = self._segments[:decision.delete_count]
        del self._segments[:decision.delete_count]
        del self._bases[:decision.delete_count]
        self._log_start_offset = max(self._log_start_offset, self._bases[0])
        if self._epochs.truncate_from_start(self._log_start_offset):
            self._epochs.save()
        self._write_checkpoint()
        for seg in doomed:
            self._retire(seg, now)
        producer_state.delete_snapshots(self.directory, below=self._log_start_offset)
        log.info("%s-%d: retention deleted %d segments; log start offset is now %d", self.topic,
                 self.partition, len(doomed), self._log_start_offset)
        return len(doomed)

    def _retire(self, seg: LogSegment, now: int) -> None:
        """Delete a segment now, or rename it ``*.deleted`` and remove it after
        ``file.delete.delay.ms`` (Kafka's asynchronous delete: a read that already located the
        segment may still finish; a restart removes leftovers)."""
        delay = self.config.file_delete_delay_ms
        if delay <= 0:
            seg.delete()
            return
        self._retired.append((now + delay, seg.retire()))

    def purge_retired(self, now_ms: int, *, everything: bool = False) -> int:
        """Remove the files of retired segments whose delay has passed (all of them when
        ``everything``: at close, as nothing can read them any more); returns how many."""
        done = 0
        while self._retired and (everything or self._retired[0][0] <= now_ms):
            for path in self._retired.pop(0)[1]:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            done += 1
        return done

    def _cleanable_segments(self) -> list[compaction.CleanableSegment]:
        out: list[compaction.CleanableSegment] = []
        seen_dirty = False
        for seg in self._segments[:-1]:
            first = -1  # read only for the first dirty segment: max.compaction.lag.ms needs it
            if not seen_dirty and seg.next_offset > self._first_dirty_offset:
                seen_dirty = True
                h = seg.header_at(0)
                first = h.base_timestamp if h is not None else -1
            out.append(compaction.CleanableSegment(seg.base_offset, seg.next_offset, seg.size,
                                                   first, seg.max_timestamp))
        return out

    def needs_compaction(self, now_ms: int) -> bool:
        """Whether a compaction pass is due (:func:`strom.storage.compaction.compaction_due`)."""
        if not self.config.compact or self._deferred is not None or len(self._segments) < 2:
            return False
        return compaction.compaction_due(self._cleanable_segments(), self.config, now_ms,
                                         self._first_dirty_offset, self._tombstone_expiry)

    def compact(self, now_ms: int | None = None) -> int:
        """Keep the last record per key in closed segments; returns records removed.

        See ``strom.storage.compaction`` for the rules. Each changed segment is rewritten to
        ``<name>.log.cleaned``, fsynced, and renamed over the original (atomic); its indexes are
        deleted before the rename and rebuilt after, so a crash at any point leaves either the old
        or the new segment, never a mix.
        """
        self._check_open()
        if self.offline is not None:
            return 0
        now = self._clock() if now_ms is None else now_ms
        if not self.config.compact or len(self._segments) < 2:
            return 0
        prefix = compaction.cleanable_prefix(self._cleanable_segments(), self.config, now)
        cleanable = self._segments[:prefix]
        latest: dict[bytes, int] = {}
        for seg in cleanable:
            for h, data in seg.iter_batches():
                if not h.is_control:
                    compaction.update_key_map(latest, compaction.batch_records(data))
        removed_total = 0
        self._tombstone_expiry = None
        for seg in list(cleanable):
            removed_total += self._compact_segment(seg, latest, now)
        if cleanable:
            self._first_dirty_offset = max(self._first_dirty_offset, cleanable[-1].next_offset)
        if removed_total:
            log.info("%s-%d: compaction removed %d records", self.topic, self.partition,
                     removed_total)
        return removed_total

    def _compact_segment(self, seg: LogSegment, latest: dict[bytes, int], now: int) -> int:
        self._touch()
        cleaned = seg.log_path.with_name(seg.log_path.name + CLEANED_SUFFIX)
        removed = 0
        fd = os.open(cleaned, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        written = 0
        try:
            for h, data in seg.iter_batches():
                kept = compaction.filter_batch(h, data, latest, now,
                                               self.config.delete_retention_ms,
                                               seg.max_timestamp)
                removed += kept.removed
                due = kept.tombstone_expiry_ms
                if due is not None and (self._tombstone_expiry is None
                                        or due < self._tombstone_expiry):
                    self._tombstone_expiry = due
                if kept.data is not None:
                    os.write(fd, kept.data)
                    written += len(kept.data)
            if removed:
                os.fsync(fd)
        finally:
            os.close(fd)
        if not removed:
            cleaned.unlink()
            return 0
        i = self._segments.index(seg)
        seg.index.delete()
        seg.time_index.delete()
        seg.close()
        os.replace(cleaned, seg.log_path)
        fsync_dir(self.directory)
        if written == 0 and i > 0:
            seg.log_path.unlink()
            del self._segments[i]
            del self._bases[i]
            return removed
        new_seg = LogSegment.open(self.directory, seg.base_offset,
                                  index_interval_bytes=self.config.index_interval_bytes,
                                  max_index_bytes=self.config.segment_index_bytes,
                                  now_ms=seg.created_ms)
        new_seg.reset_indexes()
        new_seg.scan(0, check_crc=False, strict=False)
        new_seg.dirty = True
        new_seg.flush()
        self._segments[i] = new_seg
        return removed

    # ---- producer state --------------------------------------------------------------------

    @property
    def producer_state(self) -> ProducerStateManager:
        return self._producers

    def _rebuild_producer_state(self, names: list[str] | None = None, *,
                                empty_at: int = -1) -> None:
        """Load the newest snapshot within the log and replay batch headers from it to the end.

        Only headers are read (no decompression); after a clean close the snapshot sits at the
        log end, so nothing is replayed. ``empty_at``: the offset at which a clean stop
        recorded that the log had no producer state and wrote no snapshot
        (:data:`strom.storage.dir_checkpoint.NO_PRODUCERS`); if it is the end, the state is
        empty without reading anything. ``names``: the directory's listing, if already read
        (snapshots it names past the end are deleted, and the rest are at most ``end``).
        """
        end = self.log_end_offset
        producer_state.delete_snapshots(self.directory, above=end, names=names)
        expiration = self._producers.expiration_ms
        if empty_at == end:
            self._producers = ProducerStateManager(expiration, end)
            return
        state = producer_state.load_latest(self.directory, end, expiration, names)
        if state is None:
            state = ProducerStateManager(expiration, self._segments[0].base_offset)
        start = max(state.end_offset, self._segments[0].base_offset)
        i = self._segment_index(start)
        for seg in self._segments[i:]:
            if seg.next_offset <= start:
                continue
            found = seg.find(start) if seg.base_offset < start else None
            position = found.position if found is not None else 0
            for h, _ in seg.iter_batches(position):
                if h.last_offset >= start:
                    state.update(h)
        state.end_offset = max(state.end_offset, end)
        self._producers = state

    # ---- durability and lifecycle ----------------------------------------------------------

    def _write_checkpoint(self, *, sync: bool = True) -> None:
        write_values(self.directory / RECOVERY_CHECKPOINT, {
            "recovery-point": self._recovery_point,
            "log-start-offset": self._log_start_offset,
            "high-watermark": self._hw if self._hw_managed else -1,
        }, sync=sync)

    def flush(self) -> None:
        """fsync data and indexes, then move the recovery point to the log end offset."""
        self._flush(sync=True)

    def _flush(self, *, sync: bool) -> None:
        self._check_open()
        if self.offline is not None:
            return  # nothing more is written to a failed directory
        self._flush_data(sync=sync)
        self._commit_recovery_point(sync=sync)

    def _flush_data(self, *, sync: bool, own_epochs: bool = True) -> None:
        """Segments, indexes and the epoch cache: what must be durable before the recovery
        point moves past it (``sync=False``: written, not fsynced; see ``close``).
        ``own_epochs=False``: the epochs go into the log directory's file instead (a broker's
        stop, :meth:`close_offsets`), and the own recovery point does not move."""
        self._touch()
        for seg in self._segments:
            seg.flush(sync=sync)
        if own_epochs and self._epochs.unsaved:  # before the recovery point moves past them
            self._epochs.save(sync=sync)

    def _commit_recovery_point(self, *, sync: bool) -> None:
        self._recovery_point = self.log_end_offset
        self._unflushed_messages = 0
        self._last_flush_ms = self._clock()
        self._write_checkpoint(sync=sync)

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        for seg in self._segments:
            seg.index_interval_bytes = config.index_interval_bytes
        self._check_due()  # a shorter segment.ms or flush.ms

    def close(self, *, sync: bool = True) -> bool:
        """Flush, write checkpoints and the clean-shutdown marker, close the files.

        ``sync=False`` (a broker closing all its logs: :meth:`LogManager.close`) only writes
        the data files' pending parts (index entries; the epochs go into the log directory's
        file, :meth:`close_offsets`) without an fsync and closes
        the files; True then means the caller must make the file system durable, call
        :meth:`write_close_checkpoints`, make it durable again and call :meth:`mark_clean`
        (one ``syncfs`` per step for every log instead of ~7 fsyncs per changed log: 22.5 s
        to stop a broker right after writing to each of 10,000 partitions, issue 21 item 5).
        The order keeps what a per-file close guarantees after a power loss: no recovery
        point past durable data, no marker before everything is durable. False: nothing left
        to do (closed unchanged, offline, or ``sync``)."""
        if self._closed:
            return False
        if not self._touched:  # opened clean and unchanged: its files (marker included) are
            for seg in self._open_segments():  # still those of the last clean close
                seg.close()
            self._closed = True
            return False
        if self.offline is not None:  # no checkpoint, no marker: the next start recovers
            for seg in self._segments:
                try:
                    seg.close()
                except OSError:
                    with contextlib.suppress(OSError):
                        seg.drop_fd()
            self._closed = True
            return False
        self.purge_retired(0, everything=True)
        # alone (sync): saves the epoch cache too if it changed (no second write of it here);
        # a broker's stop writes every log's epochs into its log directory's file instead (a
        # file per log was a new inode per log whose epochs changed: issue 21 item 5)
        self._flush_data(sync=sync, own_epochs=sync)
        if sync:
            self.write_close_checkpoints(sync=True)
        for seg in self._segments:
            seg.close()  # flushed just above: only closes the descriptor
        self._closed = True
        if not sync:
            return True
        self.mark_clean()
        return False

    def write_close_checkpoints(self, *, sync: bool = False, own_checkpoint: bool = True
                                ) -> None:
        """The recovery point at the log end and the producer snapshot a clean close leaves;
        after ``close(sync=False)`` only once the data files are durable.

        ``own_checkpoint=False``: the recovery point moves in memory only, for the log
        directory's checkpoint files that the log manager writes next
        (:func:`strom.storage.dir_checkpoint.write_dir`): a file per log was a new inode per
        log at every stop; and no snapshot is written for a log without producer state (those
        files record that instead, :meth:`close_offsets`; Kafka writes a snapshot per log)."""
        if own_checkpoint:
            self._commit_recovery_point(sync=sync)
        else:
            self._recovery_point = self.log_end_offset
            self._unflushed_messages = 0
        self._producers.end_offset = max(self._producers.end_offset, self.log_end_offset)
        if own_checkpoint or self._producers.producers:
            producer_state.write_snapshot(self.directory, self._producers, sync=sync)

    def close_offsets(self) -> LogOffsets:
        """What the log directory's checkpoint files record for this log at a clean stop."""
        deferred = self._deferred
        if deferred is not None:  # known only if its last stop recorded it
            no_producers = deferred.values.get(NO_PRODUCERS_AT, -1) == self._end
            epochs = deferred.epochs  # None: its own file holds them
        else:
            no_producers = (not self._producers.producers
                            and self._recovery_point == self.log_end_offset)
            epochs = self._epochs.entries
        return LogOffsets(self.topic, self.partition, self._recovery_point,
                          self._log_start_offset, self._hw if self._hw_managed else -1,
                          no_producers, epochs)

    def mark_clean(self, *, sync: bool = True, link_from: Path | None = None,
                   text: bytes = b"") -> None:
        """Write the clean-shutdown marker of a closed log: only once everything the close
        wrote is durable (the marker tells the next start that no recovery is needed).

        ``link_from``: a file on the same file system holding ``text``, hard-linked as the
        marker: allocating an inode costs ~0.46 ms of CPU on this machine's
        ext4 and a link 9 us, for each of 10,000 logs at a broker's stop. Falls back to
        creating the file (e.g. EMLINK past ext4's 65,000 links). ``text``: what the marker
        holds (``link_from``'s content; :data:`strom.storage.dir_checkpoint.MARKER_TEXT` when
        the offsets and epochs are in the log directory's checkpoint files, empty when in the
        log's own)."""
        marker = self.directory / CLEAN_SHUTDOWN  # gone: the close's flush removed it
        linked = False
        if link_from is not None:
            try:
                os.link(link_from, marker)
                linked = True
            except OSError:
                pass
        if not linked:
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                if text:
                    os.write(fd, text)
            finally:
                os.close(fd)
        if sync:
            fsync_dir(self.directory)

    def delete(self) -> None:
        """Close the log and remove its directory."""
        if not self._closed:
            for seg in self._open_segments():  # not read just to go
                seg.delete()
            self._closed = True
        shutil.rmtree(self.directory, ignore_errors=True)

    def _check_open(self) -> None:
        if self._closed:
            raise StromError(ErrorCode.KAFKA_STORAGE_ERROR,
                             f"log {self.topic}-{self.partition} is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self.offline is not None:
            raise StromError(ErrorCode.KAFKA_STORAGE_ERROR,
                             f"log {self.topic}-{self.partition} is offline: its directory "
                             f"{self.directory.parent} failed I/O ({self.offline}); fix the "
                             f"disk and restart the broker")

    def take_offline(self, reason: str) -> None:
        """No more writes (reads go on); the next start recovers the tail (no clean marker)."""
        if self.offline is None:
            self.offline = reason

    def _io_failed(self, exc: OSError, start: int) -> StromError:
        """A write failed: cut back to ``start`` what reached the files, go offline, tell the
        manager; the error to raise."""
        self.take_offline(_io_reason(exc))
        self._rollback(start)
        if self.on_io_error is not None:
            self.on_io_error(self, exc)
        return StromError(ErrorCode.KAFKA_STORAGE_ERROR,
                          f"writing {self.topic}-{self.partition} failed ({self.offline}); "
                          f"nothing of this request was kept, and the log is offline")

    def _rollback(self, offset: int) -> None:
        """Best effort, in memory first: segments past ``offset`` dropped, the last one cut.
        Whatever cannot be cut now (the file system refuses even that) is cut by recovery at
        the next start, which trusts nothing past the recovery point."""
        i = self._segment_index(offset)
        for seg in self._segments[i + 1:]:
            with contextlib.suppress(OSError):
                seg.delete()
        del self._segments[i + 1:]
        del self._bases[i + 1:]
        seg = self._segments[i]
        if seg.next_offset > offset:
            h = seg.find(offset)
            position = h.position if h is not None else seg.size
            try:
                seg.truncate_to_position(position)
            except OSError:
                seg.size = position
                seg.next_offset = offset
        self._hw = min(self._hw, offset)
        self._recovery_point = min(self._recovery_point, offset)
        self._epochs.truncate_from_end(offset)
        with contextlib.suppress(OSError):
            self._rebuild_producer_state()


def files_size(directory: Path) -> int:
    """Bytes of the segment files in a log's directory (0 if it cannot be read), without
    opening the log: a plain file-system read, safe in any thread."""
    try:
        return sum(os.stat(directory / n).st_size
                   for n in os.listdir(directory) if n.endswith(".log"))
    except OSError:
        return 0


def _io_reason(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0, "EIO")
    return f"{name}: {exc.strerror or exc}"


def _assign_epoch(epochs: LeaderEpochCache, h: BatchHeader) -> None:
    epochs.assign(h.leader_epoch, h.base_offset)


def _whole_batches(data: bytes, first_size: int, limit: int) -> bytes:
    """Cut ``data`` (starting with a whole batch of ``first_size``) after its last whole batch
    below offset ``limit``."""
    pos = first_size
    total = len(data)
    while total - pos >= HEADER_SIZE:
        base, length = _OFFSET_LEN.unpack_from(data, pos)
        size = LOG_OVERHEAD + length
        if base >= limit or pos + size > total:
            break
        pos += size
    return data if pos == total else data[:pos]


def _batch_count(part: bytes | memoryview) -> int:
    """How many batches ``part`` holds by their length fields, 0 unless it ends exactly at the
    end of one (the batches themselves are validated by the append)."""
    pos, count, total = 0, 0, len(part)
    while pos < total:
        if total - pos < LOG_OVERHEAD:
            return 0
        _, length = _OFFSET_LEN.unpack_from(part, pos)
        if length <= 0:
            return 0
        pos += LOG_OVERHEAD + length
        count += 1
    return count if pos == total else 0


def _epoch_or_none(leader_epoch: int) -> int:
    """A batch's partition leader epoch, or -1 for one written without (Kafka: NO_PARTITION_
    LEADER_EPOCH answers an empty epoch)."""
    return leader_epoch if leader_epoch >= 0 else -1
