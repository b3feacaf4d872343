"""Append/read round trips, offsets, read boundaries and rejection of bad produce data."""

from __future__ import annotations

import struct

import pytest

from strom.protocol.batch import iter_headers
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.records import decode_batches, encode_batch
from strom.storage import LogConfig


def offsets(data: bytes) -> list[int]:
    return [r.offset for r in decode_batches(data)]


def test_round_trip_bytes_unchanged_except_offset_and_epoch(open_log, make_batch):
    log = open_log()
    b1, b2 = make_batch(3), make_batch(5)
    r1 = log.append_as_leader(b1, leader_epoch=7)
    r2 = log.append_as_leader(b2, leader_epoch=7)
    assert (r1.base_offset, r1.last_offset, r1.record_count) == (0, 2, 3)
    assert (r2.base_offset, r2.last_offset) == (3, 7)
    assert r1.log_append_time_ms == -1
    data = log.read(0, 1 << 20).records
    stored = [data[h.position:h.position + h.size] for h in iter_headers(data)]
    for sent, got, base in zip([b1, b2], stored, [0, 3], strict=True):
        assert got[:8] == struct.pack(">q", base)
        assert got[12:16] == struct.pack(">i", 7)
        assert got[8:12] == sent[8:12] and got[16:] == sent[16:]
    assert offsets(data) == list(range(8))
    assert [r.leader_epoch for r in decode_batches(data)] == [7] * 8


def test_offsets_dense_across_segments(open_log, make_batch):
    log = open_log(LogConfig(segment_bytes=500, index_interval_bytes=0))
    for _ in range(40):
        log.append_as_leader(make_batch(4), 0)
    assert log.segment_count > 5
    seen: list[int] = []
    offset = 0
    while offset < log.log_end_offset:
        data = log.read(offset, 1000).records
        got = [o for o in offsets(data) if o >= offset]
        seen += got
        offset = got[-1] + 1
    assert seen == list(range(160))


def test_read_from_middle_returns_containing_batch(open_log, make_batch):
    log = open_log(LogConfig(index_interval_bytes=0))
    for _ in range(10):
        log.append_as_leader(make_batch(5), 0)
    data = log.read(23, 1).records
    assert offsets(data) == [20, 21, 22, 23, 24]


def test_max_bytes_and_at_least_one_batch(open_log, make_batch):
    log = open_log()
    big = make_batch(50, value=b"x" * 100)
    log.append_as_leader(big, 0)
    log.append_as_leader(make_batch(1), 0)
    one = log.read(0, 10).records
    assert len(one) == len(big)
    assert len(log.read(0, len(big) + 10).records) == len(big)  # never a partial batch
    assert offsets(log.read(0, 1 << 20).records) == list(range(51))


def test_max_offset_excludes_batches_at_or_after_it(open_log, make_batch):
    log = open_log()
    for _ in range(4):
        log.append_as_leader(make_batch(2), 0)
    assert offsets(log.read(0, 1 << 20, max_offset=4).records) == [0, 1, 2, 3]
    assert log.read(4, 1 << 20, max_offset=4).records == b""
    assert log.read(8, 1 << 20).records == b""


@pytest.mark.parametrize("offset", [-1, 9, 100])
def test_offset_out_of_range(open_log, make_batch, offset):
    log = open_log()
    log.append_as_leader(make_batch(8), 0)
    with pytest.raises(StromError) as err:
        log.read(offset, 100)
    assert err.value.code is ErrorCode.OFFSET_OUT_OF_RANGE
    assert "0..8" in err.value.message


def _corrupt_crc(b: bytes) -> bytes:
    buf = bytearray(b)
    buf[-1] ^= 0xFF
    return bytes(buf)


@pytest.mark.parametrize("bad,code", [
    (lambda b: _corrupt_crc(b), ErrorCode.CORRUPT_MESSAGE),
    (lambda b: b[:-3], ErrorCode.CORRUPT_MESSAGE),
    (lambda b: b"garbage" * 20, ErrorCode.CORRUPT_MESSAGE),
    (lambda b: b + b"\x00" * 10, ErrorCode.CORRUPT_MESSAGE),
])
def test_bad_batches_rejected_and_log_unchanged(open_log, make_batch, bad, code):
    log = open_log()
    log.append_as_leader(make_batch(2), 0)
    before = log.read(0, 1 << 20).records
    with pytest.raises(StromError) as err:
        log.append_as_leader(make_batch(2) + bad(make_batch(2)), 0)
    assert err.value.code is code
    assert log.log_end_offset == 2 and log.read(0, 1 << 20).records == before


