"""The Group service table over a real gRPC server (127.0.0.1, free port) before a started core."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from strom.broker.service import group_methods
from strom.protocol.errors import ErrorCode
from strom.protocol.v1 import group_pb2
from strom.testing import free_port
from strom.transport.services import add_service
from strom.transport.v1 import group_pb2_grpc


@pytest.fixture
async def stub(node: Any) -> AsyncIterator[group_pb2_grpc.GroupStub]:
    server = grpc.aio.server()
    add_service(server, group_pb2.DESCRIPTOR.services_by_name["Group"],
                group_methods(node.core, node.groups))
    port = free_port()
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield group_pb2_grpc.GroupStub(channel)  # type: ignore[no-untyped-call]
    finally:
        await channel.close(None)
        await server.stop(None)


async def test_find_join_commit_fetch_over_grpc(node: Any,
                                                stub: group_pb2_grpc.GroupStub) -> None:
    await node.core.topics.create_topic("t", 1)
    found = await stub.FindCoordinator(group_pb2.FindCoordinatorRequest(group_id="g"))
    assert found.error_code == 0 and found.coordinator.broker_id == node.core.config.broker_id
    request = group_pb2.JoinGroupRequest(
        group_id="g", client_id="c", session_timeout_ms=6000, rebalance_timeout_ms=1000,
        protocol_type="consumer", protocols=["range"],
        subscription=group_pb2.Subscription(topics=["t"]))
    joined = await stub.JoinGroup(request)
    for _ in range(100):  # the coordinator may still be loading the new partition
        if joined.error_code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            break
        joined = await stub.JoinGroup(request)
    assert joined.error_code == ErrorCode.MEMBER_ID_REQUIRED and joined.member_id
    request.member_id = joined.member_id
    joined = await stub.JoinGroup(request)
    assert joined.error_code == 0 and joined.generation == 1
    assert joined.leader_id == joined.member_id
    synced = await stub.SyncGroup(group_pb2.SyncGroupRequest(
        group_id="g", member_id=joined.member_id, generation=1,
        assignments=[group_pb2.MemberAssignment(member_id=joined.member_id, partitions=[
            {"topic": "t", "partition": 0}])]))
    assert synced.error_code == 0 and [a.partition for a in synced.assignment] == [0]
    committed = await stub.OffsetCommit(group_pb2.OffsetCommitRequest(
        group_id="g", member_id=joined.member_id, generation=1,
        partitions=[group_pb2.OffsetCommitPartition(topic="t", partition=0, offset=3)]))
    assert [p.error_code for p in committed.partitions] == [0]
    fetched = await stub.OffsetFetch(group_pb2.OffsetFetchRequest(group_id="g"))
    assert [(o.topic, o.partition, o.offset) for o in fetched.offsets] == [("t", 0, 3)]
    wrong = await stub.Heartbeat(group_pb2.HeartbeatRequest(group_id="g", member_id="x",
                                                            generation=1))
    assert wrong.error_code == ErrorCode.UNKNOWN_MEMBER_ID and wrong.error_message
