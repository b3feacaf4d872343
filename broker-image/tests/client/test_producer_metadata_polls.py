"""A Produce that is slow to answer does not make the producer poll the metadata every 250 ms.

Issue 21: at 10,000 partitions a loaded broker's Produce takes seconds, and the producer's
issue-12 rule (poll the metadata every 250 ms while a Produce is unanswered for 1 s, to leave a
hung leader at once) asked it for a 10,000-partition Metadata answer four times a second: 35 %
of the broker's CPU during keyed produce. Now the polls back off (doubling up to
``retry_backoff_max_ms``), and a call whose partitions have no replica on another broker is not
polled for at all (no other broker can come to lead them). The failover itself is tested in
``test_producer_failover.py``.
"""

from __future__ import annotations

import time

from strom.client import Producer
from strom.client.models import TopicPartition
from strom.protocol.errors import ErrorCode
from strom.testing.waits import wait_until

from .conftest import FakeCluster


def _metadata_calls(cluster: FakeCluster) -> int:
    return sum(1 for _, rpc, _ in cluster.calls if rpc == "Metadata")


def _slow_produce(cluster: FakeCluster, producer: Producer, broker: int, seconds: float) -> int:
    """Metadata calls while one Produce to ``broker`` goes unanswered for ``seconds``."""
    producer.send("t", b"before").result(10)
    cluster.slow_produce.add(broker)
    try:
        produces = sum(1 for _, rpc, _ in cluster.calls if rpc == "Produce")
        future = producer.send("t", b"slow")
        wait_until(lambda: sum(1 for _, rpc, _ in cluster.calls if rpc == "Produce") > produces,
                   10, what="the slow produce to reach the broker")
        before = _metadata_calls(cluster)
        time.sleep(seconds)
        during = _metadata_calls(cluster) - before
    finally:
        cluster.slow_produce.discard(broker)
    assert future.result(10).offset == 1
    return during


def test_a_slow_produce_to_the_only_replica_polls_no_metadata(fake_cluster: FakeCluster) -> None:
    fake_cluster.create_topic("t", 1)
    with Producer(fake_cluster.bootstrap, acks=1) as producer:
        during = _slow_produce(fake_cluster, producer, 1, 3.0)
    assert during == 0, f"{during} Metadata calls while a Produce to the only replica waited"


def test_a_slow_produce_polls_the_metadata_with_backoff(fake_cluster2: FakeCluster) -> None:
    """Unanswered for 4.5 s with another replica: polls at about 1, 1.25, 1.75, 2.75, 3.75 s
    (retry_backoff_max_ms 1 s), not every 250 ms from 1 s on (14)."""
    fake_cluster2.create_topic("t", 1, leaders=[1])
    with Producer(fake_cluster2.bootstrap, acks="all") as producer:
        during = _slow_produce(fake_cluster2, producer, 1, 4.5)
    assert 3 <= during <= 7, f"{during} Metadata calls in 4.5 s of a slow Produce"


def test_a_retry_in_backoff_polls_the_metadata_with_backoff(fake_cluster2: FakeCluster) -> None:
    """Six NOT_LEADER_OR_FOLLOWER answers from a leader that stays put (backoffs 0.1, 0.2,
    0.4, 0.8, 1, 1 s): a refresh after each, and polls for a leader move in between that
    back off too; before, a retry in backoff refreshed every retry_backoff_ms (~30 here)."""
    fake_cluster2.create_topic("t", 1, leaders=[1])
    with Producer(fake_cluster2.bootstrap, acks="all", retry_backoff_ms=100,
                  retry_backoff_max_ms=1000) as producer:
        producer.send("t", b"before").result(10)
        before = _metadata_calls(fake_cluster2)
        fake_cluster2.faults[("Produce", "t", 0)] = [ErrorCode.NOT_LEADER_OR_FOLLOWER] * 6
        assert producer.send("t", b"retried").result(20).offset == 1
        during = _metadata_calls(fake_cluster2) - before
    assert 6 <= during <= 14, f"{during} Metadata calls for six retries"


def test_a_partition_without_a_leader_is_polled_for_with_backoff(
        fake_cluster2: FakeCluster) -> None:
    """3 s without a leader (an unknown broker leads it): polls at about 0, 0.25, 0.75, 1.75,
    2.75 s, not every retry_backoff_ms (~30); the record goes once the leader is known."""
    fake_cluster2.create_topic("t", 1, leaders=[1])
    with Producer(fake_cluster2.bootstrap, acks="all", retry_backoff_ms=100,
                  retry_backoff_max_ms=1000) as producer:
        producer.send("t", b"before").result(10)
        fake_cluster2.set_leader("t", 0, 99)
        future = producer.send("t", b"waits")  # NOT_LEADER_OR_FOLLOWER, then no leader known
        wait_until(lambda: producer._core._leader_of(TopicPartition("t", 0)) < 0, 10,
                   what="the producer to see no leader")
        before = _metadata_calls(fake_cluster2)
        time.sleep(3.0)
        during = _metadata_calls(fake_cluster2) - before
        fake_cluster2.set_leader("t", 0, 2)
        assert future.result(10).offset == 1
    assert 2 <= during <= 8, f"{during} Metadata calls in 3 s without a leader"
