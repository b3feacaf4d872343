"""DescribeGroups (key 15), versions 0-6: state, protocol and members of groups, through the
coordinator's DescribeGroups handler the gRPC front uses (what Kafka UIs and exporters show).

Supports each member's id, static instance id (v4+), client id, metadata and assignment: the
bytes a Kafka-protocol member sent for the group's protocol and its leader's assignment bytes,
unchanged (as Kafka; any protocol type), or for Strom (gRPC) members their topics and partitions
encoded as ConsumerProtocolSubscription / ConsumerProtocolAssignment; a group this broker does
not coordinate answers NOT_COORDINATOR; an unknown group is ``Dead`` with no members, and from
v6 on (KIP-1043) also GROUP_ID_NOT_FOUND with "Group <id> not found.", as Kafka 4.x answers (the
coordinator describes a group it has neither members nor offsets of as Dead, as Kafka's does for
the older versions); other errors carry the coordinator's message in v6's ``error_message``.

Not supported: ``client_host`` (empty: the coordinator does not record peers), authorized
operations (v3+: "not requested").
"""

from __future__ import annotations

from typing import Any

from strom.broker.coordinator import handlers as groups
from strom.broker.kafka.consumer_protocol import encode_assignment, encode_subscription
from strom.broker.kafka.context import NO_THROTTLE, Context, code
from strom.groups.membership import Subscription
from strom.protocol.errors import ErrorCode
from strom.protocol.v1 import group_pb2

KEY = 15
VERSIONS = (0, 6)
NOT_FOUND_FROM = 6
"""KIP-1043: from this version an unknown group is an error, not only ``Dead``."""


async def handle(ctx: Context) -> Any:
    answer = await groups.describe_groups(ctx.core.groups, group_pb2.DescribeGroupsRequest(
        group_ids=list(ctx.body.groups)))
    described = []
    for g in answer.groups:
        members = tuple(
            ctx.build("DescribedGroupMember", member_id=m.member_id,
                      group_instance_id=m.group_instance_id or None, client_id=m.client_id,
                      client_host="",
                      member_metadata=bytes(m.metadata) or encode_subscription(
                          Subscription(tuple(m.subscribed_topics))),
                      member_assignment=bytes(m.assignment_data) or encode_assignment(
                          (tp.topic, tp.partition) for tp in m.assignment))
            for m in g.members)
        state = g.state or ("Dead" if not g.error_code else "")
        error, message = g.error_code, g.error_message or None
        if ctx.version >= NOT_FOUND_FROM and not error and state == "Dead":
            error, message = ErrorCode.GROUP_ID_NOT_FOUND, f"Group {g.group_id} not found."
        described.append(ctx.build(
            "DescribedGroup", error_code=code(error), error_message=message,
            group_id=g.group_id, group_state=state, protocol_type=g.protocol_type,
            protocol_data=g.protocol, members=members))
    return ctx.build("DescribeGroupsResponse", throttle_time=NO_THROTTLE,
                     groups=tuple(described))
