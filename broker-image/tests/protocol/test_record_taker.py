"""RecordTaker: whole-batch decoding for the consumer returns exactly what decode_batches does."""

from __future__ import annotations

import struct

import pytest

from strom.protocol import batch as batch_module
from strom.protocol.batch import (
    ATTR_CONTROL,
    BatchHeader,
    compute_crc,
    iter_headers,
    parse_header,
    patch_offsets,
    set_log_append_time,
)
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.records import (
    Compression,
    RecordTaker,
    decode_batch_lists,
    decode_batches,
    encode_batch,
    raw_records,
)


def _log(batches: int, per_batch: int) -> bytes:
    out = bytearray()
    for b in range(batches):
        batch = bytearray(encode_batch([(None, b"v%d-%d" % (b, i)) for i in range(per_batch)]))
        struct.pack_into(">q", batch, 0, b * per_batch)  # base offset
        out += batch
    return bytes(out)


@pytest.mark.parametrize("start", [0, 3, 7, 10, 29, 30])
@pytest.mark.parametrize("step", [1, 4, 7, 10, 25, 100])
def test_takes_in_any_step_size_give_the_decoded_sequence(start: int, step: int) -> None:
    data = _log(3, 10)
    expected = [(r.offset, r.value) for r in decode_batches(data, "t", 0, start)]
    taker = RecordTaker(memoryview(data), "t", 0, start)
    got: list[tuple[int, bytes | None]] = []
    for _ in range(100):
        chunk = taker.take(step)
        got.extend((r.offset, r.value) for r in chunk)
        if len(chunk) < step:
            break
        assert len(chunk) == step  # only the last take may come up short
    assert got == expected
    assert taker.take(step) == []


def test_one_list_per_batch_skipping_what_lies_before_the_start() -> None:
    lists = list(decode_batch_lists(_log(3, 10), "t", 2, 15))
    assert [[r.offset for r in records] for records in lists] == [list(range(15, 20)),
                                                                   list(range(20, 30))]
    assert {(r.topic, r.partition) for records in lists for r in records} == {("t", 2)}


def test_runs_join_batches_of_one_leader_epoch_up_to_the_record_count() -> None:
    """Over 1,000 partitions a keyed produce writes ~10-record batches: the consumer decodes
    them a run at a time (one comprehension, one list), closed at ``run_records``."""
    data = bytearray(_log(7, 10))
    size = len(data) // 7
    for b in (5, 6):  # the last two batches come from a later leader
        struct.pack_into(">i", data, b * size + 12, 3)
        struct.pack_into(">I", data, b * size + 17, compute_crc(data, b * size, size))
    lists = list(decode_batch_lists(bytes(data), "t", 0, 15, check_crcs=True, run_records=25))
    assert [[r.offset for r in records] for records in lists] == [
        list(range(15, 40)), list(range(40, 50)), list(range(50, 70))]  # 30 counted, 10, 20
    assert [{r.leader_epoch for r in records} for records in lists] == [{-1}, {-1}, {3}]
    assert [len(records) for records in decode_batch_lists(bytes(data), run_records=0)] == [
        10] * 7


def test_a_batch_that_does_not_decode_inside_a_run_ends_it_after_the_batches_before() -> None:
    data = _log(4, 5)
    second = len(data) // 4
    batches = decode_batch_lists(_damaged(data, 2 * second + 61), "t", 0, 0, run_records=100)
    assert [r.offset for r in next(batches)] == [0, 1, 2, 3, 4]
    assert [r.offset for r in next(batches)] == [5, 6, 7, 8, 9]
    with pytest.raises(StromError, match="does not decode"):
        next(batches)


def test_a_partial_trailing_batch_is_left_out() -> None:
    data = _log(2, 5)
    taker = RecordTaker(data[:-3], "t", 0, 0)
    assert [r.offset for r in taker.take(100)] == [0, 1, 2, 3, 4]


def _damaged(data: bytes, position: int) -> bytes:
    buf = bytearray(data)
    buf[position] ^= 0x01
    return bytes(buf)


