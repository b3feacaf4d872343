"""The record accumulator: linger, batch_size, request size, retries, expiry, buffer memory."""

from __future__ import annotations

import pytest

from strom.client.accumulator import RecordAccumulator
from strom.client.models import TopicPartition
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.records import Compression

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


def _acc(**kw: object) -> RecordAccumulator:
    args: dict[str, object] = dict(batch_size=1024, linger_ms=5, compression=Compression.NONE,
                                   buffer_memory=1 << 20)
    args.update(kw)
    return RecordAccumulator(**args)  # type: ignore[arg-type]


def _append(acc: RecordAccumulator, tp: TopicPartition, value: bytes, now: float) -> None:
    with acc.lock:
        batch = acc.open_batch(tp)
        if batch is None or not batch.builder.append(None, value, 0):
            assert acc.try_reserve(acc.batch_size)
            batch = acc.new_batch(tp, now, acc.batch_size)
            assert batch.builder.append(None, value, 0)


def leader(tp: TopicPartition) -> int:
    return 1 if tp.partition == 0 else 2


def test_not_ready_before_linger_then_ready() -> None:
    acc = _acc()
    _append(acc, TP0, b"x" * 10, now=100)
    check = acc.ready(102, leader)
    assert check.nodes == set()
    assert check.next_check_ms == 105
    assert acc.drain({1}, leader, 1 << 20, 102) == {}
    assert acc.ready(105, leader).nodes == {1}
    drained = acc.drain({1}, leader, 1 << 20, 105)
    assert [b.tp for b in drained[1]] == [TP0]
    assert drained[1][0].data is not None


def test_full_batch_is_ready_without_linger() -> None:
    acc = _acc(linger_ms=10_000)
    for _ in range(30):  # 30 x 100 bytes > batch_size 1024: at least two batches
        _append(acc, TP0, b"x" * 100, now=0)
    assert len(acc.batches[TP0]) >= 2
    assert acc.ready(1, leader).nodes == {1}
    first = acc.drain({1}, leader, 1 << 20, 1)[1]
    assert len(first) == 1  # one batch per partition per request
    assert len(first[0].data or b"") <= 1024


def test_batches_respect_batch_size() -> None:
    acc = _acc(linger_ms=0)
    for _ in range(100):
        _append(acc, TP0, b"y" * 50, now=0)
    sizes = [len(b.close()) for b in acc.batches[TP0]]
    assert all(s <= 1024 for s in sizes)
    assert sum(len(b.builder) for b in acc.batches[TP0]) == 100


def test_drain_groups_by_leader_within_request_size() -> None:
    acc = _acc(linger_ms=0)
    _append(acc, TP0, b"a" * 500, now=0)
    _append(acc, TP1, b"b" * 500, now=0)
    _append(acc, TopicPartition("u", 0), b"c" * 500, now=0)
    drained = acc.drain({1, 2}, leader, 600, 0)
    assert {b.tp for b in drained[1]} in ({TP0}, {TopicPartition("u", 0)})  # 600 B fits one
    assert [b.tp for b in drained[2]] == [TP1]


def test_unknown_leader_reported() -> None:
    acc = _acc(linger_ms=0)
    _append(acc, TP0, b"a", now=0)
    check = acc.ready(0, lambda tp: -1)
    assert check.nodes == set()
    assert check.unknown_leader_topics == {"t"}


def test_flush_makes_lingering_batches_ready() -> None:
    acc = _acc(linger_ms=10_000)
    _append(acc, TP0, b"a", now=0)
    assert acc.ready(1, leader).nodes == set()
    acc.flushes_in_progress += 1
    assert acc.ready(1, leader).nodes == {1}


def test_reenqueue_goes_first_and_waits_for_backoff() -> None:
    acc = _acc(linger_ms=0)
    _append(acc, TP0, b"first", now=0)
    [batch] = acc.drain({1}, leader, 1 << 20, 0)[1]
    _append(acc, TP0, b"second", now=1)
    acc.reenqueue(batch, retry_at_ms=50)
    assert acc.batches[TP0][0] is batch and batch.attempts == 1
    check = acc.ready(10, leader)
    assert check.nodes == set() and check.next_check_ms == 50
    assert acc.drain({1}, leader, 1 << 20, 50)[1] == [batch]


def test_order_guarantee_mutes_partition_with_one_in_flight() -> None:
    acc = _acc(linger_ms=0, max_in_flight_per_partition=1)
    _append(acc, TP0, b"a" * 900, now=0)
    _append(acc, TP0, b"b" * 900, now=0)
    assert len(acc.drain({1}, leader, 1 << 20, 0)[1]) == 1
    assert acc.drain({1}, leader, 1 << 20, 0) == {}  # muted while in flight
    [done] = [b for b in acc.incomplete if b.data is not None]
    acc.finished(done)
    assert len(acc.drain({1}, leader, 1 << 20, 0)[1]) == 1


def test_expire_old_batches() -> None:
    acc = _acc(linger_ms=10_000)
    _append(acc, TP0, b"a", now=0)
    assert acc.expire(100, delivery_timeout_ms=1000) == []
    [old] = acc.expire(1000, delivery_timeout_ms=1000)
    assert old.tp == TP0 and not acc.has_queued()


def test_buffer_memory_blocks_then_times_out() -> None:
    acc = _acc(buffer_memory=2048)
    assert acc.try_reserve(1024) and acc.try_reserve(1024)
    assert not acc.try_reserve(1024)
    with pytest.raises(StromError) as info:
        acc.reserve(1024, timeout_s=0.05)
    assert info.value.code is ErrorCode.REQUEST_TIMED_OUT
    acc.release(1024)
    acc.reserve(1024, timeout_s=0.05)
