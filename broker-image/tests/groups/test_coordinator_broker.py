"""The group coordinator inside a started single-broker core, driven through the RPC handlers.

Everything goes through ``__consumer_offsets`` for real: the topic is created on the first
FindCoordinator, group metadata and commits are appended with acks=-1, and a new core on the same
directory gets them back by replaying the partition.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from prometheus_client import generate_latest

from strom.broker import produce
from strom.broker.coordinator import GroupCoordinator, handlers
from strom.broker.core import BrokerCore
from strom.client.assignors import MemberSubscription, range_assign
from strom.groups.offsets import OFFSETS_TOPIC, partition_for_group
from strom.protocol.errors import ErrorCode
from strom.protocol.records import encode_batch
from strom.protocol.v1 import broker_pb2, common_pb2, group_pb2
from strom.testing.waits import async_wait_until


class Node(Protocol):
    """``conftest.Node``: a started core and its group coordinator."""

    core: BrokerCore
    groups: GroupCoordinator

    async def stop(self) -> None: ...


NodeFactory = Callable[..., Awaitable[Node]]

RETRY = {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
         ErrorCode.NOT_COORDINATOR}
T = TypeVar("T")


async def retrying(call: Callable[[], Awaitable[T]], deadline_s: float = 10.0) -> T:
    """Retry coordinator errors (loading, not yet available) as a client would, bounded."""
    end = time.monotonic() + deadline_s
    while True:
        response = await call()
        code = getattr(response, "error_code", 0)
        if code not in RETRY or time.monotonic() > end:
            return response
        await asyncio.sleep(0.05)


async def find(node: Node, group: str) -> group_pb2.FindCoordinatorResponse:
    return await retrying(lambda: handlers.find_coordinator(
        node.groups, group_pb2.FindCoordinatorRequest(group_id=group)))


async def join(node: Node, group: str, member_id: str = "", topics: tuple[str, ...] = ("t",),
               session_ms: int = 6000, rebalance_ms: int = 3000
               ) -> group_pb2.JoinGroupResponse:
    def request(mid: str) -> group_pb2.JoinGroupRequest:
        return group_pb2.JoinGroupRequest(
            group_id=group, member_id=mid, client_id="c", session_timeout_ms=session_ms,
            rebalance_timeout_ms=rebalance_ms, protocol_type="consumer", protocols=["range"],
            subscription=group_pb2.Subscription(topics=list(topics)))

    response = await retrying(lambda: handlers.join_group(node.groups, request(member_id)))
    if response.error_code == ErrorCode.MEMBER_ID_REQUIRED:
        response = await handlers.join_group(node.groups, request(response.member_id))
    return response


async def sync(node: Node, group: str, joined: group_pb2.JoinGroupResponse,
               counts: dict[str, int]) -> group_pb2.SyncGroupResponse:
    assignments = []
    if joined.member_id == joined.leader_id:
        members = [MemberSubscription(m.member_id, tuple(m.subscription.topics))
                   for m in joined.members]
        for member_id, tps in range_assign(members, counts).items():
            assignments.append(group_pb2.MemberAssignment(
                member_id=member_id,
                partitions=[common_pb2.TopicPartition(topic=t, partition=p) for t, p in tps]))
    return await handlers.sync_group(node.groups, group_pb2.SyncGroupRequest(
        group_id=group, member_id=joined.member_id, generation=joined.generation,
        assignments=assignments))


async def heartbeat(node: Node, group: str, joined: group_pb2.JoinGroupResponse) -> int:
    response = await handlers.heartbeat(node.groups, group_pb2.HeartbeatRequest(
        group_id=group, member_id=joined.member_id, generation=joined.generation))
    return response.error_code


async def commit(node: Node, group: str, offsets: dict[tuple[str, int], int],
                 joined: group_pb2.JoinGroupResponse | None = None
                 ) -> group_pb2.OffsetCommitResponse:
    return await retrying(lambda: handlers.offset_commit(node.groups, group_pb2.OffsetCommitRequest(
        group_id=group, generation=joined.generation if joined else -1,
        member_id=joined.member_id if joined else "",
        partitions=[group_pb2.OffsetCommitPartition(topic=t, partition=p, offset=o,
                                                    leader_epoch=-1)
                    for (t, p), o in offsets.items()])))


async def fetch(node: Node, group: str, tps: list[tuple[str, int]] | None = None
                ) -> dict[tuple[str, int], int]:
    request = group_pb2.OffsetFetchRequest(
        group_id=group,
        partitions=[common_pb2.TopicPartition(topic=t, partition=p) for t, p in tps or []])
    response = await retrying(lambda: handlers.offset_fetch(node.groups, request))
    assert response.error_code == 0, response
    return {(o.topic, o.partition): o.offset for o in response.offsets}


async def describe(node: Node, group: str) -> group_pb2.GroupDescription:
    response = await retrying(lambda: handlers.describe_groups(
        node.groups, group_pb2.DescribeGroupsRequest(group_ids=[group])))
    return response.groups[0]


async def form_group(node: Node, group: str, n: int, counts: dict[str, int], **kw: int
                     ) -> list[group_pb2.JoinGroupResponse]:
    joined = await asyncio.gather(*(join(node, group, **kw) for _ in range(n)))  # type: ignore[arg-type]
    assert all(j.error_code == 0 for j in joined), joined
    synced = await asyncio.gather(*(sync(node, group, j, counts) for j in joined))
    assert all(s.error_code == 0 for s in synced), synced
    return list(joined)


async def test_find_coordinator_creates_the_compacted_offsets_topic(node: Node) -> None:
    found = await find(node, "g")
    assert found.error_code == 0, found
    assert found.coordinator.broker_id == node.core.config.broker_id
    assert found.coordinator.port == node.core.metadata.brokers()[0].port
    assert found.offsets_partition == partition_for_group("g", 3)
    topic = node.core.metadata.topic(OFFSETS_TOPIC)
    assert topic is not None and topic.partitions == 3 and topic.replication_factor == 1
    assert topic.configs.get("cleanup.policy") == "compact"
    assert topic.configs.get("segment.bytes") == str(100 * 1024 * 1024)
    again = await find(node, "g")
    assert again.offsets_partition == found.offsets_partition
    empty = await handlers.find_coordinator(node.groups, group_pb2.FindCoordinatorRequest())
    assert empty.error_code == ErrorCode.INVALID_GROUP_ID


async def test_three_members_join_sync_and_heartbeat(node: Node) -> None:
    await node.core.topics.create_topic("t", 6)
    await find(node, "g")
    joined = await form_group(node, "g", 3, {"t": 6})
    assert {j.generation for j in joined} == {1}
    leaders = [j for j in joined if j.member_id == j.leader_id]
    assert len(leaders) == 1 and len(leaders[0].members) == 3
    assert all(not j.members for j in joined if j not in leaders)
    for j in joined:
        assert await heartbeat(node, "g", j) == 0
    described = await describe(node, "g")
    assert described.state == "Stable" and described.generation == 1
    assert described.protocol == "range" and described.protocol_type == "consumer"
    owned = sorted((tp.topic, tp.partition) for m in described.members for tp in m.assignment)
    assert owned == [("t", p) for p in range(6)]
    assert all(len(m.assignment) == 2 for m in described.members)
    listed = await handlers.list_groups(node.groups, group_pb2.ListGroupsRequest())
    assert [(g.group_id, g.state) for g in listed.groups] == [("g", "Stable")]
    stable_only = await handlers.list_groups(node.groups,
                                             group_pb2.ListGroupsRequest(states=["Empty"]))
    assert list(stable_only.groups) == []


async def test_a_member_whose_session_expires_is_rebalanced_away(node: Node) -> None:
    await node.core.topics.create_topic("t", 4)
    await find(node, "g")
    a, b, c = await form_group(node, "g", 3, {"t": 4}, session_ms=600, rebalance_ms=3000)
    survivors = [a, b]
    rejoin_needed: set[str] = set()
    end = time.monotonic() + 5
    while len(rejoin_needed) < 2 and time.monotonic() < end:  # c is silent from now on
        for member in survivors:
            if await heartbeat(node, "g", member) == ErrorCode.REBALANCE_IN_PROGRESS:
                rejoin_needed.add(member.member_id)
        await asyncio.sleep(0.1)
    assert len(rejoin_needed) == 2, "the survivors were never told to rejoin"
    rejoined = await asyncio.gather(*(join(node, "g", m.member_id, session_ms=600)
                                      for m in survivors))
    assert {r.generation for r in rejoined} == {2}
    leader = next(r for r in rejoined if r.member_id == r.leader_id)
    assert sorted(m.member_id for m in leader.members) == sorted(m.member_id for m in survivors)
    assert c.member_id not in [m.member_id for m in leader.members]
    synced = await asyncio.gather(*(sync(node, "g", r, {"t": 4}) for r in rejoined))
    assert sorted(len(s.assignment) for s in synced) == [2, 2]
    assert await heartbeat(node, "g", c) == ErrorCode.UNKNOWN_MEMBER_ID


async def test_commit_and_fetch(node: Node) -> None:
    await node.core.topics.create_topic("t", 2)
    await find(node, "g")
    (member,) = await form_group(node, "g", 1, {"t": 2})
    response = await commit(node, "g", {("t", 0): 10, ("t", 1): 3, ("nope", 0): 1}, member)
    codes = {(p.topic, p.partition): p.error_code for p in response.partitions}
    assert codes == {("t", 0): 0, ("t", 1): 0,
                     ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert await fetch(node, "g") == {("t", 0): 10, ("t", 1): 3}
    assert await fetch(node, "g", [("t", 1), ("t", 5)]) == {("t", 1): 3, ("t", 5): -1}
    stale = await commit(node, "g", {("t", 0): 11}, group_pb2.JoinGroupResponse(
        member_id=member.member_id, generation=0))
    assert [p.error_code for p in stale.partitions] == [ErrorCode.ILLEGAL_GENERATION]
    simple = await commit(node, "g", {("t", 0): 12})  # generation -1 on a non-empty group
    assert [p.error_code for p in simple.partitions] == [ErrorCode.UNKNOWN_MEMBER_ID]
    assert await fetch(node, "g", [("t", 0)]) == {("t", 0): 10}
    # the commits are in the log, acknowledged below the high watermark
    part = node.core.replicas.get(OFFSETS_TOPIC, partition_for_group("g", 3))
    assert part is not None and part.high_watermark == part.log_end_offset > 0


async def test_offsets_and_generation_survive_a_coordinator_restart(
        make_node: NodeFactory) -> None:
    first = await make_node()
    await first.core.topics.create_topic("t", 2)
    await find(first, "g")
    (member,) = await form_group(first, "g", 1, {"t": 2}, session_ms=30_000)
    assert (await commit(first, "g", {("t", 0): 42}, member)).partitions[0].error_code == 0
    assert (await commit(first, "simple", {("t", 1): 7})).partitions[0].error_code == 0
    await first.stop()

    second = await make_node()
    assert await fetch(second, "g") == {("t", 0): 42}
    assert await fetch(second, "simple") == {("t", 1): 7}
    described = await describe(second, "g")
    assert described.state == "Stable" and described.generation == 1
    assert [m.member_id for m in described.members] == [member.member_id]
    assert [(tp.topic, tp.partition) for tp in described.members[0].assignment] == \
        [("t", 0), ("t", 1)]
    assert await heartbeat(second, "g", member) == 0  # no rebalance for a surviving member
    again = await commit(second, "g", {("t", 0): 43}, member)
    assert again.partitions[0].error_code == 0


async def test_not_coordinator_after_unload_and_reload_by_reconcile(node: Node) -> None:
    await find(node, "g")
    partition = partition_for_group("g", 3)
    await retrying(lambda: handlers.offset_fetch(node.groups,
                                                 group_pb2.OffsetFetchRequest(group_id="g")))
    node.groups.partitions.pop(partition).unload()
    refused = await handlers.offset_fetch(node.groups, group_pb2.OffsetFetchRequest(group_id="g"))
    assert refused.error_code == ErrorCode.NOT_COORDINATOR
    assert await fetch(node, "g") == {}  # the housekeeping loop loads it again


async def test_delete_groups(node: Node) -> None:
    await node.core.topics.create_topic("t", 1)
    await find(node, "g")
    (member,) = await form_group(node, "g", 1, {"t": 1})
    await commit(node, "g", {("t", 0): 5}, member)

    async def delete(group: str) -> int:
        response = await handlers.delete_groups(node.groups,
                                                group_pb2.DeleteGroupsRequest(group_ids=[group]))
        return response.results[0].error_code

    assert await delete("g") == ErrorCode.NON_EMPTY_GROUP
    assert await delete("unknown") == ErrorCode.GROUP_ID_NOT_FOUND
    left = await handlers.leave_group(node.groups, group_pb2.LeaveGroupRequest(
        group_id="g", members=[group_pb2.LeavingMember(member_id=member.member_id)]))
    assert left.error_code == 0 and list(left.member_error_codes) == [0]
    end = time.monotonic() + 5
    while (await describe(node, "g")).state != "Empty" and time.monotonic() < end:
        await asyncio.sleep(0.02)
    assert await delete("g") == 0
    assert await fetch(node, "g", [("t", 0)]) == {("t", 0): -1}
    assert (await describe(node, "g")).state == "Dead"


async def test_expired_offsets_stay_gone_after_a_restart(make_node: NodeFactory) -> None:
    first = await make_node()
    await first.core.topics.create_topic("t", 1)
    await find(first, "old")
    assert (await commit(first, "old", {("t", 0): 1})).partitions[0].error_code == 0
    part = first.groups.partitions[partition_for_group("old", 3)]
    retention = first.groups.settings.retention_ms
    assert await part.expire(first.groups.now_ms() + retention) == 1
    assert await fetch(first, "old") == {}
    await first.stop()
    second = await make_node()
    assert await fetch(second, "old") == {}


async def test_growing_a_subscribed_topic_rebalances_the_group(node: Node) -> None:
    await node.core.topics.create_topic("t", 2)
    await find(node, "g")
    (member,) = await form_group(node, "g", 1, {"t": 2})
    assert await heartbeat(node, "g", member) == 0
    await node.core.topics.grow("t", 4)
    end = time.monotonic() + 5
    code = 0
    while code == 0 and time.monotonic() < end:
        await asyncio.sleep(0.05)
        code = await heartbeat(node, "g", member)
    assert code == ErrorCode.REBALANCE_IN_PROGRESS


async def test_a_topic_created_just_before_the_group_formed_starts_no_second_round(
        make_node: NodeFactory) -> None:
    """The generation's partition counts are the metadata image's when it forms, not the
    housekeeping pass's (once a second): a group formed right after its topic was created was
    rebalanced again at the next pass ("partition count of a subscribed topic changed"), a
    round Kafka never starts (the extra round seen by the compat suite's range scenario)."""
    node = await make_node(group_initial_rebalance_delay_ms=0)
    await find(node, "g")  # the offsets topic exists and is reconciled: passes alone call again
    node.groups.settings = dataclasses.replace(node.groups.settings, metadata_poll_ms=1000)
    passes: list[int] = []
    reconcile_all = node.groups._reconcile_all

    def counted() -> None:
        passes.append(len(passes))
        reconcile_all()

    node.groups._reconcile_all = counted  # type: ignore[method-assign]
    await async_wait_until(lambda: passes, 5, what="a housekeeping pass")
    # the loop now sleeps 1 s: the topic and the group are made before its next pass
    await node.core.topics.create_topic("t", 2)
    (member,) = await form_group(node, "g", 1, {"t": 2})
    end = time.monotonic() + 1.5  # past the next housekeeping pass
    while time.monotonic() < end:
        assert await heartbeat(node, "g", member) == 0
        await asyncio.sleep(0.05)
    assert (await describe(node, "g")).generation == member.generation


async def test_lag_and_group_metrics(node: Node) -> None:
    await node.core.topics.create_topic("t", 1)
    await produce.handle(node.core, broker_pb2.ProduceRequest(acks=1, partitions=[
        broker_pb2.PartitionProduceData(topic="t", partition=0,
                                        records=encode_batch([(None, b"v")] * 10))]))
    await find(node, "g")
    (member,) = await form_group(node, "g", 1, {"t": 1})
    await commit(node, "g", {("t", 0): 4}, member)
    text = generate_latest(node.core.metrics.registry).decode()
    labels = 'group="g",partition="0",topic="t"'
    assert f"strom_consumer_group_lag{{{labels}}} 6.0" in text
    assert f"strom_consumer_group_committed_offset{{{labels}}} 4.0" in text
    assert 'strom_consumer_groups{state="Stable"} 1.0' in text
    assert 'strom_consumer_group_rebalances_total{group="g"} 1.0' in text
    assert 'strom_consumer_group_rebalance_duration_seconds_count{group="g"} 1.0' in text


async def test_offsets_of_a_deleted_topic_are_deleted(node: Node) -> None:
    await node.core.topics.create_topic("t", 1)
    await node.core.topics.create_topic("u", 2)
    await find(node, "g")
    assert all(p.error_code == 0 for p in
               (await commit(node, "g", {("t", 0): 1, ("u", 0): 2, ("u", 1): 3})).partitions)
    await node.core.topics.delete("u")
    end = time.monotonic() + 5
    while await fetch(node, "g") != {("t", 0): 1} and time.monotonic() < end:
        await asyncio.sleep(0.05)
    assert await fetch(node, "g") == {("t", 0): 1}


async def test_request_errors_are_answered_in_the_response(node: Node) -> None:
    no_topic_yet = await handlers.offset_fetch(node.groups,
                                               group_pb2.OffsetFetchRequest(group_id="g"))
    assert no_topic_yet.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    await find(node, "g")
    empty_id = await handlers.join_group(node.groups, group_pb2.JoinGroupRequest(
        group_id="", session_timeout_ms=6000, protocol_type="consumer", protocols=["range"]))
    assert empty_id.error_code == ErrorCode.INVALID_GROUP_ID and empty_id.error_message
    no_protocol = await handlers.join_group(node.groups, group_pb2.JoinGroupRequest(
        group_id="g", session_timeout_ms=6000, protocol_type="consumer"))
    assert no_protocol.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    too_short = group_pb2.JoinGroupRequest(group_id="g", session_timeout_ms=10,
                                           protocol_type="consumer", protocols=["range"])
    bad_session = await retrying(lambda: handlers.join_group(node.groups, too_short))
    assert bad_session.error_code == ErrorCode.INVALID_SESSION_TIMEOUT
    unknown = await handlers.sync_group(node.groups, group_pb2.SyncGroupRequest(
        group_id="g2", member_id="m", generation=1))
    assert unknown.error_code == ErrorCode.UNKNOWN_MEMBER_ID

    node.groups.partitions.pop(partition_for_group("g", 3)).unload()
    described = await handlers.describe_groups(node.groups,
                                               group_pb2.DescribeGroupsRequest(group_ids=["g"]))
    assert described.groups[0].error_code == ErrorCode.NOT_COORDINATOR
    deleted = await handlers.delete_groups(node.groups,
                                           group_pb2.DeleteGroupsRequest(group_ids=["g"]))
    assert deleted.results[0].error_code == ErrorCode.NOT_COORDINATOR
    beat = await handlers.heartbeat(node.groups, group_pb2.HeartbeatRequest(
        group_id="g", member_id="m", generation=1))
    assert beat.error_code == ErrorCode.NOT_COORDINATOR
    committed = await handlers.offset_commit(node.groups, group_pb2.OffsetCommitRequest(
        group_id="g", generation=-1,
        partitions=[group_pb2.OffsetCommitPartition(topic="t", partition=0, offset=1)]))
    assert committed.error_code == ErrorCode.NOT_COORDINATOR