@pytest.mark.parametrize(("check_crcs", "where", "fragment"), [
    (True, -3, "CRC-32C"),  # a value byte of the second batch's last record
    (False, 61, "does not decode"),  # the second batch's first record length
])
def test_the_records_before_a_corrupt_batch_come_first_then_its_error_every_time(
        check_crcs: bool, where: int, fragment: str) -> None:
    data = _log(3, 5)
    second = len(data) // 3
    position = 2 * second + where if where < 0 else second + where
    taker = RecordTaker(_damaged(data, position), "t", 0, 0, check_crcs=check_crcs)
    assert [r.offset for r in taker.take(3)] == [0, 1, 2]
    assert [r.offset for r in taker.take(100)] == [3, 4]  # stops short: the error comes next
    for _ in range(3):
        with pytest.raises(StromError) as info:
            taker.take(100)
        assert info.value.code is ErrorCode.CORRUPT_MESSAGE
        assert fragment in info.value.message and "seek() to 10" in info.value.message


@pytest.mark.parametrize("tail", [b"\x00" * 12, b"\x00" * 8 + b"\x00\x00\x00\x05" + b"x" * 9])
def test_a_damaged_length_after_whole_batches_is_an_error_not_an_end(tail: bytes) -> None:
    taker = RecordTaker(_log(1, 5) + tail, "t", 0, 0)
    assert [r.offset for r in taker.take(100)] == [0, 1, 2, 3, 4]
    with pytest.raises(StromError) as info:
        taker.take(100)
    assert "not a record batch" in info.value.message


def test_a_buffer_without_a_whole_batch_is_an_error() -> None:
    with pytest.raises(StromError) as info:
        RecordTaker(_log(1, 5)[:-1], "t", 0, 0).take(10)
    assert info.value.code is ErrorCode.CORRUPT_MESSAGE


def _reference(data: bytes, start: int) -> list[tuple[object, ...]]:
    """What the decode must give, built the plain way: every whole batch by its parsed
    header, control batches skipped, LogAppendTime batches stamped with their max timestamp."""
    out: list[tuple[object, ...]] = []
    for h in iter_headers(data):
        if h.next_offset <= start or h.is_control:
            continue
        for r in raw_records(data[h.position:h.position + h.size]):
            if r.offset < start:
                continue
            ts = h.max_timestamp if h.log_append_time else r.timestamp
            out.append((r.offset, ts, r.key, h.leader_epoch))
    return out


def _mixed_log() -> bytes:
    """Batches of every kind the decode tells apart: plain, gzip, LogAppendTime, control,
    leader epochs, a record header, and a partial batch at the end."""
    parts: list[bytes] = []
    offset = 0
    for kind in ["plain", "gzip", "append", "control", "plain", "headers", "plain"]:
        if kind == "gzip":
            raw = encode_batch([(b"k%d" % i, b"g") for i in range(4)], Compression.GZIP)
        elif kind == "headers":
            raw = encode_batch([(b"h", b"v")], headers=[("a", b"1")])
        else:
            raw = encode_batch([(b"k%d" % i, b"v" * i) for i in range(3)], timestamp_ms=1000)
        buf = bytearray(raw)
        if kind == "append":
            set_log_append_time(buf, 0, len(buf), 77_000)
        if kind == "control":
            struct.pack_into(">h", buf, 21, struct.unpack_from(">h", buf, 21)[0] | ATTR_CONTROL)
            struct.pack_into(">I", buf, 17, compute_crc(buf, 0, len(buf)))
        patch_offsets(buf, 0, offset, offset % 5)
        offset = parse_header(buf).next_offset
        parts.append(bytes(buf))
    return b"".join(parts) + parts[0][:30]


@pytest.mark.parametrize("run_records", [0, 4, 1000])
@pytest.mark.parametrize("start", [0, 2, 3, 9, 14, 100])
def test_the_decode_gives_what_the_parsed_headers_say(start: int, run_records: int) -> None:
    data = _mixed_log()
    got = [(r.offset, r.timestamp, r.key, r.leader_epoch)
           for records in decode_batch_lists(data, "t", 0, start, check_crcs=True,
                                             run_records=run_records)
           for r in records]
    assert got == _reference(data, start)
    assert any(h.is_control for h in iter_headers(data))


def test_the_decode_parses_no_batch_header_per_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Over 1,000 partitions a keyed produce writes batches of 10-20 records, ~15 times as
    many as over 10, and a full header parsed per batch (with a copy of its bytes) was most
    of the decode's per-batch cost: the decode reads the fields it needs with one unpack and
    parses a header only to name a corrupt batch."""
    real = batch_module.parse_header
    calls: list[int] = []

    def counting(buf: bytes, position: int = 0) -> BatchHeader:
        calls.append(position)
        return real(buf, position)

    monkeypatch.setattr(batch_module, "parse_header", counting)
    taker = RecordTaker(_log(20, 3), "t", 0, 0, check_crcs=True)
    assert len(taker.take(1000)) == 60
    assert calls == []
