"""JoinGroup (key 11), versions 0-9: join a classic consumer group, through the coordinator's
JoinGroup handler the gRPC front uses (:func:`strom.broker.coordinator.handlers.join_group`).

Supports the classic protocol with protocol type ``consumer``: the member's subscription is read
from the first protocol's ConsumerProtocolSubscription bytes (topics, owned partitions, user
data; ``consumer_protocol``), the leader gets every member's subscription back as bytes, so
Kafka-protocol and gRPC members share one group. KIP-394 (v4+: a new member first gets
MEMBER_ID_REQUIRED with its id); v0-3 clients, which do not know that error, are joined with the
generated id in the same request, as Kafka does. Static membership (``group_instance_id``),
rebalance timeouts (v1+; v0 uses the session timeout).

Not supported: other protocol types (Kafka Connect's ``connect``: INCONSISTENT_GROUP_PROTOCOL
with the reason), per-protocol metadata (members' metadata is the first protocol's, used for
whichever protocol the group selects), ``skip_assignment`` (KIP-814: always false).
"""

from __future__ import annotations

from typing import Any

from strom.broker.coordinator import handlers as groups
from strom.broker.kafka.consumer_protocol import (
    ConsumerProtocolError,
    decode_subscription,
    encode_subscription,
)
from strom.broker.kafka.context import NO_THROTTLE, Context, code, ms
from strom.groups.membership import Subscription
from strom.protocol.errors import ErrorCode
from strom.protocol.v1 import common_pb2, group_pb2

KEY = 11
VERSIONS = (0, 9)
CONSUMER = "consumer"


async def handle(ctx: Context) -> Any:
    body = ctx.body
    if body.protocol_type != CONSUMER or not body.protocols:
        return _fail(ctx, ErrorCode.INCONSISTENT_GROUP_PROTOCOL, body.member_id)
    try:
        sub = decode_subscription(bytes(body.protocols[0].metadata))
    except ConsumerProtocolError:
        return _fail(ctx, ErrorCode.INCONSISTENT_GROUP_PROTOCOL, body.member_id)
    rebalance = getattr(body, "rebalance_timeout", None)
    request = group_pb2.JoinGroupRequest(
        group_id=body.group_id, member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None) or "",
        client_id=ctx.request.client_id, protocol_type=body.protocol_type,
        protocols=[p.name for p in body.protocols],
        session_timeout_ms=ms(body.session_timeout),
        rebalance_timeout_ms=ms(rebalance) if rebalance is not None else 0,
        subscription=group_pb2.Subscription(
            topics=list(sub.topics), user_data=sub.user_data,
            owned_partitions=[common_pb2.TopicPartition(topic=t, partition=p)
                              for t, p in sub.owned_partitions]))
    coordinator = ctx.core.groups
    answer = await groups.join_group(coordinator, request)
    if (answer.error_code == ErrorCode.MEMBER_ID_REQUIRED and ctx.version < 4
            and not body.member_id):
        request.member_id = answer.member_id  # KIP-394 is v4+: join old clients at once
        answer = await groups.join_group(coordinator, request)
    members = tuple(
        ctx.build("JoinGroupResponseMember", member_id=m.member_id,
                  group_instance_id=m.group_instance_id or None,
                  metadata=encode_subscription(_subscription(m.subscription)))
        for m in answer.members)
    return ctx.build("JoinGroupResponse", throttle_time=NO_THROTTLE,
                     error_code=code(answer.error_code), generation_id=answer.generation,
                     protocol_type=CONSUMER, protocol_name=answer.protocol_name or None,
                     leader=answer.leader_id, skip_assignment=False,
                     member_id=answer.member_id, members=members)


def _subscription(sub: group_pb2.Subscription) -> Subscription:
    return Subscription(tuple(sub.topics),
                        tuple((tp.topic, tp.partition) for tp in sub.owned_partitions),
                        bytes(sub.user_data))


def _fail(ctx: Context, error: ErrorCode, member_id: str) -> Any:
    return ctx.build("JoinGroupResponse", throttle_time=NO_THROTTLE, error_code=code(int(error)),
                     generation_id=-1, protocol_type=None, protocol_name=None, leader="",
                     skip_assignment=False, member_id=member_id, members=())
