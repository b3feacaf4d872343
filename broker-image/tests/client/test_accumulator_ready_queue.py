"""The accumulator's ready queue (issue 21): the sender's work per wake-up follows the partitions
that are due, not the partitions the producer writes to; wake-ups follow what became sendable."""

from __future__ import annotations

from typing import Any

from strom.client.accumulator import MID_BATCH, MIN_BATCH, RecordAccumulator
from strom.client.models import TopicPartition
from strom.client.producer_batch import ProducerBatch
from strom.protocol.records import Compression

MANY = 1000


class CountingDict(dict[Any, Any]):
    """A dict that counts the entries its users touch (lookups and iteration)."""

    touched = 0

    def get(self, key: Any, default: Any = None) -> Any:
        self.touched += 1
        return super().get(key, default)

    def __getitem__(self, key: Any) -> Any:
        self.touched += 1
        return super().__getitem__(key)

    def items(self) -> Any:
        self.touched += len(self)
        return super().items()

    def values(self) -> Any:
        self.touched += len(self)
        return super().values()

    def __iter__(self) -> Any:
        self.touched += len(self)
        return super().__iter__()


def _acc(linger_ms: float = 5) -> RecordAccumulator:
    return RecordAccumulator(batch_size=1024, linger_ms=linger_ms, compression=Compression.NONE,
                             buffer_memory=1 << 30, max_in_flight_per_partition=1)


def _start(acc: RecordAccumulator, tp: TopicPartition, now: float, value: bytes = b"v"
           ) -> tuple[ProducerBatch, bool]:
    with acc.lock:
        batch, wake = acc.start_batch(tp, now, acc.batch_size)
        assert batch.builder.append(None, value, 0)
    return batch, wake


def _leader(tp: TopicPartition) -> int:
    return 1


def tp(p: int) -> TopicPartition:
    return TopicPartition("t", p)


def test_a_wake_up_with_nothing_due_touches_no_partition() -> None:
    acc = _acc()
    counting = CountingDict()
    acc.batches = counting
    for p in range(MANY):
        _start(acc, tp(p), now=0)
    counting.touched = 0
    check = acc.ready(1, _leader)
    assert check.nodes == set() and check.next_check_ms == 5
    assert acc.drain({1}, _leader, 1 << 20, 1) == {}
    assert counting.touched == 0


def test_one_full_partition_among_many_lingering_costs_one_partition() -> None:
    acc = _acc(linger_ms=10_000)
    counting = CountingDict()
    acc.batches = counting
    for p in range(MANY):
        _start(acc, tp(p), now=0)
    _start(acc, tp(7), now=1)  # tp 7's first batch is full now: sendable before linger
    counting.touched = 0
    check = acc.ready(2, _leader)
    assert check.nodes == {1} and check.full_nodes == {1}
    [batch] = acc.drain({1}, _leader, 1 << 20, 2)[1]
    assert batch.tp == tp(7)
    assert counting.touched <= 4


def test_due_partitions_are_all_drained_into_one_request() -> None:
    acc = _acc()
    for p in range(MANY):
        _start(acc, tp(p), now=p / 1000)  # due from 5.000 to 5.999
    assert acc.ready(5.5, _leader).nodes == {1}
    assert len(acc.drain({1}, _leader, 1 << 20, 5.5)[1]) == 501
    assert len(acc.drain({1}, _leader, 1 << 20, 6)[1]) == MANY - 501
    assert not acc.has_queued()


def test_only_the_first_lingering_batch_wakes_the_sender() -> None:
    acc = _acc()
    wakes = [_start(acc, tp(p), now=0)[1] for p in range(10)]
    assert wakes == [True] + [False] * 9
    # a second batch of a partition makes its first one sendable now: wake
    assert _start(acc, tp(3), now=1)[1]


def test_with_zero_linger_every_new_batch_wakes() -> None:
    acc = _acc(linger_ms=0)
    assert all(_start(acc, tp(p), now=0)[1] for p in range(5))


def test_a_muted_partition_comes_back_when_its_batch_completes() -> None:
    acc = _acc()
    _start(acc, tp(0), now=0)
    [in_flight] = acc.drain({1}, _leader, 1 << 20, 5)[1]
    batch, wake = _start(acc, tp(0), now=6)
    assert not wake  # the completion of the batch in flight wakes the sender
    assert acc.ready(20, _leader).nodes == set()  # muted while in flight
    acc.finished(in_flight)
    assert acc.drain({1}, _leader, 1 << 20, 20)[1] == [batch]


def test_a_flush_sends_every_lingering_partition_then_linger_applies_again() -> None:
    acc = _acc(linger_ms=10_000)
    for p in range(20):
        _start(acc, tp(p), now=0)
    acc.flushes_in_progress += 1
    assert len(acc.drain({1}, _leader, 1 << 20, 1)[1]) == 20
    _, wake = _start(acc, tp(50), now=2)
    assert wake  # during a flush a new batch goes at once
    assert [b.tp for b in acc.drain({1}, _leader, 1 << 20, 2)[1]] == [tp(50)]
    acc.flushes_in_progress -= 1
    _start(acc, tp(60), now=3)
    assert acc.drain({1}, _leader, 1 << 20, 4) == {}
    assert [b.tp for b in acc.drain({1}, _leader, 1 << 20, 10_003)[1]] == [tp(60)]


