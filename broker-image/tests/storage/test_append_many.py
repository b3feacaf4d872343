"""PartitionLog.append_many_as_leader: the batches of several pipelined produce requests in one
append, with the result each would have had alone, and None or an error (nothing written)
whenever that equivalence is not certain."""

from __future__ import annotations

import pytest

from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.records import BatchBuilder, encode_batch
from strom.storage import LogConfig, PartitionLog

from .conftest import OpenLog


def batch(values: list[bytes], pid: int = -1, seq: int = -1, ts: int = 1_700_000_000_000
          ) -> bytes:
    b = BatchBuilder(batch_size=1 << 20, producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                     base_sequence=seq)
    for v in values:
        b.append(None, v, ts)
    return b.build()


def _read_all(log: PartitionLog) -> bytes:
    return log.read(0, 1 << 20).records


def test_results_and_bytes_are_those_of_appending_each_alone(open_log: OpenLog) -> None:
    parts = [batch([b"a"]), batch([b"b", b"c"]) + batch([b"d"]), batch([b"e", b"f", b"g"])]
    alone = open_log(name="alone")
    expected = [alone.append_as_leader(p, 3) for p in parts]
    together = open_log(name="together")
    results = together.append_many_as_leader(parts, 3)
    assert results == expected
    assert [(r.base_offset, r.last_offset, r.record_count) for r in results] == [
        (0, 0, 1), (1, 3, 3), (4, 6, 3)]
    assert together.log_end_offset == alone.log_end_offset == 7
    assert _read_all(together) == _read_all(alone)


def test_log_append_time_is_set_in_every_part(open_log: OpenLog) -> None:
    log = open_log(LogConfig(message_timestamp_type="LogAppendTime"))
    results = log.append_many_as_leader([batch([b"a"]), batch([b"b"])], 0)
    assert results is not None
    assert [r.log_append_time_ms for r in results] == [1_700_000_000_000] * 2


def test_parts_that_are_not_whole_batches_are_refused_and_nothing_is_written(
        open_log: OpenLog) -> None:
    log = open_log()
    whole = encode_batch([(None, b"x")])
    # Each half alone is corrupt; joined they are one valid batch: not appendable as one.
    assert log.append_many_as_leader([whole[:30], whole[30:]], 0) is None
    assert log.append_many_as_leader([whole, b""], 0) is None
    assert log.log_end_offset == 0


def test_a_bad_part_fails_the_whole_append_and_writes_nothing(open_log: OpenLog) -> None:
    log = open_log()
    bad = bytearray(encode_batch([(None, b"y")]))
    bad[-1] ^= 0xFF  # CRC mismatch
    with pytest.raises(StromError) as info:
        log.append_many_as_leader([encode_batch([(None, b"x")]), bytes(bad)], 0)
    assert info.value.code is ErrorCode.CORRUPT_MESSAGE
    assert log.log_end_offset == 0


def test_idempotent_sequences_are_checked_across_parts(open_log: OpenLog) -> None:
    log = open_log()
    results = log.append_many_as_leader([batch([b"a"], 7, 0), batch([b"b"], 7, 1)], 0)
    assert results is not None and [r.base_offset for r in results] == [0, 1]
    with pytest.raises(StromError) as info:  # a gap in the middle: nothing written
        log.append_many_as_leader([batch([b"c"], 7, 2), batch([b"d"], 7, 9)], 0)
    assert info.value.code is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    with pytest.raises(StromError) as info:  # a resent batch among several: one by one instead
        log.append_many_as_leader([batch([b"b"], 7, 1), batch([b"c"], 7, 2)], 0)
    assert info.value.code is ErrorCode.DUPLICATE_SEQUENCE_NUMBER
    assert log.log_end_offset == 2


def test_a_recompressing_topic_is_not_appended_as_one(open_log: OpenLog) -> None:
    log = open_log(LogConfig(compression_type="gzip"))
    assert log.append_many_as_leader([batch([b"a"]), batch([b"b"])], 0) is None
    assert log.log_end_offset == 0