def test_empty_and_empty_batch_rejected(open_log):
    log = open_log()
    for payload in (b"", encode_batch([])):
        with pytest.raises(StromError) as err:
            log.append_as_leader(payload, 0)
        assert err.value.code is ErrorCode.INVALID_RECORD
    assert log.log_end_offset == 0


def test_oversized_batch_rejected(open_log, make_batch):
    log = open_log(LogConfig(max_message_bytes=200))
    with pytest.raises(StromError) as err:
        log.append_as_leader(make_batch(20), 0)
    assert err.value.code is ErrorCode.MESSAGE_TOO_LARGE
    assert log.log_end_offset == 0 and log.size_bytes == 0


def test_log_append_time(open_log, clock, make_batch):
    log = open_log(LogConfig(message_timestamp_type="LogAppendTime"))
    result = log.append_as_leader(make_batch(3, ts=5), 0)
    assert result.log_append_time_ms == clock.now == result.max_timestamp
    records = list(decode_batches(log.read(0, 1 << 20).records))
    assert {r.timestamp for r in records} == {clock.now}
    assert records[0].timestamp_type.name == "LOG_APPEND_TIME"


def test_follower_append_keeps_offsets_and_epochs(open_log, make_batch):
    leader = open_log(name="l-0")
    follower = open_log(name="f-0")
    leader.append_as_leader(make_batch(3), 1)
    leader.append_as_leader(make_batch(2), 4)
    data = leader.read(0, 1 << 20).records
    follower.append_as_follower(data)
    assert follower.read(0, 1 << 20).records == data
    assert follower.epochs == [(1, 0), (4, 3)]
    with pytest.raises(StromError) as err:
        follower.append_as_follower(data)
    assert err.value.code is ErrorCode.OFFSET_OUT_OF_RANGE
    with pytest.raises(StromError) as err:
        follower.append_as_follower(_corrupt_crc(leader.read(3, 1 << 20).records))
    assert err.value.code is ErrorCode.CORRUPT_MESSAGE


def test_reopen_after_close_reads_everything(open_log, make_batch):
    config = LogConfig(segment_bytes=400, index_interval_bytes=50)
    log = open_log(config)
    for i in range(30):
        log.append_as_leader(make_batch(3, start=i * 3), i // 10)
    data = log.read(0, 1 << 20).records
    segments, epochs = log.segment_count, log.epochs
    log.close()
    again = open_log(config)
    assert again.log_end_offset == 90 and again.segment_count == segments
    assert again.epochs == epochs == [(0, 0), (1, 30), (2, 60)]
    assert again.read(0, 1 << 20).records == data
    again.append_as_leader(make_batch(1), 2)
    assert again.log_end_offset == 91


def test_high_watermark_tracks_end_until_set(open_log, make_batch):
    log = open_log()
    log.append_as_leader(make_batch(3), 0)
    assert log.high_watermark == 3
    log.high_watermark = 1
    log.append_as_leader(make_batch(3), 0)
    assert log.high_watermark == 1
    assert log.read(0, 1 << 20, max_offset=log.high_watermark).records != b""
    log.close()
    assert open_log().high_watermark == 1


def test_truncate_to_and_epochs(open_log, make_batch):
    log = open_log(LogConfig(segment_bytes=300))
    for e in range(6):
        log.append_as_leader(make_batch(2), e)
    assert log.end_offset_for_epoch(2) == (2, 6)
    assert log.end_offset_for_epoch(5) == (5, 12)
    log.truncate_to(5)  # inside the batch 4..5: batch aligned
    assert log.log_end_offset == 4
    assert log.epochs == [(0, 0), (1, 2)]
    assert offsets(log.read(0, 1 << 20).records)[-1] <= 3
    log.append_as_leader(make_batch(2), 9)
    assert log.log_end_offset == 6
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset, log.epochs) == (100, 100, [])
    log.append_as_leader(make_batch(1), 9)
    assert offsets(log.read(100, 100).records) == [100]


def test_offset_for_timestamp_and_max_timestamp(open_log, make_batch):
    log = open_log(LogConfig(segment_bytes=600, index_interval_bytes=0))
    for i in range(30):
        log.append_as_leader(encode_batch([(b"k", b"v%d" % j) for j in range(3)],
                                          timestamp_ms=1000 + 10 * i), 0)
    assert log.offset_for_timestamp(0) == (0, 1000, 0)
    assert log.offset_for_timestamp(1055) == (18, 1060, 0)
    assert log.offset_for_timestamp(1290) == (87, 1290, 0)
    assert log.offset_for_timestamp(1291) is None
    assert log.offset_of_max_timestamp() == (87, 1290, 0)
    assert open_log(name="empty-0").offset_of_max_timestamp() is None
