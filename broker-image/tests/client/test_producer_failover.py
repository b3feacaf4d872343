"""The producer follows a leader change at once, also away from a broker that hangs.

Issue 12.4: a leader that hangs (SIGSTOP) or is cut off kept its partitions' writes waiting for
the whole request timeout (30 s), sometimes twice, although another broker led within seconds.
Now an unanswered Produce makes the sender poll the metadata (hedged across brokers, so a hung
broker cannot stall the refresh) and abandon the call once another broker leads; a batch that
failed on one leader skips its backoff once the metadata names another (Kafka's KIP-951).
The real-process versions are in ``e2e/test_cluster_failover.py`` and ``benchmarks/failover.py``.
"""

from __future__ import annotations

import time

from strom.client import Producer
from strom.client.accumulator import RecordAccumulator
from strom.client.models import TopicPartition
from strom.protocol.records import Compression
from strom.testing.waits import wait_until

from .conftest import FakeCluster


def test_a_produce_to_a_hung_leader_moves_to_the_new_leader(fake_cluster2: FakeCluster) -> None:
    fake_cluster2.create_topic("t", 1, leaders=[1])
    with Producer(fake_cluster2.bootstrap, acks="all") as producer:  # request timeout 30 s
        assert producer.send("t", b"before").result(10).offset == 0
        fake_cluster2.hung.add(1)
        future = producer.send("t", b"during")
        wait_until(lambda: [b for b, rpc, _ in fake_cluster2.calls if rpc == "Produce"] == [1, 1],
                   10, what="the second produce to hang on broker 1")
        fake_cluster2.set_leader("t", 0, 2)  # the controller elected broker 2
        start = time.monotonic()
        md = future.result(20)
        took = time.monotonic() - start
    assert md.offset == 1  # broker 1 never answered: nothing was appended there
    assert took < 10, f"{took:.1f} s: waited on the hung broker instead of moving"
    assert fake_cluster2.records_in("t", 0) == 2


def test_metadata_refresh_does_not_wait_on_a_hung_broker(fake_cluster2: FakeCluster) -> None:
    fake_cluster2.create_topic("t", 1, leaders=[2])
    fake_cluster2.hung.add(1)  # broker 1 is first in the bootstrap list
    try:
        with Producer(fake_cluster2.bootstrap, acks="all") as producer:
            start = time.monotonic()
            producer.send("t", b"x").result(20)
            assert time.monotonic() - start < 10
    finally:
        fake_cluster2.hung.discard(1)


def _batch(acc: RecordAccumulator, tp: TopicPartition) -> None:
    with acc.lock:
        batch = acc.new_batch(tp, 0.0, 1024)
        batch.builder.try_append(None, b"x", 0, [])


def test_a_retry_skips_its_backoff_once_another_broker_leads() -> None:
    tp = TopicPartition("t", 0)
    acc = RecordAccumulator(batch_size=1024, linger_ms=0, compression=Compression.parse("none"),
                            buffer_memory=1 << 20, max_in_flight_per_partition=1)
    _batch(acc, tp)
    (batch,) = acc.drain([1], lambda _: 1, 1 << 20, now_ms=0.0)[1]
    batch.failed_leader = 1
    acc.reenqueue(batch, retry_at_ms=10_000.0)
    same = acc.ready(100.0, lambda _: 1)
    assert not same.nodes and same.backing_off and same.next_check_ms == 10_000.0
    moved = acc.ready(100.0, lambda _: 2)
    assert moved.nodes == {2}
    assert acc.drain([2], lambda _: 2, 1 << 20, now_ms=100.0) == {2: [batch]}


