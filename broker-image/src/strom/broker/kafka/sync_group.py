"""SyncGroup (key 14), versions 0-5: the leader's assignment reaches every member, through the
coordinator's SyncGroup handler the gRPC front uses.

Supports the leader's ConsumerProtocolAssignment bytes (decoded to partitions for the
coordinator, so gRPC members get theirs) and each member's assignment back as bytes; v5's
protocol type/name are echoed from the request (the coordinator checks the group's own).

Not supported: the assignment's user data (dropped: Kafka Streams' task data does not survive),
protocol types other than ``consumer``.
"""

from __future__ import annotations

from typing import Any

from strom.broker.coordinator import handlers as groups
from strom.broker.kafka.consumer_protocol import (
    ConsumerProtocolError,
    decode_assignment,
    encode_assignment,
)
from strom.broker.kafka.context import NO_THROTTLE, Context, code
from strom.protocol.errors import ErrorCode
from strom.protocol.v1 import common_pb2, group_pb2

KEY = 14
VERSIONS = (0, 5)


async def handle(ctx: Context) -> Any:
    body = ctx.body
    request = group_pb2.SyncGroupRequest(
        group_id=body.group_id, member_id=body.member_id, generation=body.generation_id,
        group_instance_id=getattr(body, "group_instance_id", None) or "")
    try:
        for a in body.assignments:
            request.assignments.add(member_id=a.member_id, partitions=[
                common_pb2.TopicPartition(topic=t, partition=p)
                for t, p in decode_assignment(bytes(a.assignment))])
    except ConsumerProtocolError:
        return _response(ctx, ErrorCode.INCONSISTENT_GROUP_PROTOCOL, b"")
    answer = await groups.sync_group(ctx.core.groups, request)
    assignment = encode_assignment((tp.topic, tp.partition) for tp in answer.assignment)
    return _response(ctx, ErrorCode(answer.error_code), assignment)


def _response(ctx: Context, error: ErrorCode, assignment: bytes) -> Any:
    body = ctx.body
    return ctx.build("SyncGroupResponse", throttle_time=NO_THROTTLE, error_code=code(int(error)),
                     protocol_type=getattr(body, "protocol_type", None),
                     protocol_name=getattr(body, "protocol_name", None), assignment=assignment)
