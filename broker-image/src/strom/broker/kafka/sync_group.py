"""SyncGroup (key 14), versions 0-5: the leader's assignment reaches every member, through the
coordinator's SyncGroup handler the gRPC front uses.

The leader's assignment bytes are relayed to each member unchanged, as Kafka does (a Connect
assignment, Kafka Streams' task user data). For consumer groups they are also read as
ConsumerProtocolAssignment (topic partitions) so that gRPC members of the group get theirs;
bytes that do not read as one (or a v5 request naming another protocol type) give gRPC members
no partitions, and are still relayed. A member assigned by a gRPC leader gets its partitions
encoded as ConsumerProtocolAssignment v0. v5's protocol type/name are echoed from the request.

Not supported: checking v5's protocol type/name against the group's (Kafka answers
INCONSISTENT_GROUP_PROTOCOL on a mismatch; here JoinGroup already refused a member whose
protocols do not match the group's).
"""

from __future__ import annotations

from typing import Any

from strom.broker.coordinator import handlers as groups
from strom.broker.kafka.consumer_protocol import (
    ConsumerProtocolError,
    TopicPartition,
    decode_assignment,
    encode_assignment,
)
from strom.broker.kafka.context import NO_THROTTLE, Context, code
from strom.protocol.errors import ErrorCode
from strom.protocol.v1 import common_pb2, group_pb2

KEY = 14
VERSIONS = (0, 5)
CONSUMER = "consumer"


def _partitions(data: bytes, protocol_type: str | None) -> tuple[TopicPartition, ...]:
    if protocol_type not in (None, CONSUMER):
        return ()
    try:
        return decode_assignment(data)
    except ConsumerProtocolError:
        return ()


async def handle(ctx: Context) -> Any:
    body = ctx.body
    protocol_type = getattr(body, "protocol_type", None)
    request = group_pb2.SyncGroupRequest(
        group_id=body.group_id, member_id=body.member_id, generation=body.generation_id,
        group_instance_id=getattr(body, "group_instance_id", None) or "")
    for a in body.assignments:
        data = bytes(a.assignment)
        request.assignments.add(member_id=a.member_id, data=data, partitions=[
            common_pb2.TopicPartition(topic=t, partition=p)
            for t, p in _partitions(data, protocol_type)])
    answer = await groups.sync_group(ctx.core.groups, request)
    if answer.error_code != ErrorCode.NONE:
        return _response(ctx, ErrorCode(answer.error_code), b"")
    assignment = bytes(answer.assignment_data) or encode_assignment(
        (tp.topic, tp.partition) for tp in answer.assignment)
    return _response(ctx, ErrorCode.NONE, assignment)


def _response(ctx: Context, error: ErrorCode, assignment: bytes) -> Any:
    body = ctx.body
    return ctx.build("SyncGroupResponse", throttle_time=NO_THROTTLE, error_code=code(int(error)),
                     protocol_type=getattr(body, "protocol_type", None),
                     protocol_name=getattr(body, "protocol_name", None), assignment=assignment)
