"""Admin reassignment/election calls against tiny fake brokers (gRPC servers in this process).

Two fake brokers answer ListPartitionReassignments the way real ones do: both know the moves in
flight, only the partition's leader fills in progress. The client must ask both and merge.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from strom.client import Admin, ErrorCode, StromError
from strom.client.models import PartitionReassignment
from strom.protocol.v1 import admin_pb2, broker_pb2, common_pb2
from strom.transport.status import to_grpc_status
from strom.transport.v1 import admin_pb2_grpc, broker_pb2_grpc


@dataclass
class Shared:
    ports: dict[int, int] = field(default_factory=dict)
    alter_requests: list[admin_pb2.AlterPartitionReassignmentsRequest] = field(
        default_factory=list)
    elect_requests: list[admin_pb2.ElectLeadersRequest] = field(default_factory=list)
    list_calls: list[int] = field(default_factory=list)
    down: set[int] = field(default_factory=set)
    fenced: set[int] = field(default_factory=set)


class FakeBroker(admin_pb2_grpc.AdminServicer, broker_pb2_grpc.BrokerServicer):
    """Broker ``me``; partition t-0 is led by 1, t-1 by 2, both moving {1,2} -> {2,3}."""

    def __init__(self, me: int, shared: Shared) -> None:
        self.me = me
        self.shared = shared

    def Metadata(self, request: Any, context: Any) -> broker_pb2.MetadataResponse:
        return broker_pb2.MetadataResponse(cluster_id="c", controller_id=1, brokers=[
            common_pb2.BrokerEndpoint(broker_id=b, host="127.0.0.1", port=p)
            for b, p in sorted(self.shared.ports.items())])

    def DescribeCluster(self, request: Any, context: Any) -> admin_pb2.DescribeClusterResponse:
        return admin_pb2.DescribeClusterResponse(
            cluster_id="c", controller_id=1, fenced_broker_ids=[3, *self.shared.fenced],
            voters=[2, 1],
            metadata_offset=42, answered_by=self.me, brokers=[
                common_pb2.BrokerEndpoint(broker_id=b, host="127.0.0.1", port=p, rack="r")
                for b, p in sorted(self.shared.ports.items())])

    def ListPartitionReassignments(self, request: Any, context: Any) -> Any:
        self.shared.list_calls.append(self.me)
        if self.me in self.shared.down:
            context.abort(grpc.StatusCode.UNAVAILABLE, "down")
        out = []
        for partition, leader in ((0, 1), (1, 2)):
            if request.topics and "t" not in request.topics:
                continue
            r = admin_pb2.PartitionReassignment(
                topic="t", partition=partition, replicas=[1, 2, 3], adding_replicas=[3],
                removing_replicas=[1], isr=[1, 2], leader=leader, leader_log_end_offset=-1,
                answered_by=self.me)
            if leader == self.me:
                r.leader_log_end_offset = 200
                r.progress.extend([admin_pb2.ReplicaProgress(broker_id=b, log_end_offset=o)
                                   for b, o in ((1, 200), (2, 200), (3, 50 * (partition + 1)))])
            out.append(r)
        return admin_pb2.ListPartitionReassignmentsResponse(reassignments=out)

    def AlterPartitionReassignments(self, request: Any, context: Any) -> Any:
        self.shared.alter_requests.append(request)
        results = []
        for t in request.partitions:
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if t.topic == "nope" else ErrorCode.NONE
            results.append(admin_pb2.PartitionResult(
                topic=t.topic, partition=t.partition, error_code=int(code),
                error_message="no such topic" if code else ""))
        return admin_pb2.AlterPartitionReassignmentsResponse(results=results)

    def ElectLeaders(self, request: Any, context: Any) -> Any:
        self.shared.elect_requests.append(request)
        if request.election_type == 1 and not request.partitions:
            context.abort_with_status(to_grpc_status(StromError(
                ErrorCode.INVALID_REQUEST, "unclean election needs partitions")))
        return admin_pb2.ElectLeadersResponse(results=[
            admin_pb2.PartitionResult(topic="t", partition=0,
                                      error_code=int(ErrorCode.ELECTION_NOT_NEEDED)),
            admin_pb2.PartitionResult(topic="t", partition=1,
                                      error_code=int(ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE),
                                      error_message="broker 2 is not in sync"),
        ])


@pytest.fixture
def fake() -> Iterator[tuple[Shared, str]]:
    shared = Shared()
    servers = []
    for me in (1, 2):
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        broker = FakeBroker(me, shared)
        admin_pb2_grpc.add_AdminServicer_to_server(broker, server)  # type: ignore[no-untyped-call]
        broker_pb2_grpc.add_BrokerServicer_to_server(broker, server)  # type: ignore[no-untyped-call]
        shared.ports[me] = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
    try:
        yield shared, f"127.0.0.1:{shared.ports[1]}"
    finally:
        for server in servers:
            server.stop(grace=None)


def test_list_asks_every_broker_and_takes_progress_from_each_leader(
        fake: tuple[Shared, str]) -> None:
    shared, bootstrap = fake
    with Admin(bootstrap, request_timeout_ms=5000) as admin:
        moves = admin.list_partition_reassignments(["t"])
    assert sorted(shared.list_calls) == [1, 2]
    assert [(m.topic, m.partition, m.leader) for m in moves] == [("t", 0, 1), ("t", 1, 2)]
    first, second = moves
    assert first.progress == {1: 200, 2: 200, 3: 50} and first.leader_log_end_offset == 200
    assert second.progress == {1: 200, 2: 200, 3: 100}
    assert first.adding == [3] and first.removing == [1] and first.isr == [1, 2]
    assert first.percent_done == 25.0 and second.percent_done == 50.0
    assert first.offsets_behind == {3: 150}


def test_list_without_the_leaders_answer_has_no_progress(fake: tuple[Shared, str]) -> None:
    shared, bootstrap = fake
    shared.down.add(2)
    with Admin(bootstrap, request_timeout_ms=5000) as admin:
        moves = admin.list_partition_reassignments()
    by_partition = {m.partition: m for m in moves}
    assert by_partition[0].percent_done == 25.0
    assert by_partition[1].progress == {} and by_partition[1].percent_done is None
    assert by_partition[1].replicas == [1, 2, 3]


def test_list_skips_fenced_brokers(fake: tuple[Shared, str]) -> None:
    shared, bootstrap = fake
    shared.fenced.add(2)
    with Admin(bootstrap, request_timeout_ms=5000) as admin:
        moves = admin.list_partition_reassignments()
    assert shared.list_calls == [1]
    assert [m.percent_done for m in moves] == [25.0, None]


def test_alter_sends_targets_cancels_and_throttle(fake: tuple[Shared, str]) -> None:
    shared, bootstrap = fake
    with Admin(bootstrap, request_timeout_ms=5000) as admin:
        results = admin.alter_partition_reassignments(
            {("t", 0): [2, 3], ("t", 1): None}, throttle_bytes_per_sec=10_000_000)
        assert results == {("t", 0): None, ("t", 1): None}
        with pytest.raises(StromError) as info:
            admin.alter_partition_reassignments({("nope", 0): [1]})
        assert info.value.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        partial = admin.alter_partition_reassignments({("nope", 0): [1], ("t", 0): [2]},
                                                      raise_on_error=False)
        err = partial[("nope", 0)]
        assert err is not None and err.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert partial[("t", 0)] is None
        admin.alter_partition_reassignments({("t", 0): [2]}, keep_replication_factor=True)
        with pytest.raises(StromError) as info:
            admin.alter_partition_reassignments({("t", 0): [1]}, throttle_bytes_per_sec=-5)
        assert "throttle_bytes_per_sec" in info.value.message
        admin.set_replication_throttle(None)
        admin.set_replication_throttle(512)
        with pytest.raises(StromError):
            admin.set_replication_throttle(0)
        assert admin.replication_throttle() is None  # the fake answers 0: none
    remove, cap = shared.alter_requests[-2:]
    assert (remove.throttle_bytes_per_sec, list(remove.partitions)) == (-1, [])
    assert (cap.throttle_bytes_per_sec, list(cap.partitions)) == (512, [])
    kept = shared.alter_requests[-3]  # KIP-860's guard travels to the broker
    assert kept.keep_replication_factor and not shared.alter_requests[0].keep_replication_factor
    request = shared.alter_requests[0]
    assert request.throttle_bytes_per_sec == 10_000_000 and not request.validate_only
    targets = {(t.topic, t.partition): (list(t.replicas), t.cancel) for t in request.partitions}
    assert targets == {("t", 0): ([2, 3], False), ("t", 1): ([], True)}


def test_elect_leaders_treats_not_needed_as_success(fake: tuple[Shared, str]) -> None:
    shared, bootstrap = fake
    with Admin(bootstrap, request_timeout_ms=5000) as admin:
        results = admin.elect_leaders([("t", 0), ("t", 1)], raise_on_error=False)
        assert results[("t", 0)] is None
        err = results[("t", 1)]
        assert err is not None and err.code is ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
        with pytest.raises(StromError) as info:
            admin.elect_leaders([("t", 1)])
        assert info.value.code is ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
        with pytest.raises(StromError) as info:
            admin.elect_leaders(None, "unclean")
        assert info.value.code is ErrorCode.INVALID_REQUEST
        with pytest.raises(StromError):
            admin.elect_leaders(None, "dirty")
    sent = shared.elect_requests[0]
    assert sent.election_type == 0
    assert [(p.topic, p.partition) for p in sent.partitions] == [("t", 0), ("t", 1)]
    assert shared.elect_requests[-1].election_type == 1


def test_describe_cluster_has_the_clustering_fields(fake: tuple[Shared, str]) -> None:
    _, bootstrap = fake
    with Admin(bootstrap, request_timeout_ms=5000) as admin:
        desc = admin.describe_cluster()
    assert desc.voters == [1, 2] and desc.metadata_offset == 42 and desc.answered_by in (1, 2)
    assert [b.broker_id for b in desc.brokers] == [1, 2]
    assert desc.fenced_broker_ids == [3]
    assert [b.broker_id for b in desc.live_brokers] == [1, 2]


def test_percent_done_rules() -> None:
    def move(**kw: Any) -> PartitionReassignment:
        base: dict[str, Any] = dict(topic="t", partition=0, replicas=[1, 2], adding=[2],
                                    removing=[1], isr=[1], leader=1)
        base.update(kw)
        return PartitionReassignment(**base)

    assert move(adding=[]).percent_done == 100.0
    assert move().percent_done is None  # no progress known
    assert move(isr=[1, 2]).percent_done == 100.0  # in sync counts as done
    assert move(leader_log_end_offset=0, progress={2: 0}).percent_done == 100.0
    assert move(leader_log_end_offset=10, progress={2: 20}).percent_done == 100.0
    assert move(leader_log_end_offset=300, progress={2: 100}).percent_done == 33.3
    slow = move(adding=[2, 3], leader_log_end_offset=100, progress={2: 90, 3: 10})
    assert slow.percent_done == 10.0 and slow.offsets_behind == {2: 10, 3: 90}
