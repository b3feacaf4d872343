"""The ``strom.v1.Group`` RPCs: protobuf in, coordinator calls, protobuf out.

Group errors are answered in the response's ``error_code`` (as Kafka does), never as failed
calls: a client must tell NOT_COORDINATOR (find the coordinator again) from
REBALANCE_IN_PROGRESS (rejoin) from a broken connection. Subscriptions and assignments are
structured messages here, where Kafka carries opaque ConsumerProtocol bytes; the coordinator
relays them without interpreting anything but the topic list. The Kafka front also hands in the
bytes its members sent (``protocol_metadata``, ``MemberAssignment.data``), which the coordinator
keeps and relays unchanged, as Kafka does (Connect groups, Streams' user data).
"""

from __future__ import annotations

from collections.abc import Iterable

from strom.broker.coordinator.coordinator import GroupCoordinator
from strom.broker.metadata import ClusterMetadata
from strom.groups.membership import (
    GroupSnapshot,
    Heartbeat,
    JoinGroup,
    JoinGroupResponse,
    LeaveGroup,
    LeaveGroupResponse,
    LeavingMember,
    Subscription,
    SyncGroup,
    SyncGroupResponse,
)
from strom.groups.offsets import OffsetAndMetadata
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.v1 import common_pb2, group_pb2

TopicPartition = tuple[str, int]


def _message(code: ErrorCode) -> str:
    return {
        ErrorCode.NOT_COORDINATOR: "this broker is not the group's coordinator; call "
                                   "FindCoordinator again",
        ErrorCode.REBALANCE_IN_PROGRESS: "the group is rebalancing; rejoin",
        ErrorCode.ILLEGAL_GENERATION: "the generation is not the group's current one; rejoin",
        ErrorCode.UNKNOWN_MEMBER_ID: "the member id is not in the group; rejoin with an empty "
                                     "member id",
        ErrorCode.MEMBER_ID_REQUIRED: "rejoin with the member_id of this response",
        ErrorCode.FENCED_INSTANCE_ID: "another consumer with this group_instance_id replaced "
                                      "this one",
        ErrorCode.INVALID_SESSION_TIMEOUT: "session_timeout_ms is outside the broker's "
                                           "group.min/max.session.timeout.ms",
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL: "protocol_type/protocols share nothing with the "
                                               "group's members (or are empty)",
        ErrorCode.GROUP_MAX_SIZE_REACHED: "the group has group.max.size members already",
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: "the coordinator is loading; retry shortly",
        ErrorCode.COORDINATOR_NOT_AVAILABLE: "the coordinator is not available; retry",
    }.get(code, "" if code is ErrorCode.NONE else code.name)


def _tps(items: Iterable[common_pb2.TopicPartition]) -> tuple[TopicPartition, ...]:
    return tuple((tp.topic, tp.partition) for tp in items)


def _tp_messages(items: Iterable[TopicPartition]) -> list[common_pb2.TopicPartition]:
    return [common_pb2.TopicPartition(topic=t, partition=p) for t, p in items]


def _subscription(sub: group_pb2.Subscription) -> Subscription:
    return Subscription(tuple(sub.topics), _tps(sub.owned_partitions), bytes(sub.user_data),
                        tuple((p.name, bytes(p.metadata)) for p in sub.protocol_metadata))


def _subscription_message(sub: Subscription) -> group_pb2.Subscription:
    return group_pb2.Subscription(topics=list(sub.topics),
                                  owned_partitions=_tp_messages(sub.owned_partitions),
                                  user_data=sub.user_data,
                                  protocol_metadata=[
                                      group_pb2.ProtocolMetadata(name=name, metadata=data)
                                      for name, data in sub.protocol_metadata])


# ---- FindCoordinator ----------------------------------------------------------------------


