"""What one batch costs the producer (issue 21): keyed records over a thousand partitions make
small batches, one per partition per request, so the sender's work per batch is what limits
throughput. An answer gives its batches back under one lock; a batch makes no condition
variable unless a future of it is waited on; a new batch's memory is taken under one lock."""

from __future__ import annotations

import threading
from concurrent.futures import wait
from typing import Any

from strom.client.accumulator import MID_BATCH, MIN_BATCH, RecordAccumulator
from strom.client.models import TopicPartition
from strom.client.producer_batch import ProducerBatch, RecordFuture
from strom.protocol.records import BatchBuilder, Compression

MANY = 1000


class CountingLock:
    """A lock that counts how often it is taken."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.taken = 0

    def __enter__(self) -> Any:
        self.taken += 1
        return self._lock.__enter__()

    def __exit__(self, *exc: object) -> None:
        self._lock.__exit__(*exc)


def _leader(tp: TopicPartition) -> int:
    return 1


def _acc() -> RecordAccumulator:
    return RecordAccumulator(batch_size=1024, linger_ms=5, compression=Compression.NONE,
                             buffer_memory=1 << 30, max_in_flight_per_partition=1)


def test_an_answer_gives_back_a_thousand_batches_under_one_lock() -> None:
    acc = _acc()
    for p in range(MANY):
        size = acc.reserve_batch()
        with acc.lock:
            batch, _ = acc.start_batch(TopicPartition("t", p), 0, size)
            assert batch.builder.append(None, b"v", 0)
    in_flight = acc.drain({1}, _leader, 1 << 30, 5)[1]
    assert len(in_flight) == MANY and acc.muted  # one batch of each partition in flight
    for p in range(MANY):  # each partition has its next batch waiting behind the muted one
        with acc.lock:
            acc.start_batch(TopicPartition("t", p), 6, 0)[0].builder.append(None, b"w", 0)
    counting = CountingLock()
    acc.lock = counting  # type: ignore[assignment]
    acc.finished_many(in_flight)
    assert counting.taken == 1
    assert not acc.muted
    assert acc.used_memory == 0  # the next batches reserved nothing in this test
    assert not (acc.incomplete & set(in_flight))
    acc.lock = threading.Lock()
    assert len(acc.drain({1}, _leader, 1 << 30, 20)[1]) == MANY  # all unmuted and due


def _batch() -> ProducerBatch:
    batch = ProducerBatch(TopicPartition("t", 0), BatchBuilder(Compression.NONE, 1024), 0, 0)
    batch.builder.append(None, b"v", 0)
    return batch


def test_a_batch_nobody_waits_on_makes_no_condition() -> None:
    batch = _batch()
    future = RecordFuture(batch, 0, 0, 0, 1)
    batch.complete(41)
    assert batch.condition is None
    assert future.done() and future.result(0).offset == 41


def test_a_waiter_that_comes_first_is_woken_by_the_completion() -> None:
    batch = _batch()
    future = RecordFuture(batch, 0, 0, 0, 1)
    got: list[int] = []
    waiting = threading.Thread(target=lambda: got.append(future.result(10).offset))
    waiting.start()
    while batch.condition is None:  # the waiter made the condition and waits on it
        waiting.join(0.001)
    batch.complete(7)
    waiting.join(10)
    assert got == [7]


def test_wait_and_callbacks_see_a_completion_whichever_comes_first() -> None:
    before, after = _batch(), _batch()
    f_before, f_after = RecordFuture(before, 0, 0, 0, 1), RecordFuture(after, 0, 0, 0, 1)
    seen: list[str] = []
    f_before.add_done_callback(lambda f: seen.append("before"))
    before.complete(1)
    after.complete(2)
    f_after.add_done_callback(lambda f: seen.append("after"))
    assert seen == ["before", "after"]
    done, not_done = wait([f_before, f_after], timeout=5)
    assert len(done) == 2 and not not_done


def test_a_new_batch_reserves_what_batch_capacity_says_under_one_lock() -> None:
    acc = RecordAccumulator(batch_size=64 << 10, linger_ms=5, compression=Compression.NONE,
                            buffer_memory=1 << 20)
    sizes = [acc.reserve_batch() for _ in range(6)]
    assert sizes == [64 << 10] * 2 + [MID_BATCH] * 4
    assert acc.used_memory == (128 << 10) + 4 * MID_BATCH
    acc.used_memory = acc.buffer_memory - MIN_BATCH + 1
    assert acc.reserve_batch() == 0  # no room: the caller blocks for memory (BufferFull)