def test_partitions_skipped_for_request_size_go_first_next_time() -> None:
    acc = _acc(linger_ms=0)
    for p in range(4):
        _start(acc, tp(p), now=0, value=b"x" * 400)
    first = [b.tp for b in acc.drain({1}, _leader, 1000, 0)[1]]
    assert first == [tp(0), tp(1)]
    assert [b.tp for b in acc.drain({1}, _leader, 1000, 0)[1]] == [tp(2), tp(3)]


def test_expire_scans_only_once_the_oldest_batch_may_have_expired() -> None:
    acc = _acc(linger_ms=10_000)
    counting = CountingDict()
    acc.batches = counting
    for p in range(MANY):
        _start(acc, tp(p), now=100)
    assert acc.expire(100, delivery_timeout_ms=1000) == []  # learns the timeout: one scan
    counting.touched = 0
    assert acc.expire(500, delivery_timeout_ms=1000) == []
    assert counting.touched == 0
    assert len(acc.expire(1100, delivery_timeout_ms=1000)) == MANY
    assert not acc.has_queued()


def test_new_batches_are_smaller_as_the_buffer_fills() -> None:
    acc = RecordAccumulator(batch_size=64 << 10, linger_ms=5, compression=Compression.NONE,
                            buffer_memory=1 << 20)
    sizes = []
    for p in range(70):
        size = acc.batch_capacity(tp(p))
        assert acc.try_reserve(size)
        with acc.lock:
            batch, _ = acc.start_batch(tp(p), 0, size)
        assert batch.builder.max_bytes == size  # its capacity is what it reserved
        sizes.append(size)
    # batch_size while an eighth is taken, MID_BATCH while half stays free, then MIN_BATCH
    assert sizes[:2] == [64 << 10] * 2
    assert set(sizes[2:50]) == {MID_BATCH} and sizes.index(MIN_BATCH) == 50
    acc.release(sum(sizes[2:]))
    assert acc.batch_capacity(tp(0)) == MID_BATCH  # an eighth still taken
    acc.release(64 << 10)
    assert acc.batch_capacity(tp(0)) == 64 << 10
    assert acc.batch_capacity(tp(0), need=300 << 10) == 300 << 10  # a big record: its size


def test_ten_thousand_partitions_fit_the_default_buffer() -> None:
    """10,000 partitions with a batch open each and 7,500 more in flight fit 32 MiB: with
    256 KiB reserved per batch only 128 did, with 8 KiB once half was taken ~2,100."""
    acc = RecordAccumulator(batch_size=256 << 10, linger_ms=5, compression=Compression.NONE,
                            buffer_memory=32 << 20)
    for p in range(17 * MANY + MANY // 2):
        assert acc.reserve_batch(tp(p % (10 * MANY)), need=200), p


def _fill(acc: RecordAccumulator, partition: TopicPartition, now: float) -> ProducerBatch:
    """Start a batch of ``partition`` and append records until it is full."""
    with acc.lock:
        assert acc.open_batch(partition) is None  # the previous one is full
    size = acc.reserve_batch(partition)
    with acc.lock:
        batch, _ = acc.start_batch(partition, now, size)
        while batch.builder.try_append(b"k", b"v" * 100, 0, []) >= 0:
            pass
        acc.mark_full(batch)  # as append_locked does when a record does not fit
    return batch


def test_a_partition_whose_batches_fill_up_earns_bigger_ones() -> None:
    acc = RecordAccumulator(batch_size=64 << 10, linger_ms=5, compression=Compression.NONE,
                            buffer_memory=1 << 20)
    assert acc.try_reserve(600 << 10)  # over half of the buffer is taken: batches start small
    hot, cold = tp(0), tp(1)
    sizes = [_fill(acc, hot, 0).builder.max_bytes for _ in range(5)]
    assert sizes == [MIN_BATCH, 4 * MIN_BATCH, 16 * MIN_BATCH, 64 << 10, 64 << 10]
    assert acc.batch_capacity(cold) == MIN_BATCH
    assert acc.try_reserve(200 << 10)  # under a quarter stays free: even a hot one is small
    assert acc.batch_capacity(hot) == MIN_BATCH
    acc.release(200 << 10)
    with acc.lock:  # a hot partition that went quiet: its batch leaves at linger mostly empty
        acc.batches[hot].clear()
        acc._ready.clear()
        acc._linger.clear()
    size = acc.reserve_batch(hot)
    with acc.lock:
        batch, _ = acc.start_batch(hot, 0, size)
        batch.builder.try_append(b"k", b"v", 0, [])
    assert acc.drain([1], lambda _: 1, 1 << 30, now_ms=10) == {1: [batch]}
    assert acc.batch_capacity(hot) == 16 * MIN_BATCH