async def find_coordinator(coordinator: GroupCoordinator, request: group_pb2.FindCoordinatorRequest
                           ) -> group_pb2.FindCoordinatorResponse:
    try:
        broker, partition = await coordinator.find_coordinator(request.group_id)
    except StromError as err:
        return group_pb2.FindCoordinatorResponse(error_code=err.code, error_message=err.message)
    return group_pb2.FindCoordinatorResponse(
        coordinator=common_pb2.BrokerEndpoint(broker_id=broker.broker_id, host=broker.host,
                                              port=broker.port, rack=broker.rack),
        offsets_partition=partition)


# ---- membership ---------------------------------------------------------------------------


async def join_group(coordinator: GroupCoordinator, request: group_pb2.JoinGroupRequest
                     ) -> group_pb2.JoinGroupResponse:
    def fail(code: ErrorCode, message: str = "") -> group_pb2.JoinGroupResponse:
        return group_pb2.JoinGroupResponse(error_code=code,
                                           error_message=message or _message(code),
                                           member_id=request.member_id, generation=-1)

    if not request.protocol_type or not request.protocols:
        return fail(ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                    "protocol_type and protocols must not be empty (e.g. 'consumer', ['range'])")
    session = request.session_timeout_ms
    event = JoinGroup(
        request_id=None,
        member_id=request.member_id,
        subscription=_subscription(request.subscription),
        protocols=tuple(request.protocols),
        group_instance_id=request.group_instance_id or None,
        client_id=request.client_id or "strom",
        session_timeout_ms=session,
        rebalance_timeout_ms=request.rebalance_timeout_ms if request.rebalance_timeout_ms > 0
        else session,
        protocol_type=request.protocol_type,
    )
    try:
        response = await coordinator.coordinator_for(request.group_id).handle(request.group_id,
                                                                              event)
    except StromError as err:
        return fail(err.code, err.message)
    assert isinstance(response, JoinGroupResponse)
    return group_pb2.JoinGroupResponse(
        error_code=response.error,
        error_message=_message(response.error),
        generation=response.generation,
        protocol_name=response.protocol_name or "",
        leader_id=response.leader_id,
        member_id=response.member_id,
        members=[group_pb2.JoinedMember(member_id=m.member_id,
                                        group_instance_id=m.group_instance_id or "",
                                        subscription=_subscription_message(m.subscription))
                 for m in response.members],
    )


async def sync_group(coordinator: GroupCoordinator, request: group_pb2.SyncGroupRequest
                     ) -> group_pb2.SyncGroupResponse:
    assignments = {a.member_id: _tps(a.partitions) for a in request.assignments}
    data = {a.member_id: bytes(a.data) for a in request.assignments if a.data}
    event = SyncGroup(None, request.member_id, request.generation,
                      request.group_instance_id or None, assignments or None, data or None)
    try:
        response = await coordinator.coordinator_for(request.group_id).handle(request.group_id,
                                                                              event)
    except StromError as err:
        return group_pb2.SyncGroupResponse(error_code=err.code, error_message=err.message)
    assert isinstance(response, SyncGroupResponse)
    return group_pb2.SyncGroupResponse(error_code=response.error,
                                       error_message=_message(response.error),
                                       assignment=_tp_messages(response.assignment),
                                       assignment_data=response.assignment_data)


async def heartbeat(coordinator: GroupCoordinator, request: group_pb2.HeartbeatRequest
                    ) -> group_pb2.HeartbeatResponse:
    event = Heartbeat(None, request.member_id, request.generation,
                      request.group_instance_id or None)
    try:
        response = await coordinator.coordinator_for(request.group_id).handle(request.group_id,
                                                                              event)
    except StromError as err:
        return group_pb2.HeartbeatResponse(error_code=err.code, error_message=err.message)
    return group_pb2.HeartbeatResponse(error_code=response.error,
                                       error_message=_message(response.error))


async def leave_group(coordinator: GroupCoordinator, request: group_pb2.LeaveGroupRequest
                      ) -> group_pb2.LeaveGroupResponse:
    leaving = tuple(LeavingMember(m.member_id, m.group_instance_id or None)
                    for m in request.members)
    try:
        response = await coordinator.coordinator_for(request.group_id).handle(
            request.group_id, LeaveGroup(None, leaving))
    except StromError as err:
        return group_pb2.LeaveGroupResponse(error_code=err.code, error_message=err.message)
    assert isinstance(response, LeaveGroupResponse)
    per_member = [int(code) for _, code in response.member_errors]
    return group_pb2.LeaveGroupResponse(error_code=response.error,
                                        error_message=_message(response.error),
                                        member_error_codes=per_member)


