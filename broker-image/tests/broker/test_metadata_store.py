"""The handlers' read view over the metadata image: brokers, topics, partition states."""

from __future__ import annotations

from strom.broker.metadata import ClusterMetadata
from strom.controller.metadata import (
    ChangePartition,
    CreateTopic,
    Endpoint,
    FenceBroker,
    MetadataImage,
    RegisterBroker,
    SetClusterId,
    UnfenceBroker,
)


class Source:
    def __init__(self) -> None:
        self.image = MetadataImage()
        self.controller_id = 0
        self.n = 0

    def apply(self, *commands: object) -> None:
        for c in commands:
            self.n += 1
            self.image.apply(self.n, c)  # type: ignore[arg-type]


def _cluster() -> Source:
    s = Source()
    s.apply(SetClusterId("c1"))
    for b in range(3):
        s.apply(RegisterBroker(b, f"i{b}", (Endpoint("grpc", "127.0.0.1", 9000 + b),), f"r{b}"),
                UnfenceBroker(b, f"i{b}"))
    s.apply(CreateTopic("t", "id-t", ((0, 1, 2), (1, 2, 0)), (("retention.ms", "5"),)))
    return s


def test_brokers_topics_and_states() -> None:
    s = _cluster()
    view = ClusterMetadata(s)
    assert view.cluster_id == "c1" and view.offset == s.n
    assert [b.broker_id for b in view.live_brokers()] == [0, 1, 2]
    assert view.broker_address(2) == "127.0.0.1:9002" and view.broker_address(7) is None
    record = view.topic("t")
    assert record is not None
    assert (record.partitions, record.replication_factor, dict(record.configs)) == (
        2, 3, {"retention.ms": "5"})
    state = view.partition_state("t", 1)
    assert state is not None and (state.leader, state.replicas, state.isr) == (1, (1, 2, 0),
                                                                               (1, 2, 0))
    assert view.partition_state("t", 2) is None and view.topic("nope") is None


def test_the_view_follows_the_image() -> None:
    s = _cluster()
    view = ClusterMetadata(s)
    s.apply(FenceBroker(1), ChangePartition("t", 1, leader=2, isr=(2, 0)))
    assert [b.broker_id for b in view.live_brokers()] == [0, 2]
    assert [b.broker_id for b in view.brokers() if b.fenced] == [1]
    state = view.partition_state("t", 1)
    assert state is not None and (state.leader, state.leader_epoch, state.isr) == (2, 1, (2, 0))
    s.apply(RegisterBroker(3, "i3", (Endpoint("grpc", "127.0.0.1", 9003),)),
            ChangePartition("t", 0, replicas=(0, 1, 2, 3), adding_replicas=(3,)))
    record = view.topic("t")
    assert record is not None and record.replication_factor == 3  # adding replicas not counted
