"""ProducerStateManager: duplicates, gaps, epochs, wrap-around, expiry, snapshots (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.protocol.batch import BatchHeader
from strom.protocol.errors import ErrorCode, StromError
from strom.storage import producer_state
from strom.storage.producer_state import DuplicateBatch, ProducerStateManager, next_sequence


def header(pid: int, epoch: int, seq: int, count: int, offset: int = -1,
           ts: int = 1000) -> BatchHeader:
    return BatchHeader(base_offset=offset, batch_length=100, leader_epoch=0, magic=2, crc=0,
                       attributes=0, last_offset_delta=count - 1, base_timestamp=ts,
                       max_timestamp=ts, producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq, records_count=count)


def appended(state: ProducerStateManager, h: BatchHeader) -> BatchHeader:
    """Simulate the log: check, then assign offsets at the state's end and update."""
    assert state.check(h) is None
    placed = header(h.producer_id, h.producer_epoch, h.base_sequence, h.records_count,
                    state.end_offset, h.max_timestamp)
    state.update(placed)
    return placed


def code_of(state: ProducerStateManager, h: BatchHeader) -> ErrorCode:
    with pytest.raises(StromError) as info:
        state.check(h)
    return info.value.code


def test_in_sequence_batches_are_accepted_and_a_resend_is_a_duplicate() -> None:
    s = ProducerStateManager()
    first = appended(s, header(7, 0, 0, 3))
    appended(s, header(7, 0, 3, 2))
    assert s.check(header(7, 0, 0, 3)) == DuplicateBatch(first.base_offset, first.last_offset)
    assert s.check(header(7, 0, 3, 2)) == DuplicateBatch(3, 4)
    assert s.check(header(7, 0, 5, 1)) is None


def test_only_the_last_five_batches_are_remembered() -> None:
    s = ProducerStateManager()
    for i in range(6):
        appended(s, header(1, 0, i, 1))
    assert s.check(header(1, 0, 1, 1)) == DuplicateBatch(1, 1)
    # batch 0 fell out of the cache: not a duplicate any more, and not in sequence either
    assert code_of(s, header(1, 0, 0, 1)) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_gap_and_reorder_are_out_of_order() -> None:
    s = ProducerStateManager()
    appended(s, header(1, 0, 0, 5))
    assert code_of(s, header(1, 0, 6, 1)) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert code_of(s, header(1, 0, 4, 2)) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_unknown_producer_is_accepted_at_any_sequence() -> None:
    s = ProducerStateManager()
    appended(s, header(9, 3, 1234, 2))
    assert s.check(header(9, 3, 1236, 1)) is None


def test_epochs_fence_older_and_new_epoch_starts_at_zero() -> None:
    s = ProducerStateManager()
    appended(s, header(1, 2, 0, 3))
    assert code_of(s, header(1, 1, 3, 1)) is ErrorCode.INVALID_PRODUCER_EPOCH
    assert code_of(s, header(1, 3, 5, 1)) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    appended(s, header(1, 3, 0, 1))
    # the old epoch's batches are forgotten: a resend of them is fenced, not a duplicate
    assert code_of(s, header(1, 2, 0, 3)) is ErrorCode.INVALID_PRODUCER_EPOCH


def test_sequence_wraps_past_int32_max() -> None:
    top = (1 << 31) - 1
    assert next_sequence(top, 1) == 0
    s = ProducerStateManager()
    appended(s, header(1, 0, top - 1, 2))  # sequences top-1, top
    assert s.check(header(1, 0, 0, 1)) is None
    wrapped = appended(s, header(1, 0, 0, 1))
    placed = header(1, 0, top, 3)  # top, 0, 1: last sequence wraps inside the batch
    assert producer_state.last_sequence(placed) == 1
    assert s.check(header(1, 0, 0, 1)) == DuplicateBatch(wrapped.base_offset, wrapped.last_offset)


def test_several_batches_in_one_append_are_checked_in_order() -> None:
    s = ProducerStateManager()
    assert s.check_all([header(1, 0, 0, 2), header(1, 0, 2, 2)]) is None
    with pytest.raises(StromError) as info:
        s.check_all([header(1, 0, 0, 2), header(1, 0, 3, 2)])
    assert info.value.code is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_non_idempotent_batches_are_not_tracked() -> None:
    s = ProducerStateManager()
    s.update(header(-1, -1, -1, 4, offset=0))
    assert s.producers == {}
    assert s.end_offset == 4
    assert s.check(header(-1, -1, -1, 1)) is None


def test_idle_producers_expire() -> None:
    s = ProducerStateManager(expiration_ms=1000)
    appended(s, header(1, 0, 0, 1, ts=10_000))
    appended(s, header(2, 0, 0, 1, ts=10_500))
    assert s.expire(11_200) == 1
    assert set(s.producers) == {2}
    # an expired producer is unknown again: any sequence is accepted (KIP-360)
    assert s.check(header(1, 0, 77, 1)) is None


def test_snapshot_round_trip_and_damage(tmp_path: Path) -> None:
    s = ProducerStateManager()
    for i in range(7):
        appended(s, header(5, 1, i * 2, 2))
    appended(s, header(6, 0, 0, 1))
    path = producer_state.write_snapshot(tmp_path, s)
    assert path.name == f"{s.end_offset:020d}.snapshot"
    loaded = producer_state.load_latest(tmp_path, s.end_offset, 1000)
    assert loaded is not None
    assert loaded.end_offset == s.end_offset
    assert loaded.producers == s.producers
    assert loaded.check(header(5, 1, 12, 2)) == DuplicateBatch(12, 13)
    assert producer_state.load_latest(tmp_path, s.end_offset - 1, 1000) is None
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x01
    path.write_bytes(bytes(data))
    assert producer_state.load_latest(tmp_path, s.end_offset, 1000) is None
    assert not path.exists()  # a damaged snapshot is removed (the log is replayed instead)
