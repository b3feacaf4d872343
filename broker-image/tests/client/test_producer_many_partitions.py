"""Keyed records spread over 10,000 partitions fit a default producer's buffer_memory.

Issue 21: every new batch reserved 8 KiB once half of the 32 MiB was taken, so about 2,100
batches fitted; keyed records over 10,000 partitions (a batch of one or two records each)
made ``send()`` wait for memory that nearly empty batches held, and raise once a slow
broker answered nothing within ``max_block_ms``. Now a partition's batches start at 1 KiB
once a quarter of the memory is taken and grow only as they fill up; the bound stays strict
(``test_accumulator_ready_queue.py``, ``test_producer_retries.py``).
"""

from __future__ import annotations

from strom.client import Producer
from strom.testing.waits import wait_until

from .conftest import FakeCluster

PARTITIONS = 10_000


def test_two_records_for_each_of_10000_partitions_do_not_wait_for_memory(
        fake_cluster: FakeCluster) -> None:
    fake_cluster.create_topic("t", PARTITIONS)
    value = b"v" * 100
    with Producer(fake_cluster.bootstrap, acks=1, max_block_ms=2000) as producer:
        producer.send("t", value, partition=0).result(10)  # metadata known, connection up
        fake_cluster.slow_produce.add(1)  # no batch completes while the records go in
        try:
            # No batch can complete while the broker holds them, so a send() that had to wait
            # for buffer_memory would raise REQUEST_TIMED_OUT after max_block_ms: the sends
            # all returning is the proof, with no clock (a 1.9 s bound on the loop flaked at
            # load 23).
            futures = [producer.send("t", value, key=b"%d" % r, partition=p)
                       for r in range(2) for p in range(PARTITIONS)]
            memory = producer._core.acc  # what the records hold: within the bound
            assert memory.used_memory <= memory.buffer_memory
        finally:
            fake_cluster.slow_produce.discard(1)
        producer.flush(60)
    assert all(f.result().offset >= 0 for f in futures)
    wait_until(lambda: all(fake_cluster.records_in("t", p) == 2 + (p == 0)
                           for p in range(PARTITIONS)), 10, what="every record in the fake")
