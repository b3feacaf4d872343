"""Log compaction: last value per key, tombstone expiry, offsets preserved, crash safety."""

from __future__ import annotations

import dataclasses
import os

import pytest

from strom.protocol.records import decode_batches, encode_batch
from strom.storage import LogConfig, PartitionLog

DAY = 86_400_000


def _records(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).records
        recs = [r for r in decode_batches(data) if r.offset >= offset]
        if not recs:
            break
        out += [(r.offset, r.key, r.value) for r in recs]
        offset = recs[-1].offset + 1
    return out


def _fill(log: PartitionLog, ts: int) -> None:
    # keys a..d each written 3 times, one batch per write; then a tombstone for b
    for round_ in range(3):
        for key in (b"a", b"b", b"c", b"d"):
            log.append_as_leader(encode_batch([(key, b"%s%d" % (key, round_))],
                                              timestamp_ms=ts), 0)
    # a keyless record from before the topic became compacted (appends to a compacted topic
    # refuse records without a key, as Kafka's): the cleaner keeps it
    compacted = log.config
    log.config = dataclasses.replace(compacted, cleanup_policy="delete")
    log.append_as_leader(encode_batch([(b"b", None), (b"e", b"e0"), (None, b"nokey")],
                                      timestamp_ms=ts), 0)
    log.config = compacted
    log.maybe_roll(ts + 2_000)  # close the active segment (segment.ms=1000) so all is cleanable


def test_keeps_last_value_per_key_and_preserves_offsets(open_log, clock):
    log = open_log(LogConfig(cleanup_policy="compact", segment_bytes=300, segment_ms=1000))
    _fill(log, clock.now)
    before = _records(log)
    removed = log.compact(clock.now)
    after = _records(log)
    assert removed > 0
    assert len(after) == len(before) - removed
    latest = {}
    for off, key, _value in before:
        latest[key] = off
    # every surviving keyed record is the latest for its key
    for off, key, _ in after:
        if key is not None:
            assert latest[key] == off
    assert [o for o, _, _ in after] == sorted(o for o, _, _ in after)
    assert (14, None, b"nokey") in after  # null keys are kept
    assert log.log_end_offset == 15
    # the tombstone for b is kept while younger than delete.retention.ms
    assert any(k == b"b" and v is None for _, k, v in after)


def test_tombstones_expire(open_log, clock):
    log = open_log(LogConfig(cleanup_policy="compact", segment_bytes=300, segment_ms=1000,
                             delete_retention_ms=DAY))
    _fill(log, clock.now)
    log.compact(clock.now)
    assert any(k == b"b" and v is None for _, k, v in _records(log))
    log.compact(clock.now + DAY + 1)
    assert not any(k == b"b" for _, k, _ in _records(log))


def test_min_compaction_lag(open_log, clock):
    log = open_log(LogConfig(cleanup_policy="compact", segment_bytes=300, segment_ms=1000,
                             min_compaction_lag_ms=10_000))
    _fill(log, clock.now)
    assert log.compact(clock.now + 5_000) == 0
    assert log.compact(clock.now + 20_000) > 0


def test_reads_and_reopen_after_compaction(open_log, clock):
    config = LogConfig(cleanup_policy="compact", segment_bytes=300, segment_ms=1000,
                       index_interval_bytes=0)
    log = open_log(config)
    _fill(log, clock.now)
    log.compact(clock.now)
    after = _records(log)
    for off, _, _ in after:  # reading from any offset, including gaps, works
        assert _records_from(log, off)[0][0] == off
    assert _records_from(log, 0)[0][0] == after[0][0]
    log.close()
    again = open_log(config)
    assert _records(again) == after


def _records_from(log: PartitionLog, offset: int) -> list[tuple[int, bytes | None]]:
    data = log.read(offset, 1 << 20).records
    return [(r.offset, r.key) for r in decode_batches(data) if r.offset >= offset]


def test_crash_during_rewrite_leaves_old_segments(open_log, clock, monkeypatch):
    config = LogConfig(cleanup_policy="compact", segment_bytes=300, segment_ms=1000)
    log = open_log(config)
    _fill(log, clock.now)
    log.flush()
    before = _records(log)

    def crash(*_args: object) -> None:
        raise OSError("power cut")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        log.compact(clock.now)
    monkeypatch.undo()
    assert list(log.directory.glob("*.cleaned"))
    again = open_log(config)  # reopened without close: an unclean restart
    assert not list(again.directory.glob("*.cleaned"))
    assert _records(again) == before
    assert again.compact(clock.now) > 0


def test_partial_batch_rewrite_keeps_headers_and_decompresses(open_log, clock):
    from strom.protocol.records import Compression
    log = open_log(LogConfig(cleanup_policy="compact", segment_ms=1000))
    log.append_as_leader(encode_batch([(b"a", b"1"), (b"b", b"1"), (b"c", b"1")],
                                      Compression.GZIP, timestamp_ms=clock.now,
                                      headers=[("h", b"x")]), 0)
    log.append_as_leader(encode_batch([(b"b", b"2")], timestamp_ms=clock.now + 5), 0)
    log.maybe_roll(clock.now + 2_000)
    assert log.compact(clock.now) == 1
    recs = list(decode_batches(log.read(0, 1 << 20).records))
    assert [(r.offset, r.key, r.value) for r in recs] == [(0, b"a", b"1"), (2, b"c", b"1"),
                                                          (3, b"b", b"2")]
    assert recs[0].headers == (("h", b"x"),) and recs[0].timestamp == clock.now


def test_max_compaction_lag_rolls_the_active_segment_so_old_values_get_compacted(open_log, clock):
    config = LogConfig(cleanup_policy="compact", max_compaction_lag_ms=1000)  # segment.ms: 7 days
    log = open_log(config)
    for value in (b"old", b"new"):
        log.append_as_leader(encode_batch([(b"k", value)], timestamp_ms=clock.now), 0)
    log.maybe_roll(clock.now + 500)
    assert log.compact(clock.now + 500) == 0, "all in the active segment: nothing cleanable yet"
    log.maybe_roll(clock.now + 1500)  # older than max.compaction.lag.ms: rolled
    assert log.compact(clock.now + 1500) == 1
    assert [(k, v) for _, k, v in _records(log)] == [(b"k", b"new")]


def test_max_compaction_lag_does_not_roll_a_delete_topic(open_log, clock):
    log = open_log(LogConfig(cleanup_policy="delete", max_compaction_lag_ms=1000))
    log.append_as_leader(encode_batch([(b"k", b"v")], timestamp_ms=clock.now), 0)
    log.maybe_roll(clock.now + 5000)
    assert log.segment_count == 1