# ---- offsets ------------------------------------------------------------------------------


def _partition_error(metadata: ClusterMetadata, p: group_pb2.OffsetCommitPartition
                     ) -> tuple[ErrorCode, str]:
    topic = metadata.topic(p.topic)
    if topic is None or not 0 <= p.partition < topic.partitions:
        return (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"{p.topic}-{p.partition} does not exist; commit offsets of existing partitions")
    if p.offset < 0:
        return (ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
                f"offset {p.offset} for {p.topic}-{p.partition} is negative; commit an offset "
                f">= 0 (the next offset to consume)")
    return ErrorCode.NONE, ""


async def offset_commit(coordinator: GroupCoordinator, request: group_pb2.OffsetCommitRequest
                        ) -> group_pb2.OffsetCommitResponse:
    metadata, now_ms = coordinator.metadata, coordinator.now_ms()
    errors: dict[TopicPartition, tuple[ErrorCode, str]] = {}
    offsets: dict[TopicPartition, OffsetAndMetadata] = {}
    for p in request.partitions:
        tp = (p.topic, p.partition)
        code, message = _partition_error(metadata, p)
        if code is not ErrorCode.NONE:
            errors[tp] = (code, message)
        else:
            offsets[tp] = OffsetAndMetadata(p.offset, now_ms, p.leader_epoch, p.metadata)
    try:
        part = coordinator.coordinator_for(request.group_id)
        code = await part.commit(request.group_id, request.member_id, request.generation,
                                 request.group_instance_id or None, offsets)
    except StromError as err:
        return group_pb2.OffsetCommitResponse(error_code=err.code, error_message=err.message)
    for tp in offsets:
        errors[tp] = (code, _message(code))
    return group_pb2.OffsetCommitResponse(partitions=[
        group_pb2.PartitionError(topic=p.topic, partition=p.partition,
                                 error_code=errors[(p.topic, p.partition)][0],
                                 error_message=errors[(p.topic, p.partition)][1])
        for p in request.partitions])


async def offset_fetch(coordinator: GroupCoordinator, request: group_pb2.OffsetFetchRequest
                       ) -> group_pb2.OffsetFetchResponse:
    wanted = _tps(request.partitions) or None
    try:
        found = coordinator.coordinator_for(request.group_id).fetch(request.group_id, wanted)
    except StromError as err:
        return group_pb2.OffsetFetchResponse(error_code=err.code, error_message=err.message)
    out = []
    for (topic, partition), value in sorted(found.items()):
        if value is None:
            out.append(group_pb2.CommittedOffset(topic=topic, partition=partition, offset=-1,
                                                 leader_epoch=-1))
        else:
            out.append(group_pb2.CommittedOffset(topic=topic, partition=partition,
                                                 offset=value.offset,
                                                 leader_epoch=value.leader_epoch,
                                                 metadata=value.metadata))
    return group_pb2.OffsetFetchResponse(offsets=out)


# ---- admin --------------------------------------------------------------------------------


async def list_groups(coordinator: GroupCoordinator, request: group_pb2.ListGroupsRequest
                      ) -> group_pb2.ListGroupsResponse:
    wanted = {s.lower() for s in request.states}
    groups = []
    error = ErrorCode.NONE
    for part in list(coordinator.partitions.values()):
        try:
            listings = part.listings()
        except StromError as err:
            error = err.code  # Kafka: COORDINATOR_LOAD_IN_PROGRESS while any partition loads
            continue
        for g in listings:
            if not wanted or g.state.value.lower() in wanted:
                groups.append(group_pb2.GroupListing(group_id=g.group_id, state=g.state.value,
                                                     protocol_type=g.protocol_type,
                                                     coordinator=coordinator.broker_id))
    groups.sort(key=lambda g: g.group_id)
    return group_pb2.ListGroupsResponse(error_code=error, error_message=_message(error),
                                        groups=groups)


