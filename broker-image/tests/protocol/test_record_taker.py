"""RecordTaker: whole-batch decoding for the consumer returns exactly what decode_batches does."""

from __future__ import annotations

import struct

import pytest

from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.records import RecordTaker, decode_batch_lists, decode_batches, encode_batch


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
