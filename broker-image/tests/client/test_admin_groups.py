"""Admin group calls against the fake cluster plus a fake Group service (this module's own).

The fake coordinator keeps groups in a dict and answers NOT_COORDINATOR from every broker but the
group's coordinator, so routing (FindCoordinator, re-finding after a move), merging ListGroups
from every broker, and the reset rules (clamping, dry run, refusing a group with members) are
exercised over real gRPC. The pure planning rules are tested directly at the end.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from strom.client import Admin, AsyncAdmin, ErrorCode, Producer, StromError, TopicPartition
from strom.client.group_admin import merge_listings, partition_lags, plan_reset
from strom.client.models import (
    GroupDescription,
    GroupMemberDescription,
    GroupPartitionLag,
    OffsetReset,
)
from strom.protocol.v1 import common_pb2, group_pb2
from strom.transport.v1 import admin_pb2_grpc, broker_pb2_grpc, group_pb2_grpc

from .conftest import FakeCluster, _FakeAdmin, _FakeBroker

TP = TopicPartition


@dataclass
class FakeMember:
    member_id: str
    client_id: str
    assignment: list[tuple[str, int]]
    instance_id: str = ""


@dataclass
class FakeGroup:
    state: str = "Empty"
    generation: int = 0
    members: list[FakeMember] = field(default_factory=list)
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)


class GroupFakeCluster(FakeCluster):
    """FakeCluster whose brokers also serve a fake Group service."""

    def __init__(self, brokers: int = 2) -> None:
        self.groups: dict[str, FakeGroup] = {}
        self.coordinator_of: dict[str, int] = {}
        self.find_faults: list[ErrorCode] = []
        self.group_calls: list[tuple[int, str]] = []
        self.n_brokers = brokers
        super().__init__(brokers)

    async def _start(self, broker_id: int) -> None:
        server = grpc.aio.server()
        broker_pb2_grpc.add_BrokerServicer_to_server(_FakeBroker(self, broker_id), server)
        admin_pb2_grpc.add_AdminServicer_to_server(_FakeAdmin(self, broker_id), server)
        group_pb2_grpc.add_GroupServicer_to_server(_FakeGroupService(self, broker_id), server)
        self.ports[broker_id] = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        self.servers[broker_id] = server

    def coordinator(self, group_id: str) -> int:
        return self.coordinator_of.get(
            group_id, zlib.crc32(group_id.encode()) % self.n_brokers + 1)

    def add_group(self, group_id: str, state: str = "Empty", members: list[FakeMember] | None
                  = None, offsets: dict[tuple[str, int], int] | None = None) -> FakeGroup:
        g = self.groups[group_id] = FakeGroup(state=state, generation=3 if members else 0,
                                              members=members or [], offsets=offsets or {})
        return g


class _FakeGroupService(group_pb2_grpc.GroupServicer):
    def __init__(self, cluster: GroupFakeCluster, broker_id: int) -> None:
        self.c = cluster
        self.id = broker_id

    def _mine(self, group_id: str) -> bool:
        return self.c.coordinator(group_id) == self.id

    async def FindCoordinator(self, request: Any, context: Any) -> Any:
        self.c.group_calls.append((self.id, "FindCoordinator"))
        if self.c.find_faults:
            return group_pb2.FindCoordinatorResponse(error_code=int(self.c.find_faults.pop(0)),
                                                     error_message="injected")
        b = self.c.coordinator(request.group_id)
        return group_pb2.FindCoordinatorResponse(coordinator=common_pb2.BrokerEndpoint(
            broker_id=b, host="127.0.0.1", port=self.c.ports[b]))

    async def ListGroups(self, request: Any, context: Any) -> Any:
        self.c.group_calls.append((self.id, "ListGroups"))
        states = set(request.states)
        return group_pb2.ListGroupsResponse(groups=[
            group_pb2.GroupListing(group_id=gid, state=g.state, protocol_type="consumer",
                                   coordinator=self.id)
            for gid, g in self.c.groups.items()
            if self._mine(gid) and (not states or g.state in states)])

    async def DescribeGroups(self, request: Any, context: Any) -> Any:
        self.c.group_calls.append((self.id, "DescribeGroups"))
        out = []
        for gid in request.group_ids:
            if not self._mine(gid):
                out.append(group_pb2.GroupDescription(
                    group_id=gid, error_code=int(ErrorCode.NOT_COORDINATOR)))
                continue
            g = self.c.groups.get(gid)
            if g is None:
                out.append(group_pb2.GroupDescription(group_id=gid, state="Dead"))
                continue
            out.append(group_pb2.GroupDescription(
                group_id=gid, state=g.state, protocol_type="consumer", protocol="range",
                generation=g.generation, coordinator=self.id,
                leader_id=g.members[0].member_id if g.members else "",
                members=[group_pb2.GroupMemberDescription(
                    member_id=m.member_id, client_id=m.client_id, group_instance_id=m.instance_id,
                    subscribed_topics=sorted({t for t, _ in m.assignment}),
                    assignment=[common_pb2.TopicPartition(topic=t, partition=p)
                                for t, p in m.assignment]) for m in g.members]))
        return group_pb2.DescribeGroupsResponse(groups=out)

    async def DeleteGroups(self, request: Any, context: Any) -> Any:
        out = []
        for gid in request.group_ids:
            g = self.c.groups.get(gid)
            code = (ErrorCode.NOT_COORDINATOR if not self._mine(gid)
                    else ErrorCode.GROUP_ID_NOT_FOUND if g is None
                    else ErrorCode.NON_EMPTY_GROUP if g.members else ErrorCode.NONE)
            if code is ErrorCode.NONE:
                del self.c.groups[gid]
            out.append(group_pb2.GroupResult(group_id=gid, error_code=int(code)))
        return group_pb2.DeleteGroupsResponse(results=out)

    async def OffsetCommit(self, request: Any, context: Any) -> Any:
        self.c.group_calls.append((self.id, "OffsetCommit"))
        if not self._mine(request.group_id):
            return group_pb2.OffsetCommitResponse(error_code=int(ErrorCode.NOT_COORDINATOR))
        g = self.c.groups.setdefault(request.group_id, FakeGroup())
        out = []
        for p in request.partitions:
            code = ErrorCode.UNKNOWN_MEMBER_ID if request.generation < 0 and g.members \
                else ErrorCode.NONE
            if code is ErrorCode.NONE:
                g.offsets[(p.topic, p.partition)] = p.offset
            out.append(group_pb2.PartitionError(topic=p.topic, partition=p.partition,
                                                error_code=int(code)))
        return group_pb2.OffsetCommitResponse(partitions=out)

    async def OffsetFetch(self, request: Any, context: Any) -> Any:
        if not self._mine(request.group_id):
            return group_pb2.OffsetFetchResponse(error_code=int(ErrorCode.NOT_COORDINATOR))
        g = self.c.groups.get(request.group_id, FakeGroup())
        keys = ([(tp.topic, tp.partition) for tp in request.partitions]
                or sorted(g.offsets))
        return group_pb2.OffsetFetchResponse(offsets=[
            group_pb2.CommittedOffset(topic=t, partition=p, offset=g.offsets.get((t, p), -1),
                                      leader_epoch=-1) for t, p in keys])


@pytest.fixture
def groups_cluster() -> Iterator[GroupFakeCluster]:
    cluster = GroupFakeCluster(brokers=2)
    yield cluster
    cluster.close()


def produce(cluster: GroupFakeCluster, topic: str, counts: dict[int, int]) -> None:
    with Producer(cluster.bootstrap) as p:
        for partition, n in counts.items():
            for i in range(n):
                p.send(topic, f"v{i}".encode(), partition=partition)
        p.flush()


def members() -> list[FakeMember]:
    return [FakeMember("m-1", "c1", [("t", 0)], instance_id="static-1"),
            FakeMember("m-2", "c2", [("t", 1)])]


# --- list / describe / delete -------------------------------------------------------------------

def test_list_groups_merges_every_broker(groups_cluster: GroupFakeCluster) -> None:
    groups_cluster.add_group("a", "Stable", members())
    groups_cluster.add_group("b", "Empty")
    groups_cluster.coordinator_of.update({"a": 1, "b": 2})
    with Admin(groups_cluster.bootstrap) as admin:
        listed = admin.list_groups()
        assert [(g.group_id, g.state, g.coordinator) for g in listed] == [
            ("a", "Stable", 1), ("b", "Empty", 2)]
        assert [g.group_id for g in admin.list_groups(states=["Empty"])] == ["b"]
    asked = {b for b, rpc in groups_cluster.group_calls if rpc == "ListGroups"}
    assert asked == {1, 2}


def test_describe_routes_to_the_coordinator(groups_cluster: GroupFakeCluster) -> None:
    groups_cluster.add_group("a", "Stable", members())
    groups_cluster.coordinator_of.update({"a": 2, "nope": 2})
    with Admin(groups_cluster.bootstrap) as admin:
        [desc, unknown] = admin.describe_groups(["a", "nope"])
    assert desc.state == "Stable" and desc.generation == 3 and desc.coordinator == 2
    assert desc.leader_id == "m-1" and desc.protocol == "range"
    assert [(m.member_id, m.client_id, m.group_instance_id, m.assignment)
            for m in desc.members] == [("m-1", "c1", "static-1", [TP("t", 0)]),
                                       ("m-2", "c2", None, [TP("t", 1)])]
    assert unknown.state == "Dead" and unknown.members == []
    describes = [b for b, rpc in groups_cluster.group_calls if rpc == "DescribeGroups"]
    assert describes and set(describes) == {2}


def test_coordinator_errors_are_retried(groups_cluster: GroupFakeCluster) -> None:
    groups_cluster.add_group("a", "Empty")
    groups_cluster.find_faults[:] = [ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                     ErrorCode.COORDINATOR_LOAD_IN_PROGRESS]
    with Admin(groups_cluster.bootstrap, retry_backoff_ms=5) as admin:
        assert admin.describe_group("a").state == "Empty"
    finds = [rpc for _, rpc in groups_cluster.group_calls if rpc == "FindCoordinator"]
    assert len(finds) == 3


def test_coordinator_that_keeps_failing_times_out(groups_cluster: GroupFakeCluster) -> None:
    groups_cluster.find_faults[:] = [ErrorCode.COORDINATOR_NOT_AVAILABLE] * 1000
    with (Admin(groups_cluster.bootstrap, request_timeout_ms=300, retry_backoff_ms=20) as admin,
          pytest.raises(StromError) as info):
        admin.describe_group("a")
    assert info.value.code is ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert "gave up after 300 ms" in info.value.message


def test_delete_groups(groups_cluster: GroupFakeCluster) -> None:
    groups_cluster.add_group("busy", "Stable", members())
    groups_cluster.add_group("idle", "Empty", offsets={("t", 0): 1})
    with Admin(groups_cluster.bootstrap) as admin:
        results = admin.delete_groups(["idle", "busy", "ghost"], raise_on_error=False)
        assert results["idle"] is None
        assert results["busy"] is not None and results["busy"].code is ErrorCode.NON_EMPTY_GROUP
        ghost = results["ghost"]
        assert ghost is not None and ghost.code is ErrorCode.GROUP_ID_NOT_FOUND
        with pytest.raises(StromError) as info:
            admin.delete_groups(["busy"])
        assert info.value.code is ErrorCode.NON_EMPTY_GROUP
    assert set(groups_cluster.groups) == {"busy"}


# --- offsets and lag ----------------------------------------------------------------------------

def test_group_offsets_and_lag(groups_cluster: GroupFakeCluster) -> None:
    groups_cluster.create_topic("t", 3)
    produce(groups_cluster, "t", {0: 5, 1: 7, 2: 2})
    # m-1 owns t-0 (committed 3), m-2 owns t-1 (never committed); t-2 committed, unowned
    groups_cluster.add_group("g", "Stable", members(), offsets={("t", 0): 3, ("t", 2): 2})
    with Admin(groups_cluster.bootstrap) as admin:
        assert admin.list_group_offsets("g") == {TP("t", 0): 3, TP("t", 2): 2}
        assert admin.list_group_offsets("g", [TP("t", 1)]) == {}
        lags = admin.group_lag("g")
    assert [(r.partition, r.committed, r.log_end_offset, r.lag, r.member_id, r.client_id)
            for r in lags] == [(0, 3, 5, 2, "m-1", "c1"), (1, None, 7, 7, "m-2", "c2"),
                               (2, 2, 2, 0, None, None)]


def test_lag_of_a_deleted_topic_is_unknown(groups_cluster: GroupFakeCluster) -> None:
    groups_cluster.create_topic("t", 1)
    produce(groups_cluster, "t", {0: 4})
    groups_cluster.add_group("g", "Empty", offsets={("t", 0): 1, ("gone", 0): 7})
    with Admin(groups_cluster.bootstrap) as admin:
        rows = admin.group_lag("g")
    assert [(r.topic, r.committed, r.log_end_offset, r.lag) for r in rows] == [
        ("gone", 7, -1, None), ("t", 1, 4, 3)]


async def test_async_admin_group_calls(groups_cluster: GroupFakeCluster) -> None:
    groups_cluster.create_topic("t", 1)
    groups_cluster.add_group("g", "Empty", offsets={("t", 0): 0})
    async with AsyncAdmin(groups_cluster.bootstrap) as admin:
        [listing] = await admin.list_groups()
        desc = await admin.describe_group("g")
        lags = await admin.group_lag("g")
    assert listing.group_id == "g" and desc.state == "Empty"
    assert [(r.partition, r.lag) for r in lags] == [(0, 0)]


# --- reset --------------------------------------------------------------------------------------

def test_reset_offsets_scenarios(groups_cluster: GroupFakeCluster) -> None:
    groups_cluster.create_topic("t", 2)
    produce(groups_cluster, "t", {0: 10, 1: 4})
    groups_cluster.add_group("g", "Empty", offsets={("t", 0): 6, ("t", 1): 1})
    with Admin(groups_cluster.bootstrap) as admin:
        plan = admin.reset_group_offsets("g", ["t"], "earliest", dry_run=True)
        assert plan == {TP("t", 0): 0, TP("t", 1): 0}
        assert groups_cluster.groups["g"].offsets == {("t", 0): 6, ("t", 1): 1}  # dry run

        assert admin.reset_group_offsets("g", ["t"], OffsetReset.shift_by(3)) == {
            TP("t", 0): 9, TP("t", 1): 4}  # t-1: 1 + 3 = 4 = its log end
        assert admin.reset_group_offsets("g", ["t"], OffsetReset.shift_by(-100)) == {
            TP("t", 0): 0, TP("t", 1): 0}  # clamped to the log start
        assert admin.reset_group_offsets("g", [("t", 0)], "offset:99") == {TP("t", 0): 10}
        assert admin.reset_group_offsets("g", [TP("t", 1)], OffsetReset.latest()) == {
            TP("t", 1): 4}
        assert admin.list_group_offsets("g") == {TP("t", 0): 10, TP("t", 1): 4}
        # every record was stamped around now: from 1970 is offset 0; from the future, log end
        assert admin.reset_group_offsets("g", ["t"], OffsetReset.to_datetime(
            "1970-01-01T00:00:00")) == {TP("t", 0): 0, TP("t", 1): 0}
        assert admin.reset_group_offsets("g", ["t"], OffsetReset.to_datetime(
            2**42)) == {TP("t", 0): 10, TP("t", 1): 4}
    assert groups_cluster.groups["g"].offsets == {("t", 0): 10, ("t", 1): 4}


def test_reset_refuses_a_group_with_members(groups_cluster: GroupFakeCluster) -> None:
    groups_cluster.create_topic("t", 2)
    groups_cluster.add_group("g", "Stable", members(), offsets={("t", 0): 1})
    with Admin(groups_cluster.bootstrap) as admin:
        for dry_run in (True, False):
            with pytest.raises(StromError) as info:
                admin.reset_group_offsets("g", ["t"], "earliest", dry_run=dry_run)
            assert info.value.code is ErrorCode.NON_EMPTY_GROUP
            assert "Stable with 2 member(s)" in info.value.message
            assert "strom group describe g" in info.value.message
    assert groups_cluster.groups["g"].offsets == {("t", 0): 1}
    assert not [c for c in groups_cluster.group_calls if c[1] == "OffsetCommit"]


def test_admin_commit_refused_because_of_members_says_what_to_do(
        groups_cluster: GroupFakeCluster) -> None:
    # a member joined between the emptiness check and the commit: the broker's error, our words
    groups_cluster.create_topic("t", 1)
    groups_cluster.add_group("busy", "Stable", members())
    with Admin(groups_cluster.bootstrap) as admin, pytest.raises(StromError) as info:
        admin.commit_group_offsets("busy", {TP("t", 0): 0})
    assert info.value.code is ErrorCode.UNKNOWN_MEMBER_ID
    assert "it has members now" in info.value.message
    assert "strom group describe busy --members" in info.value.message


def test_reset_of_an_unknown_group_creates_its_offsets(groups_cluster: GroupFakeCluster) -> None:
    groups_cluster.create_topic("t", 1)
    produce(groups_cluster, "t", {0: 3})
    with Admin(groups_cluster.bootstrap) as admin:
        assert admin.reset_group_offsets("new", ["t"], "latest") == {TP("t", 0): 3}
        assert admin.list_group_offsets("new") == {TP("t", 0): 3}


def test_reset_errors(groups_cluster: GroupFakeCluster) -> None:
    groups_cluster.create_topic("t", 1)
    groups_cluster.add_group("g", "Empty")
    with Admin(groups_cluster.bootstrap) as admin:
        with pytest.raises(StromError) as info:
            admin.reset_group_offsets("g", ["t"], "shift:1")
        assert "no committed offset" in info.value.message
        with pytest.raises(StromError) as info:
            admin.reset_group_offsets("g", [("t", 5)], "earliest")
        assert info.value.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        with pytest.raises(StromError) as info:
            admin.reset_group_offsets("g", ["t"], "sideways")
        assert info.value.code is ErrorCode.INVALID_REQUEST
        with pytest.raises(StromError):
            admin.reset_group_offsets("g", [], "earliest")


# --- pure pieces --------------------------------------------------------------------------------

def test_offset_reset_parsing() -> None:
    assert OffsetReset.parse("to-earliest") == OffsetReset("earliest")
    assert OffsetReset.parse("shift-by:-5") == OffsetReset("shift", -5)
    assert OffsetReset.parse("offset:7") == OffsetReset("offset", 7)
    assert OffsetReset.parse("datetime:2024-05-01T00:00:00Z").value == 1714521600000
    assert OffsetReset.to_datetime("2024-05-01T02:00:00+02:00").value == 1714521600000
    assert OffsetReset.to_datetime("1714521600000").value == 1714521600000
    for bad in ("offset:-1", "offset:x", "datetime:yesterday", "shift", "latest:3"):
        with pytest.raises(StromError):
            OffsetReset.parse(bad)


def test_plan_reset_clamps_to_the_log() -> None:
    tps = [TP("t", 0), TP("t", 1)]
    start = {TP("t", 0): 5, TP("t", 1): 0}
    end = {TP("t", 0): 20, TP("t", 1): 0}
    assert plan_reset(OffsetReset.to_offset(2), tps, {}, start, end) == {
        TP("t", 0): 5, TP("t", 1): 0}
    assert plan_reset(OffsetReset.shift_by(-10), tps, {TP("t", 0): 12, TP("t", 1): 0},
                      start, end) == {TP("t", 0): 5, TP("t", 1): 0}
    by_time = {TP("t", 0): 8, TP("t", 1): -1}
    assert plan_reset(OffsetReset.to_datetime(1), tps, {}, start, end, by_time) == {
        TP("t", 0): 8, TP("t", 1): 0}


def test_lag_without_a_commit_counts_from_the_log_start() -> None:
    row = GroupPartitionLag("t", 0, None, log_start_offset=40, log_end_offset=100)
    assert row.lag == 60
    assert GroupPartitionLag("t", 0, 120, 40, 100).lag == 0  # never negative
    desc = GroupDescription("g", "Stable", members=[
        GroupMemberDescription("m", "c", assignment=[TP("t", 1)])])
    rows = partition_lags(desc, {TP("t", 0): 1}, {}, {TP("t", 0): 3, TP("t", 1): 2})
    assert [(r.partition, r.lag, r.member_id) for r in rows] == [(0, 2, None), (1, 2, "m")]


def test_merge_listings_prefers_the_loaded_coordinator() -> None:
    answers = [group_pb2.GroupListing(group_id="g", state="Dead", coordinator=1),
               group_pb2.GroupListing(group_id="g", state="Stable", coordinator=2),
               group_pb2.GroupListing(group_id="a", state="Empty", coordinator=1)]
    assert [(g.group_id, g.coordinator) for g in merge_listings(answers)] == [("a", 1), ("g", 2)]
    assert [g.group_id for g in merge_listings(answers, ["stable"])] == ["g"]


# --- against real brokers -----------------------------------------------------------------------

@pytest.mark.integration
@pytest.mark.slow
def test_admin_groups_on_a_three_broker_cluster(tmp_path: Path) -> None:
    """Groups spread over several coordinators: ListGroups merges every broker's answer, the
    other calls follow each group to its own coordinator."""
    from strom.testing import running_cluster

    with running_cluster(tmp_path, brokers=3, config={
            "offsets.topic.num.partitions": "6", "offsets.topic.replication.factor": "3",
            "group.initial.rebalance.delay.ms": "0"}) as cluster, cluster.admin() as admin:
        admin.create_topic("t", partitions=2, replication_factor=3)
        with Producer(cluster.bootstrap, acks="all") as p:
            for i in range(8):
                p.send("t", b"x", partition=i % 2)
            p.flush()
        groups = [f"g{i}" for i in range(8)]
        for i, g in enumerate(groups):
            admin.commit_group_offsets(g, {TP("t", 0): i % 5, TP("t", 1): 1})
        listed = admin.list_groups()
        assert [g.group_id for g in listed] == groups
        assert {g.state for g in listed} == {"Empty"}
        coordinators = {g.group_id: g.coordinator for g in listed}
        assert len(set(coordinators.values())) > 1, coordinators  # really merged
        for desc in admin.describe_groups(groups):
            assert desc.state == "Empty" and desc.coordinator == coordinators[desc.group_id]
        assert admin.list_group_offsets("g3") == {TP("t", 0): 3, TP("t", 1): 1}
        assert [(r.partition, r.lag) for r in admin.group_lag("g3")] == [(0, 1), (1, 3)]
        plan = admin.reset_group_offsets("g3", ["t"], "latest", dry_run=True)
        assert plan == {TP("t", 0): 4, TP("t", 1): 4}
        assert admin.list_group_offsets("g3") == {TP("t", 0): 3, TP("t", 1): 1}
        admin.reset_group_offsets("g3", ["t"], OffsetReset.shift_by(-2))
        assert admin.list_group_offsets("g3") == {TP("t", 0): 1, TP("t", 1): 0}
        assert admin.delete_groups(groups) == dict.fromkeys(groups)
        assert admin.list_groups() == []
        assert admin.describe_group("g3").state == "Dead"
