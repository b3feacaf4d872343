"""The one-batch append path (a produce over many partitions sends one batch per partition,
issue 21) leaves exactly what the general path leaves: the same file bytes, index entries,
segment rolls, producer state and results as the same batches appended in one request, and
the log's config-derived rules follow a config change at once."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from strom.protocol.batch import BatchHeader, parse_header, patch_offsets, validate_batches
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.records import BatchBuilder, Compression
from strom.storage import LogConfig, PartitionLog
from strom.storage.segment import LogSegment

from .conftest import Clock, batch

OpenLog = Callable[..., PartitionLog]


def _files(log: PartitionLog) -> dict[str, bytes]:
    log.flush()
    return {p.name: p.read_bytes() for p in sorted(log.directory.iterdir())
            if p.suffix in (".log", ".index", ".timeindex")}


def _idempotent(n: int, seq: int, start: int) -> bytes:
    builder = BatchBuilder(Compression.NONE, producer_id=7, producer_epoch=0, base_sequence=seq)
    for i in range(n):
        builder.append(b"k%d" % (start + i), b"v" * 30, 1_700_000_000_000 + i)
    return builder.build()


def test_one_batch_at_a_time_equals_one_request(open_log: OpenLog) -> None:
    config = LogConfig(segment_bytes=4096, index_interval_bytes=300)
    one = open_log(config, name="one-0")
    many = open_log(config, name="many-0")
    batches = [_idempotent(1 + i % 5, seq=sum(1 + j % 5 for j in range(i)), start=i * 10)
               for i in range(60)]
    singles = [one.append_as_leader(b, leader_epoch=2) for b in batches]
    for i in range(0, len(batches), 6):  # requests of 6 batches: the general path
        many.append_as_leader(b"".join(batches[i:i + 6]), leader_epoch=2)
    assert one.segment_count > 2  # rolls happened on the one-batch path
    assert _files(one) == _files(many)
    assert one.log_end_offset == many.log_end_offset
    assert [(s.base_offset, s.last_offset, s.record_count, s.size_bytes, s.max_timestamp)
            for s in singles][:3] == [(0, 0, 1, len(batches[0]), 1_700_000_000_000),
                                      (1, 2, 2, len(batches[1]), 1_700_000_000_001),
                                      (3, 5, 3, len(batches[2]), 1_700_000_000_002)]
    assert one.producer_state.to_snapshot() == many.producer_state.to_snapshot()
    assert 7 in one.producer_state.producers
    retry = one.append_as_leader(batches[-1], leader_epoch=2)  # a retry: the same duplicate
    assert retry.duplicate and retry.base_offset == singles[-1].base_offset


def test_one_batch_segment_append_writes_what_a_patched_copy_writes(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    vectored, copied = (LogSegment.create(tmp_path / d, 0, index_interval_bytes=100,
                                          max_index_bytes=1 << 16, now_ms=0)
                        for d in ("a", "b"))
    offset = 0
    for i in range(20):
        raw = batch(1 + i % 3, start=i * 5, ts=1_700_000_000_000 + (i * 7) % 11)
        h = parse_header(raw).with_offsets(offset, 4)
        vectored.append(raw, [h], offsets_from_headers=True)
        patched = bytearray(raw)
        patch_offsets(patched, 0, offset, 4)
        copied.append(patched, [parse_header(patched)])
        offset = h.next_offset
    assert vectored.read_at(0, vectored.size) == copied.read_at(0, copied.size)
    for field in ("size", "next_offset", "max_timestamp", "max_timestamp_batch",
                  "bytes_since_index"):
        assert getattr(vectored, field) == getattr(copied, field), field
    assert len(vectored.index) > 3
    assert (vectored.index.offsets, vectored.index.positions) == (copied.index.offsets,
                                                                  copied.index.positions)
    assert (vectored.time_index.timestamps, vectored.time_index.offsets) == (
        copied.time_index.timestamps, copied.time_index.offsets)
    validate_batches(vectored.read_at(0, vectored.size))
    vectored.close()
    copied.close()


def test_config_change_applies_to_the_next_append(open_log: OpenLog, clock: Clock) -> None:
    log = open_log(LogConfig())
    log.append_as_leader(batch(2, key=None), leader_epoch=0)
    log.config = dataclasses.replace(log.config, message_timestamp_type="LogAppendTime")
    assert log.append_as_leader(batch(1), leader_epoch=0).log_append_time_ms == clock.now
    log.update_config(dataclasses.replace(log.config, cleanup_policy="compact"))
    with pytest.raises(StromError) as err:
        log.append_as_leader(batch(1, key=None), leader_epoch=0)
    assert err.value.code == ErrorCode.INVALID_RECORD and "no key" in err.value.message
    log.config = dataclasses.replace(log.config, cleanup_policy="delete",
                                     message_timestamp_type="CreateTime",
                                     message_timestamp_after_max_ms=0)
    with pytest.raises(StromError) as err:
        log.append_as_leader(batch(1, ts=clock.now + 60_000), leader_epoch=0)
    assert err.value.code == ErrorCode.INVALID_TIMESTAMP
    log.config = dataclasses.replace(log.config, segment_ms=10)
    clock.advance(11)
    log.append_as_leader(batch(1, key=None), leader_epoch=0)
    assert log.segment_count == 2  # segment.ms of the new config rolled it


def test_batch_header_is_immutable_and_compared_by_value() -> None:
    raw = batch(3)
    h = parse_header(raw, 0)
    moved = h.with_offsets(42, 5)
    patched = bytearray(raw)
    patch_offsets(patched, 0, 42, 5)
    assert moved == parse_header(patched) and isinstance(moved, BatchHeader)
    assert (moved.base_offset, moved.leader_epoch, moved.last_offset, moved.size) == (
        42, 5, 44, len(raw))
    assert h.base_offset == 0 and h != moved
    with pytest.raises(AttributeError):
        h.base_offset = 1  # type: ignore[misc]
