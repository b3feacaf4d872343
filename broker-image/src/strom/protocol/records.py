"""Encoding and decoding of records inside RecordBatch v2: our codec interface.

The per-record work decides client throughput, so the byte work is done by aiokafka's compiled
(Cython) RecordBatch v2 codec — measured here at ~2.6M records/s encode and ~5.9M records/s decode
against ~0.5M/s for pure Python (see docs/decisions.md). It is pinned in pyproject.toml and wrapped
here so that the rest of Strom never imports aiokafka, and golden-byte tests pin its output.
Compression (gzip, snappy, lz4, zstd) is applied to whole batches by the builder, via cramjam.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Protocol

from aiokafka.codec import snappy_decode
from aiokafka.record.default_records import (
    DefaultRecordBatch,
    DefaultRecordBatchBuilder,
)
from crc32c import crc32c

from strom.protocol.batch import (
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTRIBUTES_AT,
    HEADER_LEAD,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    BatchHeader,
    compute_crc,
    parse_header,
)
from strom.protocol.errors import ErrorCode, StromError

Header = tuple[str, bytes | None]


class Compression(enum.IntEnum):
    """Codec ids as stored in the low 3 attribute bits (Kafka's numbering)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def parse(cls, name: str | None) -> Compression:
        if name is None or name == "" or name.lower() in ("none", "uncompressed"):
            return cls.NONE
        try:
            return cls[name.upper()]
        except KeyError:
            raise ValueError(
                f"compression_type={name!r} is not supported; use one of "
                "none, gzip, snappy, lz4, zstd"
            ) from None


class TimestampType(enum.IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


@dataclass(slots=True)
class Record:
    """One consumed record (what a consumer's poll returns).

    Not frozen on purpose: a frozen dataclass costs ~1.6 µs per instance (its __init__ goes
    through object.__setattr__), a plain slotted one ~0.3 µs, and this object is created once per
    consumed record (measured: consumer catch-up 254k -> 390k records/s). Treat it as read-only.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: TimestampType
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    leader_epoch: int = -1


class BatchBuilder:
    """Accumulates records for one partition into one RecordBatch v2.

    ``append`` returns False when the batch is full (``batch_size`` reached); the caller then
    builds it and starts a new one. The first record is always accepted, however large.
    """

    __slots__ = ("_builder", "compression", "count", "max_bytes", "raw_append")

    def __init__(
        self,
        compression: Compression = Compression.NONE,
        batch_size: int = 16384,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
    ) -> None:
        self.compression = compression
        self.max_bytes = batch_size
        self._builder = DefaultRecordBatchBuilder(
            magic=2,
            compression_type=int(compression),
            is_transactional=0,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            batch_size=batch_size,
        )
        #: records appended so far (the next record's offset delta)
        self.count = 0
        #: The compiled codec's append, for the producer's per-record path where even one
        #: Python call shows in profiles: ``raw_append(count, timestamp_ms, key, value,
        #: headers_list)`` returns None when the batch is full; on success the caller must
        #: increment ``count``. Everything else uses ``append``/``try_append``.
        self.raw_append = self._builder.append

    def append(
        self,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int | None = None,
        headers: Sequence[Header] = (),
    ) -> bool:
        # positional: the compiled codec parses keyword arguments measurably slower
        if self._builder.append(self.count, timestamp_ms, key, value, list(headers)) is None:
            return False
        self.count += 1
        return True

    def try_append(self, key: bytes | None, value: bytes | None, timestamp_ms: int | None,
                   headers: list[Header]) -> int:
        """``append`` for the producer's per-record path: the record's index, or -1 when full.

        ``headers`` must already be a list (the codec's type; it only reads it), which saves the
        copy ``append`` makes, and the index saves the caller a ``len()``.
        """
        count = self.count
        if self._builder.append(count, timestamp_ms, key, value, headers) is None:
            return -1
        self.count = count + 1
        return count

    def set_producer_state(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
        self._builder.set_producer_state(producer_id, producer_epoch, base_sequence)

    def __len__(self) -> int:
        return self.count

    def size_in_bytes(self) -> int:
        return int(self._builder.size())

    def build(self) -> bytes:
        return bytes(self._builder.build())

    def build_buffer(self) -> bytearray:
        """``build`` without the copy into ``bytes``: the codec's own buffer, which nothing
        writes to afterwards (call once, then drop the builder). The producer sends 1 MiB
        batches; the copy was a measurable share of its CPU at 1 KiB records."""
        buf: bytearray = self._builder.build()
        return buf


_LENGTH = struct.Struct(">i")
_PRODUCER_STATE = struct.Struct(">qhi")  # producerId, producerEpoch, baseSequence at byte 43
_CRC = struct.Struct(">I")


def restamp_producer_state(batch: bytes | bytearray, producer_id: int, producer_epoch: int,
                           base_sequence: int) -> bytes:
    """A copy of one built batch with new producer id/epoch/base sequence and its CRC redone.

    For an idempotent producer's batch the broker refused without writing it (unknown producer,
    stale epoch) and that must be resent under a new epoch: the fields sit inside the CRC.
    """
    buf = bytearray(batch)
    _PRODUCER_STATE.pack_into(buf, 43, producer_id, producer_epoch, base_sequence)
    _CRC.pack_into(buf, 17, compute_crc(buf, 0, len(buf)))
    return bytes(buf)


def encode_batch(
    records: Sequence[tuple[bytes | None, bytes | None]],
    compression: Compression = Compression.NONE,
    timestamp_ms: int | None = None,
    headers: Sequence[Header] = (),
) -> bytes:
    """Build one batch from (key, value) pairs; convenience for tests and tools."""
    builder = BatchBuilder(compression, batch_size=(1 << 31) - 1)
    for key, value in records:
        builder.append(key, value, timestamp_ms, headers)
    return builder.build()


def recompress(buf: bytes | bytearray | memoryview, headers: Sequence[BatchHeader],
               target: Compression) -> bytes | None:
    """The batches of a produce request, each whose codec is not ``target`` rebuilt with it
    (a topic's ``compression.type``, as Kafka's log validator recompresses); None if every batch
    already uses it.

    Producer fields, the transactional flag, offset deltas and timestamps are kept, so sequence
    checks and offset assignment behave as for the original; control batches are kept as sent.
    The records were validated before (``strom.protocol.validation``), so decoding cannot fail.
    """
    if all(h.compression == target or h.is_control for h in headers):
        return None
    mv = memoryview(buf)
    parts: list[bytes] = []
    for h in headers:
        raw = mv[h.position : h.position + h.size]
        if h.compression == target or h.is_control:
            parts.append(bytes(raw))
            continue
        builder = DefaultRecordBatchBuilder(
            magic=2, compression_type=int(target), is_transactional=int(h.is_transactional),
            producer_id=h.producer_id, producer_epoch=h.producer_epoch,
            base_sequence=h.base_sequence, batch_size=(1 << 31) - 1)
        for r in DefaultRecordBatch(bytes(raw)):
            builder.append(r.offset - h.base_offset, r.timestamp, r.key, r.value,
                           list(r.headers))
        parts.append(bytes(builder.build()))
    return b"".join(parts)


def decode_batches(
    buf: bytes | memoryview, topic: str = "", partition: int = -1, start_offset: int = 0
) -> Iterator[Record]:
    """Yield the records of every whole batch in ``buf`` whose offset is >= ``start_offset``.

    Partial trailing batches (a fetch cut at max_bytes) are skipped. Compressed batches are
    decompressed here, in the consumer, never in the broker. Control batches are skipped.
    """
    for records in decode_batch_lists(buf, topic, partition, start_offset):
        yield from records


def decode_batch_lists(
    buf: bytes | memoryview, topic: str = "", partition: int = -1, start_offset: int = 0, *,
    check_crcs: bool = False, strict: bool = False, run_records: int = 0,
) -> Iterator[list[Record]]:
    """:func:`decode_batches` a list at a time: a list comprehension per list instead of a
    generator step per record (the consumer's hot loop: 1.75M -> 2.5M records/s decoded,
    measured on 200 x 1000 records of 100 B).

    One list per batch, or with ``run_records`` one per run of consecutive batches that share
    their leader epoch and CreateTime stamps, closed once it holds ``run_records`` records (by
    the headers' counts): a keyed produce over 1,000 partitions writes batches of ~10 records,
    and a comprehension, a generator step and a take per batch were most of what a catch-up
    over 1,000 partitions cost beyond one over 10 (docs/decisions.md, "Consume at 1,000
    partitions: runs of batches").

    ``check_crcs`` verifies each batch's CRC-32C before decoding it (Kafka's consumer
    ``check.crcs``). ``strict`` (the consumer) also refuses bytes after the last whole batch that
    cannot be the start of one (a length below the header size, a magic other than 2), which
    lenient walking would take for a batch cut at a size limit. Either raises StromError
    (CORRUPT_MESSAGE) only when the generator reaches the bad batch: the records before it are
    yielded first.
    """
    mv = memoryview(buf)
    for run, epoch, first_base, append_time in _runs(mv, topic, partition, start_offset,
                                                     check_crcs, strict, run_records):
        yield from _decode_run(mv, run, topic, partition, epoch, first_base, start_offset,
                               append_time)


#: A run to decode: its batches' (position, end), their leader epoch, the first one's base
#: offset, and the LogAppendTime stamp of a one-batch run that has one.
_Run = tuple[list[tuple[int, int]], int, int, int | None]


def _runs(mv: memoryview, topic: str, partition: int, start_offset: int, check_crcs: bool,
          strict: bool, run_records: int) -> Iterator[_Run]:
    """The whole batches with records at or past ``start_offset``, control batches left out,
    grouped into runs: consecutive CreateTime batches of one leader epoch until they count
    ``run_records`` records, each LogAppendTime batch alone (its stamp is its own). Raises at a
    bad CRC (``check_crcs``) or, ``strict``, at bytes that cannot start a batch, after the run
    before it came out (its records are delivered before the error)."""
    # One unpack of the header's leading fields per batch, no BatchHeader, no copy, and no
    # generator step per batch: at 1,000 partitions a catch-up holds ~15 times the batches
    # (10-20 records each), and the per-batch part of this loop was ~40 % of the decode
    # (docs/decisions.md, strom21).
    unpack = HEADER_LEAD.unpack_from
    total = len(mv)
    end, after = 0, start_offset
    run: list[tuple[int, int]] = []
    run_epoch = count = run_base = 0
    while total - end >= HEADER_SIZE:
        base, length, epoch, _, crc, attributes, last_delta, _, max_ts = unpack(mv, end)
        position, size = end, LOG_OVERHEAD + length
        if length < HEADER_SIZE - LOG_OVERHEAD or position + size > total:
            break  # a batch cut at a size limit (or damage: ``strict`` looks below)
        end, after = position + size, base + last_delta + 1
        if after <= start_offset:
            continue
        if check_crcs and crc32c(mv[position + ATTRIBUTES_AT:end]) != crc:  # compute_crc, inlined
            if run:
                yield run, run_epoch, run_base, None
            raise _corrupt(parse_header(mv, position), topic, partition,
                           f"its CRC-32C does not match (stored {crc:#010x}): the bytes were "
                           f"damaged")
        if attributes & ATTR_CONTROL:
            continue
        if run and (epoch != run_epoch or attributes & ATTR_TIMESTAMP_TYPE):
            yield run, run_epoch, run_base, None
            run = []
        if attributes & ATTR_TIMESTAMP_TYPE:
            yield [(position, end)], epoch, base, max_ts
            continue
        if not run:
            run_epoch, count, run_base = epoch, 0, base
        run.append((position, end))
        count += last_delta + 1
        if count >= run_records:
            yield run, run_epoch, run_base, None
            run = []
    if run:
        yield run, run_epoch, run_base, None
    rest = len(mv) - end
    if strict and rest > 0:
        length = _LENGTH.unpack_from(mv, end + 8)[0] if rest >= LOG_OVERHEAD else 0
        magic = mv[end + 16] if rest > 16 else MAGIC
        # a batch cut at a size limit is fine after whole ones; a buffer with none is not
        if end == 0 or length < HEADER_SIZE - LOG_OVERHEAD or magic != MAGIC:
            raise StromError(
                ErrorCode.CORRUPT_MESSAGE,
                f"the bytes after offset {after - 1} of {topic}-{partition} are not a record "
                f"batch (length {length}, magic {magic}): the log is damaged there; the "
                f"consumer stays at offset {after}: seek() past the damage to skip it")


def _decode_run(
    mv: memoryview, run: list[tuple[int, int]], topic: str, partition: int, epoch: int,
    first_base: int, start_offset: int = 0, append_time: int | None = None,
) -> Iterator[list[Record]]:
    """The records of the batches ``run`` spans as one list (none if empty), or, when one of
    them does not decode, those before it, batch by batch, then its error."""
    try:
        # the codec reads the views in place (a bytes copy cost ~1.5 us a batch); the
        # records' keys and values are new bytes objects all the same
        records = _records(mv, run, topic, partition, epoch, append_time)
    except Exception as exc:  # the compiled codec raises assorted types on garbage
        if len(run) == 1:
            raise _corrupt(parse_header(mv, run[0][0]), topic, partition,
                           f"it does not decode: {exc}") from exc
        for one in run:  # find the bad batch: what precedes it is delivered first
            yield from _decode_run(mv, [one], topic, partition, epoch, first_base,
                                   start_offset, append_time)
        return
    if first_base < start_offset:  # only a fetch's first batch can start before it
        records = [r for r in records if r.offset >= start_offset]
    if records:
        yield records


def _records(mv: memoryview, run: list[tuple[int, int]], topic: str, partition: int,
             epoch: int, append_time: int | None) -> list[Record]:
    batches = [DefaultRecordBatch(mv[position:end]) for position, end in run]
    rs = batches[0] if len(batches) == 1 else chain.from_iterable(batches)
    # One comprehension per timestamp type, so the per-record body has no test.
    if append_time is not None:
        return [Record(topic, partition, r.offset, append_time,
                       TimestampType.LOG_APPEND_TIME, r.key, r.value,
                       tuple(hd) if (hd := r.headers) else (), epoch) for r in rs]
    create = TimestampType.CREATE_TIME
    return [Record(topic, partition, r.offset, r.timestamp, create, r.key, r.value,
                   tuple(hd) if (hd := r.headers) else (), epoch) for r in rs]


def _corrupt(h: BatchHeader, topic: str, partition: int, why: str) -> StromError:
    return StromError(
        ErrorCode.CORRUPT_MESSAGE,
        f"record batch at offsets {h.base_offset}..{h.last_offset} of {topic}-{partition} is "
        f"corrupt: {why}; the consumer stays at the first record it did not return: seek() to "
        f"{h.next_offset} to skip the batch")


class RecordTaker:
    """The records of one fetched buffer, decoded a run of batches at a time as a consumer
    takes them: a poll returns whole run lists (no per-record step) and at most one run
    (``RUN_RECORDS`` records and a batch) is decoded beyond what it returns, so a big
    prefetched answer never becomes one huge list.

    A corrupt batch ends the taking, as in Kafka's consumer: the records before it are returned
    first, then every later ``take`` raises its error (``error``), so the position never moves
    past a record that was not delivered; only a seek gets past it.
    """

    __slots__ = ("_batches", "_pending", "_pos", "error")

    #: Records a run of small batches is decoded to (by their headers' counts): enough to
    #: take a keyed catch-up's ~10-record batches a few dozen at a time, and Kafka's default
    #: ``max.poll.records``, so a default poll decodes about what it returns.
    RUN_RECORDS = 500

    def __init__(self, buf: bytes | memoryview, topic: str, partition: int,
                 start_offset: int, *, check_crcs: bool = False) -> None:
        self._batches = decode_batch_lists(buf, topic, partition, start_offset,
                                           check_crcs=check_crcs, strict=True,
                                           run_records=self.RUN_RECORDS)
        self._pending: list[Record] = []
        self._pos = 0
        self.error: StromError | None = None

    def take(self, n: int) -> list[Record]:
        """Up to ``n`` next records (fewer when the buffer is exhausted or a corrupt batch
        follows); raises the corrupt batch's error once nothing precedes it."""
        out: list[Record] = []
        while len(out) < n:
            if self._pos >= len(self._pending):
                if self.error is not None:
                    break
                try:
                    following = next(self._batches, None)
                except StromError as exc:
                    self.error = exc
                    break
                if following is None:
                    break
                self._pending, self._pos = following, 0
            pending, pos = self._pending, self._pos
            if pos == 0 and len(pending) <= n - len(out):
                chunk = pending  # the whole run's list: no copy
            else:
                chunk = pending[pos:pos + n - len(out)]
            self._pos = pos + len(chunk)
            out += chunk
        if not out and self.error is not None:
            raise self.error
        return out


class RawRecord(Protocol):
    """One record as the compiled codec decodes it (no copy into :class:`Record`)."""

    @property
    def offset(self) -> int: ...

    @property
    def timestamp(self) -> int: ...

    @property
    def key(self) -> bytes | None: ...


def raw_records(batch_bytes: bytes | memoryview) -> Iterator[RawRecord]:
    """The records of one whole batch (``batch_bytes`` is exactly one), decompressed with the
    codec its attributes name; iterating raises on bytes that are not the records the header
    declares (the codec checks lengths, counts and leftover bytes)."""
    return iter(DefaultRecordBatch(batch_bytes))


def snappy_decompress(payload: bytes | memoryview) -> bytes:
    """Kafka's snappy payload (xerial framing, as Java clients write it, or a raw block)."""
    out: bytes = snappy_decode(payload)
    return out


def decode_key_values(batch_bytes: bytes) -> Iterator[tuple[int, int, bytes | None, bytes | None]]:
    """Yield (offset, timestamp, key, value) of one batch; used by log compaction."""
    if len(batch_bytes) < HEADER_SIZE:
        return
    for r in DefaultRecordBatch(bytes(batch_bytes)):
        yield r.offset, r.timestamp, r.key, r.value
