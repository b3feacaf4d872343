"""JoinGroup (key 11), versions 0-9: join a classic group, through the coordinator's JoinGroup
handler the gRPC front uses (:func:`strom.broker.coordinator.handlers.join_group`).

Any protocol type, as Kafka: each protocol's metadata is handed to the coordinator exactly as
the member sent it and the leader gets, for the protocol the group selected, every member's bytes
unchanged (Kafka Connect's ``connect`` groups, Kafka Streams' subscription user data, custom
assignors). For protocol type ``consumer`` the subscription is also read
(ConsumerProtocolSubscription, ``consumer_protocol``: topics, owned partitions, user data) so
Kafka-protocol and gRPC members share one group: a gRPC member's subscription reaches a Kafka
leader encoded as ConsumerProtocolSubscription v1. Metadata that does not read as one is still
accepted (Kafka does not parse it either); such a member subscribes to no topic as far as gRPC
members and the coordinator's metadata-change rebalances see. KIP-394 (v4+: a new member first
gets MEMBER_ID_REQUIRED with its id); v0-3 clients, which do not know that error, are joined with
the generated id in the same request, as Kafka does. Static membership (``group_instance_id``),
rebalance timeouts (v1+; v0 uses the session timeout).

Not supported: ``skip_assignment`` (KIP-814: always false), the ``reason`` (v8+) is not recorded.
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


def _consumer_subscription(protocols: Any) -> Subscription:
    """The first protocol's metadata that reads as a ConsumerProtocolSubscription."""
    for p in protocols:
        try:
            return decode_subscription(bytes(p.metadata))
        except ConsumerProtocolError:
            continue
    return Subscription(())


async def handle(ctx: Context) -> Any:
    body = ctx.body
    if not body.protocol_type or not body.protocols:
        return _fail(ctx, ErrorCode.INCONSISTENT_GROUP_PROTOCOL, body.member_id)
    sub = (_consumer_subscription(body.protocols) if body.protocol_type == CONSUMER
           else Subscription(()))
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
                              for t, p in sub.owned_partitions],
            protocol_metadata=[group_pb2.ProtocolMetadata(name=p.name, metadata=bytes(p.metadata))
                               for p in body.protocols]))
    coordinator = ctx.core.groups
    answer = await groups.join_group(coordinator, request)
    if (answer.error_code == ErrorCode.MEMBER_ID_REQUIRED and ctx.version < 4
            and not body.member_id):
        request.member_id = answer.member_id  # KIP-394 is v4+: join old clients at once
        answer = await groups.join_group(coordinator, request)
    members = tuple(
        ctx.build("JoinGroupResponseMember", member_id=m.member_id,
                  group_instance_id=m.group_instance_id or None,
                  metadata=member_metadata(m.subscription, answer.protocol_name))
        for m in answer.members)
    ok = answer.error_code == ErrorCode.NONE
    return ctx.build("JoinGroupResponse", throttle_time=NO_THROTTLE,
                     error_code=code(answer.error_code), generation_id=answer.generation,
                     protocol_type=body.protocol_type if ok else None,
                     protocol_name=answer.protocol_name or None,
                     leader=answer.leader_id, skip_assignment=False,
                     member_id=answer.member_id, members=members)


def member_metadata(sub: group_pb2.Subscription, protocol: str) -> bytes:
    """The bytes the member sent for ``protocol``; a Strom member's subscription encoded."""
    for p in sub.protocol_metadata:
        if p.name == protocol:
            return bytes(p.metadata)
    return encode_subscription(Subscription(
        tuple(sub.topics), tuple((tp.topic, tp.partition) for tp in sub.owned_partitions),
        bytes(sub.user_data)))


def _fail(ctx: Context, error: ErrorCode, member_id: str) -> Any:
    return ctx.build("JoinGroupResponse", throttle_time=NO_THROTTLE, error_code=code(int(error)),
                     generation_id=-1, protocol_type=None, protocol_name=None, leader="",
                     skip_assignment=False, member_id=member_id, members=())
