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

Where it differs (simpler, documented):
* A tombstone expires when its own timestamp is older than ``delete.retention.ms`` (Kafka >= 3.1
  stamps a delete horizon into the batch the first time it is cleaned).
* Rewritten batches are stored uncompressed (Kafka recompresses with the topic's codec).
* Segments are cleaned one by one and are not merged; a segment left empty is deleted.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence

from strom.protocol.batch import (
    ATTR_COMPRESSION_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    compute_crc,
)
from strom.protocol.records import Record, decode_batches

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


def filter_batch(h: BatchHeader, data: bytes | memoryview, latest: dict[bytes, int],
                 now_ms: int, delete_retention_ms: int, fallback_ts: int
                 ) -> tuple[bytes | None, int]:
    """(new batch bytes or None if nothing is left, records removed) for one batch.

    Unchanged batches are returned byte for byte. ``fallback_ts`` ages tombstones that carry no
    timestamp.
    """
    if h.is_control or h.records_count == 0:
        return bytes(data), 0
    records = batch_records(data)
    kept = []
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
        kept.append(r)
    removed = len(records) - len(kept)
    if removed == 0:
        return bytes(data), 0
    if not kept:
        return None, removed
    return rebuild_batch(h, kept), removed
