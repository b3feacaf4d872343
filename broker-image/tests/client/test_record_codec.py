"""The record codec the client relies on: golden bytes (pins the compiled codec's output) and
compression round trips for every codec."""

from __future__ import annotations

import crc32c
import pytest

from strom.protocol.batch import parse_header, validate_batches
from strom.protocol.records import BatchBuilder, Compression, TimestampType, decode_batches

GOLDEN = bytes.fromhex(
    "000000000000000000000062ffffffff023602d38e0000000000020000018bcfe568000000018bcfe5680a"
    "ffffffffffffffffffffffffffff000000032c0000000a6b65792d310e76616c75652d3102026802761a00"
    "0a02010e76616c75652d3200160014040a6b65792d330100")


def _golden_batch() -> bytes:
    b = BatchBuilder(Compression.NONE, 1 << 20)
    assert b.append(b"key-1", b"value-1", 1700000000000, [("h", b"v")])
    assert b.append(None, b"value-2", 1700000000005)
    assert b.append(b"key-3", None, 1700000000010)
    return b.build()


def test_golden_bytes_are_stable() -> None:
    data = _golden_batch()
    assert data == GOLDEN, data.hex()
    h = parse_header(data)
    assert (h.base_offset, h.magic, h.records_count, h.last_offset_delta) == (0, 2, 3, 2)
    assert (h.base_timestamp, h.max_timestamp) == (1700000000000, 1700000000010)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (-1, -1, -1)
    assert h.crc == 0x3602D38E == crc32c.crc32c(data[21:])
    validate_batches(data)


def test_golden_bytes_decode() -> None:
    records = list(decode_batches(GOLDEN, "t", 3, 0))
    assert [(r.offset, r.timestamp, r.key, r.value) for r in records] == [
        (0, 1700000000000, b"key-1", b"value-1"),
        (1, 1700000000005, None, b"value-2"),
        (2, 1700000000010, b"key-3", None),
    ]
    assert records[0].headers == (("h", b"v"),)
    assert all(r.topic == "t" and r.partition == 3 for r in records)
    assert records[0].timestamp_type is TimestampType.CREATE_TIME


def test_decode_drops_records_below_start_offset() -> None:
    assert [r.offset for r in decode_batches(GOLDEN, "t", 0, 2)] == [2]


@pytest.mark.parametrize("codec", list(Compression))
def test_compression_round_trip(codec: Compression) -> None:
    b = BatchBuilder(codec, 1 << 22)
    values = [(b"k%d" % i if i % 3 else None, (b"v%d-" % i) * 20) for i in range(2000)]
    for k, v in values:
        assert b.append(k, v, 1700000000000 + i if (i := len(b)) else 1700000000000)
    data = b.build()
    h = parse_header(data)
    assert h.compression == int(codec)
    if codec is not Compression.NONE:
        assert len(data) < sum(len(v) for _, v in values) // 4  # it really compressed
    validate_batches(data)
    got = [(r.key, r.value) for r in decode_batches(data, "t", 0, 0)]
    assert got == values


def test_partial_trailing_batch_is_skipped() -> None:
    data = GOLDEN + GOLDEN[:40]
    assert len(list(decode_batches(data, "t", 0, 0))) == 3
