"""The metadata cache: leaders per partition, grouping by leader, staleness, topic errors."""

from __future__ import annotations

from strom.client.metadata import NO_LEADER, ClusterMetadata
from strom.client.models import TopicPartition
from strom.protocol.errors import ErrorCode
from strom.protocol.v1 import broker_pb2, common_pb2


def _response(leaders: dict[str, list[int]], brokers: tuple[int, ...] = (1, 2)
              ) -> broker_pb2.MetadataResponse:
    return broker_pb2.MetadataResponse(
        cluster_id="c", controller_id=1,
        brokers=[common_pb2.BrokerEndpoint(broker_id=b, host="h", port=9000 + b)
                 for b in brokers],
        topics=[broker_pb2.TopicMetadata(name=name, partitions=[
            broker_pb2.PartitionMetadata(partition=i, leader=leader, leader_epoch=5)
            for i, leader in enumerate(ls)]) for name, ls in leaders.items()])


def test_routes_each_partition_to_its_leader() -> None:
    md = ClusterMetadata()
    md.update(_response({"a": [1, 2, 1], "b": [2]}), now_ms=0)
    assert md.leader_for(TopicPartition("a", 1)) == 2
    assert md.broker_address(2) == "h:9002"
    routed, unknown = md.group_by_leader([TopicPartition("a", p) for p in range(3)]
                                         + [TopicPartition("b", 0), TopicPartition("c", 0)])
    assert routed == {1: [TopicPartition("a", 0), TopicPartition("a", 2)],
                      2: [TopicPartition("a", 1), TopicPartition("b", 0)]}
    assert unknown == [TopicPartition("c", 0)]
    assert md.partition_count("a") == 3
    assert md.partitions_for("a") == [0, 1, 2]
    assert md.leader_epoch(TopicPartition("a", 0)) == 5


def test_offline_or_unknown_leader() -> None:
    md = ClusterMetadata()
    md.update(_response({"a": [-1, 3]}, brokers=(1,)), now_ms=0)
    assert md.leader_for(TopicPartition("a", 0)) == NO_LEADER
    assert md.leader_for(TopicPartition("a", 1)) == NO_LEADER  # broker 3 not in metadata
    assert md.leader_for(TopicPartition("a", 9)) == NO_LEADER


def test_staleness_and_max_age() -> None:
    md = ClusterMetadata(max_age_ms=1000)
    assert md.needs_refresh(0)
    md.update(_response({"a": [1]}), now_ms=0)
    assert not md.needs_refresh(999)
    assert md.needs_refresh(1000)
    md.update(_response({"a": [1]}), now_ms=2000)
    md.mark_stale()
    assert md.needs_refresh(2001)


def test_leader_change_is_picked_up_and_version_bumps() -> None:
    md = ClusterMetadata()
    md.update(_response({"a": [1]}), now_ms=0)
    v = md.version
    md.update(_response({"a": [2]}), now_ms=1)
    assert md.leader_for(TopicPartition("a", 0)) == 2
    assert md.version == v + 1


def test_topic_errors_and_dropped_topics() -> None:
    md = ClusterMetadata()
    md.update(_response({"a": [1]}), now_ms=0)
    resp = broker_pb2.MetadataResponse(topics=[broker_pb2.TopicMetadata(
        name="x", error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), error_message="nope")])
    md.update(resp, now_ms=1, requested=["a", "x"])
    assert md.partition_count("x") is None
    err = md.topic_error("x")
    assert err is not None and err.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert md.partition_count("a") is None  # asked for but absent: dropped
