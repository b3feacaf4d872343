"""Segment rolls (segment.bytes, segment.ms, index full) and retention by time and size."""

from __future__ import annotations

from strom.protocol.records import decode_batches, encode_batch
from strom.storage import LogConfig


def _batch(ts: int, n: int = 2) -> bytes:
    return encode_batch([(b"k", b"v" * 40)] * n, timestamp_ms=ts)


def test_roll_by_bytes(open_log):
    size = len(_batch(0))
    log = open_log(LogConfig(segment_bytes=size * 3))
    for i in range(10):
        log.append_as_leader(_batch(i), 0)
    assert log.segment_count == 4  # 3 + 3 + 3 + 1
    names = sorted(p.name for p in log.directory.glob("*.log"))
    assert names[1] == "00000000000000000006.log"


def test_roll_by_time_with_injected_clock(open_log, clock):
    log = open_log(LogConfig(segment_ms=1000))
    log.append_as_leader(_batch(clock.now), 0)
    clock.advance(500)
    log.append_as_leader(_batch(clock.now), 0)
    assert log.segment_count == 1
    clock.advance(600)
    log.append_as_leader(_batch(clock.now), 0)
    assert log.segment_count == 2
    clock.advance(1001)
    log.maybe_roll()
    assert log.segment_count == 3
    log.maybe_roll(clock.now + 10_000)  # empty active segment: no roll
    assert log.segment_count == 3


def test_roll_when_index_full(open_log):
    log = open_log(LogConfig(index_interval_bytes=0, segment_index_bytes=24))
    for i in range(12):
        log.append_as_leader(_batch(i), 0)
    assert log.segment_count > 2
    assert next(r.offset for r in decode_batches(log.read(0, 1 << 20).records)) == 0


def test_retention_by_time_deletes_whole_old_segments(open_log, clock):
    size = len(_batch(0))
    log = open_log(LogConfig(segment_bytes=size * 2, retention_ms=10_000))
    t0 = clock.now
    for i in range(6):
        log.append_as_leader(_batch(t0 + i * 1000), 0)
    assert log.segment_count == 3
    assert log.apply_retention(t0 + 10_500) == 0  # newest of the first segment is t0+1000
    assert log.apply_retention(t0 + 11_001) == 1
    assert log.log_start_offset == 4 and log.segment_count == 2
    assert next(r.offset for r in decode_batches(log.read(4, 1 << 20).records)) == 4
    # everything expired: the active segment is rolled, then all data goes
    assert log.apply_retention(t0 + 100_000) == 2
    assert log.log_start_offset == log.log_end_offset == 12
    log.append_as_leader(_batch(t0 + 100_000), 0)
    assert log.log_end_offset == 14


def test_retention_by_bytes(open_log):
    size = len(_batch(0))
    log = open_log(LogConfig(segment_bytes=size * 2, retention_bytes=size * 3, retention_ms=-1))
    for i in range(9):
        log.append_as_leader(_batch(i), 0)
    assert log.segment_count == 5 and log.size_bytes == 9 * size
    assert log.apply_retention() == 3
    assert log.size_bytes == 3 * size and log.log_start_offset == 12
    assert log.apply_retention() == 0  # never the active segment for size


def test_compact_only_policy_does_not_delete(open_log, clock):
    log = open_log(LogConfig(segment_bytes=200, retention_ms=1, cleanup_policy="compact"))
    for i in range(5):
        log.append_as_leader(_batch(i), 0)
    assert log.apply_retention(clock.now + 10**9) == 0


def test_retention_survives_reopen(open_log):
    size = len(_batch(0))
    config = LogConfig(segment_bytes=size * 2, retention_bytes=size * 2, retention_ms=-1)
    log = open_log(config)
    for i in range(6):
        log.append_as_leader(_batch(i), 0)
    log.apply_retention()
    start = log.log_start_offset
    log.close()
    again = open_log(config)
    assert again.log_start_offset == start > 0
    assert again.log_end_offset == 12