def _description(snapshot: GroupSnapshot, broker_id: int) -> group_pb2.GroupDescription:
    return group_pb2.GroupDescription(
        group_id=snapshot.group_id,
        state=snapshot.state.value,
        protocol_type=snapshot.protocol_type or "",
        protocol=snapshot.protocol_name or "",
        generation=snapshot.generation,
        leader_id=snapshot.leader_id or "",
        members=[group_pb2.GroupMemberDescription(
            member_id=m.member_id, group_instance_id=m.group_instance_id or "",
            client_id=m.client_id, subscribed_topics=list(m.subscription.topics),
            assignment=_tp_messages(m.assignment),
            metadata=m.subscription.metadata_for(snapshot.protocol_name) or b"",
            assignment_data=m.assignment_data) for m in snapshot.members],
        coordinator=broker_id)


async def describe_groups(coordinator: GroupCoordinator,
                          request: group_pb2.DescribeGroupsRequest
                          ) -> group_pb2.DescribeGroupsResponse:
    out = []
    for group_id in request.group_ids:
        try:
            snapshot = coordinator.coordinator_for(group_id).describe(group_id)
        except StromError as err:
            out.append(group_pb2.GroupDescription(group_id=group_id, error_code=err.code,
                                                  error_message=err.message))
            continue
        out.append(_description(snapshot, coordinator.broker_id))
    return group_pb2.DescribeGroupsResponse(groups=out)


async def delete_groups(coordinator: GroupCoordinator, request: group_pb2.DeleteGroupsRequest
                        ) -> group_pb2.DeleteGroupsResponse:
    out = []
    for group_id in request.group_ids:
        try:
            code = await coordinator.coordinator_for(group_id).delete(group_id)
            message = {
                ErrorCode.NON_EMPTY_GROUP: f"group {group_id!r} still has members; stop its "
                                           f"consumers first",
                ErrorCode.GROUP_ID_NOT_FOUND: f"group {group_id!r} does not exist",
            }.get(code, _message(code))
        except StromError as err:
            code, message = err.code, err.message
        out.append(group_pb2.GroupResult(group_id=group_id, error_code=code,
                                         error_message=message))
    return group_pb2.DeleteGroupsResponse(results=out)


async def offset_delete(coordinator: GroupCoordinator, request: group_pb2.OffsetDeleteRequest
                        ) -> group_pb2.OffsetDeleteResponse:
    metadata = coordinator.metadata
    unknown: dict[TopicPartition, tuple[ErrorCode, str]] = {}
    wanted = []
    for tp in _tps(request.partitions):
        topic = metadata.topic(tp[0])
        if topic is None or not 0 <= tp[1] < topic.partitions:
            unknown[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{tp[0]}-{tp[1]} does not exist")
        else:
            wanted.append(tp)
    try:
        code, errors = await coordinator.coordinator_for(request.group_id).delete_offsets(
            request.group_id, wanted)
    except StromError as err:
        return group_pb2.OffsetDeleteResponse(error_code=err.code, error_message=err.message)
    if code is not ErrorCode.NONE:
        message = {
            ErrorCode.GROUP_ID_NOT_FOUND: f"group {request.group_id!r} does not exist",
            ErrorCode.NON_EMPTY_GROUP: f"group {request.group_id!r} has members and is not a "
                                       f"consumer group; stop its members first",
        }.get(code, _message(code))
        return group_pb2.OffsetDeleteResponse(error_code=code, error_message=message)
    out = []
    for tp in _tps(request.partitions):
        error, message = unknown.get(tp) or (errors.get(tp, ErrorCode.NONE), "")
        if error is ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC:
            message = (f"a member of group {request.group_id!r} subscribes to {tp[0]}; stop "
                       f"or unsubscribe it first")
        out.append(group_pb2.PartitionError(topic=tp[0], partition=tp[1], error_code=error,
                                            error_message=message or _message(error)))
    return group_pb2.OffsetDeleteResponse(partitions=out)
