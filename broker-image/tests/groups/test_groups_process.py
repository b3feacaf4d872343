"""Consumer groups against real broker processes: the coordinator is SIGKILLed.

A commit acknowledged by the coordinator was replicated to the in-sync replicas of the group's
``__consumer_offsets`` partition (acks=-1), so the broker elected in its place must serve it,
and the group's generation with it. Needs the Group service in the broker's gRPC server.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest

from strom.groups.offsets import OFFSETS_TOPIC
from strom.protocol.errors import ErrorCode
from strom.protocol.v1 import common_pb2, group_pb2
from strom.testing import running_cluster
from strom.testing.cluster import Cluster
from strom.transport.v1 import group_pb2_grpc

pytestmark = pytest.mark.integration

RETRY = {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
         ErrorCode.NOT_COORDINATOR}
T = TypeVar("T")


class Stubs:
    def __init__(self, cluster: Cluster) -> None:
        self._channels = {bid: grpc.insecure_channel(b.bootstrap)
                          for bid, b in cluster.brokers.items()}

    def __getitem__(self, broker_id: int) -> Any:
        return group_pb2_grpc.GroupStub(self._channels[broker_id])  # type: ignore[no-untyped-call]

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Cluster, Stubs]]:
    with running_cluster(tmp_path, brokers=3, config={
            "group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 3,
            "auto.leader.rebalance.enable": False}) as cluster:
        stubs = Stubs(cluster)
        try:
            yield cluster, stubs
        finally:
            stubs.close()


def until(call: Callable[[], T], timeout: float = 30.0) -> T:
    """Retry coordinator errors and unreachable brokers, bounded."""
    end = time.monotonic() + timeout
    while True:
        try:
            response = call()
            if getattr(response, "error_code", 0) not in RETRY or time.monotonic() > end:
                return response
        except grpc.RpcError:
            if time.monotonic() > end:
                raise
        time.sleep(0.1)


def find(cluster: Cluster, stubs: Stubs, not_in: tuple[int, ...] = ()) -> tuple[int, int]:
    end = time.monotonic() + 30
    while time.monotonic() < end:
        for bid in cluster.live_ids():
            try:
                found = stubs[bid].FindCoordinator(
                    group_pb2.FindCoordinatorRequest(group_id="g"), timeout=5)
            except grpc.RpcError:
                continue
            if found.error_code == 0 and found.coordinator.broker_id not in not_in:
                return found.coordinator.broker_id, found.offsets_partition
        time.sleep(0.2)
    raise AssertionError(f"no coordinator found for group g outside {not_in}")


def test_commit_survives_sigkill_of_the_coordinator(cluster: tuple[Cluster, Stubs]) -> None:
    c, stubs = cluster
    with c.admin() as admin:
        admin.create_topic("t", partitions=2, replication_factor=3)
    coordinator, partition = find(c, stubs)
    stub = stubs[coordinator]
    join = group_pb2.JoinGroupRequest(
        group_id="g", client_id="c", session_timeout_ms=30_000, rebalance_timeout_ms=5000,
        protocol_type="consumer", protocols=["range"],
        subscription=group_pb2.Subscription(topics=["t"]))
    first = until(lambda: stub.JoinGroup(join, timeout=10))
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED, first
    join.member_id = first.member_id
    joined = stub.JoinGroup(join, timeout=10)
    assert joined.error_code == 0 and joined.generation == 1
    mine = [common_pb2.TopicPartition(topic="t", partition=p) for p in (0, 1)]
    synced = stub.SyncGroup(group_pb2.SyncGroupRequest(
        group_id="g", member_id=joined.member_id, generation=1,
        assignments=[group_pb2.MemberAssignment(member_id=joined.member_id, partitions=mine)]),
        timeout=10)
    assert synced.error_code == 0 and len(synced.assignment) == 2
    c.wait_for_isr(OFFSETS_TOPIC, partition, 3, timeout=30)
    committed = until(lambda: stub.OffsetCommit(group_pb2.OffsetCommitRequest(
        group_id="g", member_id=joined.member_id, generation=1,
        partitions=[group_pb2.OffsetCommitPartition(topic="t", partition=0, offset=21),
                    group_pb2.OffsetCommitPartition(topic="t", partition=1, offset=5)]),
        timeout=10))
    assert [p.error_code for p in committed.partitions] == [0, 0], committed

    c.kill(coordinator)
    successor, same_partition = find(c, stubs, not_in=(coordinator,))
    assert same_partition == partition
    new = stubs[successor]
    fetched = until(lambda: new.OffsetFetch(group_pb2.OffsetFetchRequest(group_id="g"),
                                            timeout=10))
    assert fetched.error_code == 0, fetched
    assert sorted((o.topic, o.partition, o.offset) for o in fetched.offsets) == \
        [("t", 0, 21), ("t", 1, 5)]
    described = new.DescribeGroups(group_pb2.DescribeGroupsRequest(group_ids=["g"]), timeout=10)
    assert described.groups[0].generation == 1
    assert described.groups[0].coordinator == successor
    beat = new.Heartbeat(group_pb2.HeartbeatRequest(group_id="g", member_id=joined.member_id,
                                                    generation=1), timeout=10)
    assert beat.error_code == 0
