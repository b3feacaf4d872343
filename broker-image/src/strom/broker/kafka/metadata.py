"""Metadata (key 3), versions 0-13: brokers on this listener, topics, partition leadership.

A thin mapping onto :func:`strom.broker.metadata_rpc.handle` (the gRPC front's handler): the
same topics, errors, auto-creation (only when the request allows it and
``auto.create.topics.enable`` is on) and leadership, with every broker's endpoint of *this*
Kafka listener (its ``advertised.listeners``), so clients route to leaders on the Kafka
protocol. Brokers without that listener are left out, as Kafka does. Topics requested by id
(v10+) are looked up by id; an unknown id answers UNKNOWN_TOPIC_ID.

Not supported: authorized operations (no ACLs: -2147483648, "not requested", is returned).
"""

from __future__ import annotations

import uuid
from typing import Any

from strom.broker import metadata_rpc
from strom.broker.kafka.context import NO_THROTTLE, Context, code, topic_uuid
from strom.protocol.errors import ErrorCode
from strom.protocol.v1 import broker_pb2

KEY = 3
VERSIONS = (0, 13)
_ZERO = uuid.UUID(int=0)


async def handle(ctx: Context) -> Any:
    body = ctx.body
    core = ctx.core
    names: list[str] = []
    unknown_ids: list[uuid.UUID] = []
    if body.topics:
        by_id = {topic_uuid(t.topic_id): name for name, t in core.metadata.topics().items()}
        for t in body.topics:
            if t.name:
                names.append(t.name)
            elif getattr(t, "topic_id", None) not in (None, _ZERO):
                name = by_id.get(t.topic_id)
                if name is None:
                    unknown_ids.append(t.topic_id)
                else:
                    names.append(name)
    no_topics = body.topics is not None and not names and ctx.version >= 1
    auto_create = bool(getattr(body, "allow_auto_topic_creation", True))
    answer = await metadata_rpc.handle(
        core, broker_pb2.MetadataRequest(topics=names, include_internal=True),
        listener=ctx.listener, auto_create=auto_create, no_topics=no_topics)
    brokers = tuple(ctx.build("MetadataResponseBroker", node_id=b.broker_id, host=b.host,
                              port=b.port, rack=b.rack or None) for b in answer.brokers)
    topics = [
        ctx.build("MetadataResponseTopic", error_code=code(t.error_code), name=t.name,
                  topic_id=topic_uuid(t.topic_id) if t.topic_id else _ZERO,
                  is_internal=t.internal, partitions=_partitions(ctx, t))
        for t in answer.topics
    ]
    topics += [ctx.build("MetadataResponseTopic",
                         error_code=code(int(ErrorCode.UNKNOWN_TOPIC_ID)), name=None,
                         topic_id=topic_id, is_internal=False, partitions=())
               for topic_id in unknown_ids]
    controller = client_controller_id(answer.controller_id,
                                      [b.broker_id for b in answer.brokers],
                                      core.config.broker_id)
    return ctx.build("MetadataResponse", throttle_time=NO_THROTTLE, brokers=brokers,
                     cluster_id=answer.cluster_id or None, controller_id=controller,
                     topics=tuple(topics), error_code=code(0))


def _partitions(ctx: Context, t: broker_pb2.TopicMetadata) -> tuple[Any, ...]:
    """A topic's partitions in this request version's types, built once per metadata image
    offset and version (10,000 partitions took ~50 ms to build; clients ask again and again
    while nothing changes, issue 21). The gRPC answer they come from is cached the same way."""
    if not t.partitions:
        return ()
    answers = ctx.core.metadata.answers()
    key = ("kafka-metadata", ctx.version, t.name, len(t.partitions))
    built = answers.get(key)
    if not isinstance(built, tuple):
        built = answers[key] = tuple(
            ctx.build("MetadataResponsePartition", error_code=code(p.error_code),
                      partition_index=p.partition, leader_id=p.leader,
                      leader_epoch=p.leader_epoch, replica_nodes=tuple(p.replicas),
                      isr_nodes=tuple(p.isr), offline_replicas=tuple(p.offline_replicas))
            for p in t.partitions)
    return built


def client_controller_id(active: int, listed: list[int], this_broker: int) -> int:
    """The ``controller_id`` a Kafka client is told: a broker of the answer's list, since
    admin clients (librdkafka, the Java AdminClient) send CreateTopics and the like to it and
    wait for it to appear in the list ("Failed while waiting for controller"). The active
    controller when it is a listed broker; else this broker, which hands admin requests to the
    quorum; else any listed broker (-1 when none is). Kafka's KRaft brokers answer with a
    live broker too: the quorum itself is not reachable through Metadata. Strom's active
    controller can be unlisted while it is a fenced broker or a dedicated controller process."""
    if active in listed:
        return active
    if this_broker in listed:
        return this_broker
    return min(listed) if listed else -1
