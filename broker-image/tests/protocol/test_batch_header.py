"""The RecordBatch v2 header codec: validation names what is wrong, patching keeps the CRC."""

from __future__ import annotations

import pytest

from strom.protocol.batch import (
    HEADER_SIZE,
    iter_headers,
    parse_header,
    patch_offsets,
    set_log_append_time,
    validate_batches,
)
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.records import Compression, TimestampType, decode_batches, encode_batch


def _batch(n: int = 3, ts: int = 1_700_000_000_000, comp: Compression = Compression.NONE) -> bytes:
    return encode_batch([(b"k%d" % i, b"v%d" % i) for i in range(n)], comp, timestamp_ms=ts)


def test_header_fields_match_the_records() -> None:
    b = _batch(5)
    (h,) = validate_batches(b)
    assert h.magic == 2
    assert h.records_count == 5
    assert h.last_offset_delta == 4
    assert h.size == len(b)
    assert h.base_timestamp == h.max_timestamp == 1_700_000_000_000
    assert h.producer_id == -1


def test_several_batches_in_one_buffer() -> None:
    buf = _batch(2) + _batch(3) + _batch(1)
    headers = validate_batches(buf)
    assert [h.records_count for h in headers] == [2, 3, 1]
    assert [h.position for h in headers] == [0, len(_batch(2)), len(_batch(2)) + len(_batch(3))]
    assert list(iter_headers(buf)) == headers


def test_patching_base_offset_and_epoch_keeps_the_crc_valid() -> None:
    buf = bytearray(_batch(3))
    patch_offsets(buf, 0, 1000, 7)
    (h,) = validate_batches(buf)
    assert (h.base_offset, h.leader_epoch) == (1000, 7)
    assert [r.offset for r in decode_batches(bytes(buf), "t", 0)] == [1000, 1001, 1002]


@pytest.mark.parametrize("comp", list(Compression))
def test_every_codec_round_trips(comp: Compression) -> None:
    buf = _batch(50, comp=comp)
    (h,) = validate_batches(buf)
    assert h.compression == comp
    records = list(decode_batches(buf, "t", 3))
    assert [(r.key, r.value) for r in records] == [(b"k%d" % i, b"v%d" % i) for i in range(50)]
    assert all(r.partition == 3 and r.topic == "t" for r in records)


def test_every_flipped_crc_protected_byte_is_detected() -> None:
    buf = _batch(2)
    for pos in range(21, len(buf)):
        bad = bytearray(buf)
        bad[pos] ^= 0xFF
        with pytest.raises(StromError) as info:
            validate_batches(bad)
        assert info.value.code == ErrorCode.CORRUPT_MESSAGE


def test_truncated_batches_are_rejected_at_every_length() -> None:
    buf = _batch(2)
    for cut in range(1, len(buf)):
        with pytest.raises(StromError) as info:
            validate_batches(buf[:cut])
        assert info.value.code == ErrorCode.CORRUPT_MESSAGE
    assert list(iter_headers(buf[:-1])) == []


def test_garbage_and_empty_are_rejected_with_a_message() -> None:
    with pytest.raises(StromError) as info:
        validate_batches(b"")
    assert info.value.code == ErrorCode.INVALID_RECORD
    with pytest.raises(StromError) as info:
        validate_batches(b"\x00" * 100)
    assert info.value.code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT)
    assert "magic" in info.value.message or "length" in info.value.message


def test_oversized_batch_names_the_limit() -> None:
    buf = _batch(100)
    with pytest.raises(StromError) as info:
        validate_batches(buf, max_batch_bytes=HEADER_SIZE + 10)
    assert info.value.code == ErrorCode.MESSAGE_TOO_LARGE
    assert "max.message.bytes" in info.value.message


def test_log_append_time_restamps_and_recomputes_the_crc() -> None:
    buf = bytearray(_batch(3))
    set_log_append_time(buf, 0, len(buf), 42_000)
    (h,) = validate_batches(buf)
    assert h.log_append_time and h.max_timestamp == 42_000
    records = list(decode_batches(bytes(buf), "t", 0))
    assert {r.timestamp for r in records} == {42_000}
    assert records[0].timestamp_type is TimestampType.LOG_APPEND_TIME


def test_decode_skips_records_before_the_start_offset() -> None:
    buf = bytearray(_batch(5))
    patch_offsets(buf, 0, 10, 0)
    assert [r.offset for r in decode_batches(bytes(buf), "t", 0, start_offset=12)] == [12, 13, 14]
    assert parse_header(buf).base_offset == 10

