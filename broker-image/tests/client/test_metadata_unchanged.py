"""A Metadata answer that changes nothing keeps the cache's version and parsed partitions.

Issue 21: parsing a 10,000-partition answer cost the client 56 ms, and every answer made a
new version, which sent the producer's keyed and sticky sends back through routing. The
producer polls the metadata while a Produce is slow or a retry waits (issue 12), so at
10,000 partitions most answers are the same as the one before.
"""

from __future__ import annotations

from strom.client.metadata import ClusterMetadata
from strom.client.models import TopicPartition
from strom.protocol.v1 import broker_pb2, common_pb2


def _answer(leaders: list[int], brokers: tuple[int, ...] = (1, 2)) -> broker_pb2.MetadataResponse:
    return broker_pb2.MetadataResponse(
        cluster_id="c", controller_id=1,
        brokers=[common_pb2.BrokerEndpoint(broker_id=b, host="h", port=9000 + b)
                 for b in brokers],
        topics=[broker_pb2.TopicMetadata(name="t", partitions=[
            broker_pb2.PartitionMetadata(partition=i, leader=leader, leader_epoch=5,
                                         replicas=[1, 2], isr=[1, 2])
            for i, leader in enumerate(leaders)])])


def test_an_unchanged_answer_keeps_the_version_and_the_parsed_topic() -> None:
    md = ClusterMetadata()
    md.update(_answer([1] * 1000), now_ms=0, requested=["t"])
    version, parsed = md.version, md.topics["t"]
    md.mark_stale()
    md.update(_answer([1] * 1000), now_ms=5, requested=["t"])
    assert md.version == version and md.topics["t"] is parsed
    assert not md.needs_refresh(6) and md.updated_ms == 5  # still a fresh answer


def test_any_change_moves_the_version() -> None:
    md = ClusterMetadata()
    md.update(_answer([1, 1]), now_ms=0, requested=["t"])
    changes = [_answer([1, 2]), _answer([1, 2], brokers=(1, 2, 3)),
               broker_pb2.MetadataResponse(cluster_id="c", controller_id=1)]
    for answer in changes:
        version = md.version
        md.update(answer, now_ms=1, requested=["t"])
        assert md.version == version + 1
    assert "t" not in md.topics  # asked for and absent: dropped
    md.update(_answer([2, 1]), now_ms=2, requested=["t"])
    assert md.leader_for(TopicPartition("t", 0)) == 2


def test_partitions_out_of_order_are_sorted() -> None:
    answer = _answer([1, 2, 1])
    parts = list(answer.topics[0].partitions)
    del answer.topics[0].partitions[:]
    answer.topics[0].partitions.extend(reversed(parts))
    md = ClusterMetadata()
    md.update(answer, now_ms=0)
    assert [p.partition for p in md.topics["t"].partitions] == [0, 1, 2]
    assert md.leader_for(TopicPartition("t", 1)) == 2
