"""Coordinator failover in a 3-broker cluster run in this process (three BrokerServers).

Until the broker's server wires the group coordinator itself, each server's core gets one here,
wired the way ``broker/core.py`` will (publisher leadership callback, start after the core). The
group's coordinator is stopped gracefully (controlled shutdown moves its partition leadership);
the new leader of the group's ``__consumer_offsets`` partition must load the group and every
acknowledged commit.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from strom.broker.config import BrokerConfig
from strom.broker.coordinator import GroupCoordinator, GroupSettings, handlers
from strom.broker.server import BrokerServer
from strom.groups.offsets import OFFSETS_TOPIC, partition_for_group
from strom.protocol.errors import ErrorCode
from strom.protocol.v1 import group_pb2
from strom.testing.broker import free_ports
from strom.testing.cluster import CLUSTER_TEST_DEFAULTS

RETRY = {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
         ErrorCode.NOT_COORDINATOR}


@dataclasses.dataclass
class Member:
    server: BrokerServer
    groups: GroupCoordinator
    stopped: bool = False

    async def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            await self.groups.stop()
            await self.server.stop()


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[dict[int, Member]]:
    ports = free_ports(3)
    voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in enumerate(ports))
    servers = []
    for i, port in enumerate(ports):
        raw: dict[str, object] = {
            **CLUSTER_TEST_DEFAULTS, "broker.id": i, "port": port, "metrics.port": 0,
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "controller.quorum.voters": voters, "log.dirs": str(tmp_path / f"b{i}"),
            "group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 2,
            "default.replication.factor": 3, "auto.leader.rebalance.enable": False,
        }
        servers.append(BrokerServer(BrokerConfig.from_mapping(raw)))
    await asyncio.wait_for(asyncio.gather(*(s.start() for s in servers)), 60)
    members: dict[int, Member] = {}
    for i, server in enumerate(servers):
        core = server.core
        assert core is not None
        groups = getattr(core, "groups", None)
        if not isinstance(groups, GroupCoordinator):  # until core.py wires its own
            groups = GroupCoordinator(GroupSettings.from_config(core.config), i, core.metadata,
                                      core.replicas, core.topics, core.metrics)
            core.publisher.on_leadership = groups.on_leadership
            await groups.start()
        members[i] = Member(server, groups)
    end = time.monotonic() + 30
    while time.monotonic() < end and any(
            len(m.server.core.metadata.live_brokers()) < 3 for m in members.values()
            if m.server.core is not None):
        await asyncio.sleep(0.05)
    try:
        yield members
    finally:
        for member in members.values():
            await member.stop()


async def until_ok(call, deadline_s: float = 30.0):  # type: ignore[no-untyped-def]
    end = time.monotonic() + deadline_s
    while True:
        response = await call()
        if getattr(response, "error_code", 0) not in RETRY or time.monotonic() > end:
            return response
        await asyncio.sleep(0.1)


async def test_commits_and_generation_survive_coordinator_failover(
        cluster: dict[int, Member]) -> None:
    any_member = cluster[0]
    core0 = any_member.server.core
    assert core0 is not None
    await core0.topics.create_topic("t", 1, 3)
    found = await until_ok(lambda: handlers.find_coordinator(
        any_member.groups, group_pb2.FindCoordinatorRequest(group_id="g")))
    assert found.error_code == 0, found
    old = cluster[found.coordinator.broker_id]
    partition = partition_for_group("g", 2)
    assert found.offsets_partition == partition

    def join(member_id: str) -> group_pb2.JoinGroupRequest:
        return group_pb2.JoinGroupRequest(
            group_id="g", member_id=member_id, client_id="c", session_timeout_ms=30_000,
            rebalance_timeout_ms=5000, protocol_type="consumer", protocols=["range"],
            subscription=group_pb2.Subscription(topics=["t"]))

    first = await until_ok(lambda: handlers.join_group(old.groups, join("")))
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED, first
    joined = await handlers.join_group(old.groups, join(first.member_id))
    assert joined.error_code == 0 and joined.generation == 1
    synced = await handlers.sync_group(old.groups, group_pb2.SyncGroupRequest(
        group_id="g", member_id=joined.member_id, generation=1,
        assignments=[group_pb2.MemberAssignment(member_id=joined.member_id,
                                                partitions=[{"topic": "t", "partition": 0}])]))
    assert synced.error_code == 0
    committed = await until_ok(lambda: handlers.offset_commit(old.groups,
                                                              group_pb2.OffsetCommitRequest(
        group_id="g", member_id=joined.member_id, generation=1,
        partitions=[group_pb2.OffsetCommitPartition(topic="t", partition=0, offset=17)])))
    assert [p.error_code for p in committed.partitions] == [0], committed

    await old.stop()  # controlled shutdown: the partition's leadership moves
    survivors = [m for m in cluster.values() if m is not old]
    end = time.monotonic() + 30
    new: Member | None = None
    while new is None and time.monotonic() < end:
        for member in survivors:
            if member.groups.partitions.get(partition) is not None:
                new = member
        await asyncio.sleep(0.1)
    assert new is not None, f"no survivor took over {OFFSETS_TOPIC}-{partition}"
    fetched = await until_ok(lambda: handlers.offset_fetch(
        new.groups, group_pb2.OffsetFetchRequest(group_id="g")))
    assert [(o.topic, o.partition, o.offset) for o in fetched.offsets] == [("t", 0, 17)]
    described = await handlers.describe_groups(new.groups,
                                               group_pb2.DescribeGroupsRequest(group_ids=["g"]))
    assert described.groups[0].state == "Stable" and described.groups[0].generation == 1
    beat = await handlers.heartbeat(new.groups, group_pb2.HeartbeatRequest(
        group_id="g", member_id=joined.member_id, generation=1))
    assert beat.error_code == 0
    other = next(m for m in survivors if m is not new)
    refused = await handlers.offset_fetch(other.groups,
                                          group_pb2.OffsetFetchRequest(group_id="g"))
    assert refused.error_code == ErrorCode.NOT_COORDINATOR
