"""Log compaction (``cleanup.policy=compact``): keep the last record per key.

A compacted topic is a table's changelog (``__consumer_offsets`` is one), so only the newest value
per key matters and a tombstone (value None) deletes the key once consumers had
``delete.retention.ms`` to see it. This module holds the pure parts — the key -> latest-offset map
and the rewriting of one batch — while ``PartitionLog.compact`` does the file work.

What it does, as Kafka does:
* Only closed segments are cleaned (never the active one), and only up to the first segment holding
  a record younger than ``min.compaction.lag.ms``; the key map covers exactly those segments.
* Offsets are preserved: a rewritten batch keeps its base offset, last offset delta, base timestamp
  and producer fields, so readers see gaps, never renumbering.
* Records with a null key are kept (Kafka rejects them at produce time on compacted topics; we keep
  whatever got in rather than silently dropping data).
* Control batches are kept as they are.
* A pass runs only when it can pay off (:func:`compaction_due`, Kafka's cleaner manager): the
  not-yet-cleaned share of the cleanable bytes exceeds ``min.cleanable.dirty.ratio``, or the oldest
  dirty record is older than ``max.compaction.lag.ms``, or a tombstone the last pass kept has
  outlived ``delete.retention.ms`` (KIP-534). Where the first dirty offset lives only in memory,
  a broker restart counts everything as dirty, as Kafka does without its cleaner checkpoint.

Where it differs (simpler, documented):
* A tombstone expires when its own timestamp is older than ``delete.retention.ms`` (Kafka >= 3.1
  stamps a delete horizon into the batch the first time it is cleaned).
* Rewritten batches are stored uncompressed (Kafka recompresses with the topic's codec).
* Segments are cleaned one by one and are not merged; a segment left empty is deleted.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from strom.protocol.batch import (
    ATTR_COMPRESSION_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    compute_crc,
)
from strom.protocol.records import Record, decode_batches
from strom.storage.config import LogConfig

_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC = struct.Struct(">I")


def _varint(value: int, out: bytearray) -> None:
    zigzag = (value << 1) ^ (value >> 63)
    while zigzag >= 0x80:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)


def _bytes_field(data: bytes | None, out: bytearray) -> None:
    if data is None:
        _varint(-1, out)
    else:
        _varint(len(data), out)
        out += data


def encode_record(offset_delta: int, timestamp_delta: int, key: bytes | None,
                  value: bytes | None, headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    """One Record (v2 record format) with its length prefix."""
    body = bytearray(b"\x00")  # record attributes: unused
    _varint(timestamp_delta, body)
    _varint(offset_delta, body)
    _bytes_field(key, body)
    _bytes_field(value, body)
    _varint(len(headers), body)
    for name, header_value in headers:
        _bytes_field(name.encode(), body)
        _bytes_field(header_value, body)
    out = bytearray()
    _varint(len(body), out)
    return bytes(out + body)


def rebuild_batch(h: BatchHeader, records: Sequence[Record]) -> bytes:
    """An uncompressed batch holding ``records`` with ``h``'s offsets, epoch and producer fields."""
    log_append = h.log_append_time
    body = b"".join(
        encode_record(r.offset - h.base_offset,
                      0 if log_append else r.timestamp - h.base_timestamp,
                      r.key, r.value, r.headers)
        for r in records)
    max_ts = h.max_timestamp if log_append else max(r.timestamp for r in records)
    attributes = h.attributes & ~ATTR_COMPRESSION_MASK
    size = HEADER_SIZE + len(body)
    buf = bytearray(_HEADER.pack(h.base_offset, size - LOG_OVERHEAD, h.leader_epoch, 2, 0,
                                 attributes, h.last_offset_delta, h.base_timestamp, max_ts,
                                 h.producer_id, h.producer_epoch, h.base_sequence,
                                 len(records)))
    buf += body
    _CRC.pack_into(buf, 17, compute_crc(buf, 0, size))
    return bytes(buf)


def batch_records(data: bytes | memoryview) -> list[Record]:
    return list(decode_batches(bytes(data)))


def update_key_map(latest: dict[bytes, int], records: Iterable[Record]) -> None:
    """Record each key's latest offset (later calls must cover later offsets)."""
    for r in records:
        if r.key is not None:
            latest[r.key] = r.offset


@dataclass(frozen=True, slots=True)
class FilteredBatch:
    """What compaction left of one batch."""

    data: bytes | None  # the batch to write (the input unchanged if nothing went), None if empty
    removed: int  # records removed
    tombstone_expiry_ms: int | None  # when the earliest tombstone kept becomes removable


def filter_batch(h: BatchHeader, data: bytes | memoryview, latest: dict[bytes, int],
                 now_ms: int, delete_retention_ms: int, fallback_ts: int) -> FilteredBatch:
    """Drop superseded records and expired tombstones from one batch.

    Unchanged batches are returned byte for byte. ``fallback_ts`` ages tombstones that carry no
    timestamp.
    """
    if h.is_control or h.records_count == 0:
        return FilteredBatch(bytes(data), 0, None)
    records = batch_records(data)
    kept = []
    expiry: int | None = None
    for r in records:
        if r.key is None:
            kept.append(r)
            continue
        if latest.get(r.key, r.offset) != r.offset:
            continue  # superseded by a later record with the same key
        if r.value is None:
            ts = r.timestamp if r.timestamp >= 0 else fallback_ts
            if now_ms - ts > delete_retention_ms:
                continue  # an expired tombstone
            due = ts + delete_retention_ms + 1
            expiry = due if expiry is None else min(expiry, due)
        kept.append(r)
    removed = len(records) - len(kept)
    if removed == 0:
        return FilteredBatch(bytes(data), 0, expiry)
    if not kept:
        return FilteredBatch(None, removed, expiry)
    return FilteredBatch(rebuild_batch(h, kept), removed, expiry)


@dataclass(frozen=True, slots=True)
class CleanableSegment:
    """What the compaction decision needs of one closed segment."""

    base_offset: int
    next_offset: int
    size: int
    first_timestamp: int  # the first batch's base timestamp (-1 if none)
    max_timestamp: int


def cleanable_prefix(closed: Sequence[CleanableSegment], config: LogConfig,
                     now_ms: int) -> int:
    """How many of the oldest closed segments a pass may clean: up to the first one holding a
    record younger than ``min.compaction.lag.ms``."""
    if config.min_compaction_lag_ms <= 0:
        return len(closed)
    horizon = now_ms - config.min_compaction_lag_ms
    for k, seg in enumerate(closed):
        if seg.max_timestamp > horizon:
            return k
    return len(closed)


def compaction_due(closed: Sequence[CleanableSegment], config: LogConfig, now_ms: int,
                   first_dirty_offset: int, tombstone_expiry_ms: int | None) -> bool:
    """Whether a compaction pass is worth running now (Kafka's ``LogCleanerManager`` rules).

    ``first_dirty_offset`` is where the last pass stopped (0 before any pass: all dirty).
    """
    if tombstone_expiry_ms is not None and now_ms >= tombstone_expiry_ms:
        return True
    cleanable = closed[:cleanable_prefix(closed, config, now_ms)]
    dirty = [s for s in cleanable if s.next_offset > first_dirty_offset]
    if not dirty:
        return False
    first = dirty[0].first_timestamp
    if first >= 0 and now_ms - first > config.max_compaction_lag_ms:
        return True  # Kafka's "needCompactionNow"
    dirty_bytes = sum(s.size for s in dirty)
    total = sum(s.size for s in cleanable)
    return dirty_bytes > 0 and dirty_bytes / total > config.min_cleanable_dirty_ratio
