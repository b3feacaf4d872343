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

import functools
import struct
import uuid
from collections.abc import Sequence
from typing import Any

from strom.broker import metadata_rpc
from strom.broker.kafka.context import NO_THROTTLE, Context, code, topic_uuid
from strom.broker.kafka.frames import (
    StructTemplate,
    TemplateCache,
    encode_entity,
    encode_response,
)
from strom.protocol.errors import ErrorCode
from strom.protocol.v1 import broker_pb2
from strom.protocol.wire import varint

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
    controller = client_controller_id(answer.controller_id,
                                      [b.broker_id for b in answer.brokers],
                                      core.config.broker_id)
    spliced = _encoded(ctx, answer, unknown_ids, controller)
    if spliced is not None:
        return spliced
    return _response(ctx, answer, unknown_ids, controller, _topics(ctx, answer, unknown_ids))


def _response(ctx: Context, answer: broker_pb2.MetadataResponse, unknown_ids: list[uuid.UUID],
              controller: int, topics: Sequence[Any]) -> Any:
    """The response to ``answer`` (the gRPC front's) with ``topics`` (its topics' structs,
    or none)."""
    brokers = tuple(ctx.build("MetadataResponseBroker", node_id=b.broker_id, host=b.host,
                              port=b.port, rack=b.rack or None) for b in answer.brokers)
    return ctx.build("MetadataResponse", throttle_time=NO_THROTTLE, brokers=brokers,
                     cluster_id=answer.cluster_id or None, controller_id=controller,
                     topics=tuple(topics), error_code=code(0))


def _topics(ctx: Context, answer: broker_pb2.MetadataResponse, unknown_ids: list[uuid.UUID]
            ) -> list[Any]:
    """The topics' structs: ``answer``'s, then one UNKNOWN_TOPIC_ID per id not found."""
    return [_topic(ctx, t) for t in answer.topics] + [_unknown(ctx, i) for i in unknown_ids]


def _topic(ctx: Context, t: broker_pb2.TopicMetadata) -> Any:
    return ctx.build("MetadataResponseTopic", error_code=code(t.error_code), name=t.name,
                     topic_id=topic_uuid(t.topic_id) if t.topic_id else _ZERO,
                     is_internal=t.internal, partitions=_partitions(ctx, t))


def _unknown(ctx: Context, topic_id: uuid.UUID) -> Any:
    return ctx.build("MetadataResponseTopic", error_code=code(int(ErrorCode.UNKNOWN_TOPIC_ID)),
                     name=None, topic_id=topic_id, is_internal=False, partitions=())


_COUNT = struct.Struct(">i")
#: A topic no answer holds (its name cannot be a topic's): encoded where the topics go, then
#: found in the frame and replaced by them, whatever fields follow the array in a version
#: (cluster_authorized_operations in 8-10, error_code in 13).
_MARK = "\x00strom-metadata-topics\x00"


def _encoded(ctx: Context, answer: broker_pb2.MetadataResponse, unknown_ids: list[uuid.UUID],
             controller: int) -> bytes | None:
    """The response frame as kio encodes it, spliced: kio's encoding of the response with one
    marker topic, the marker replaced by the topics array; each error-free topic's kio
    encoding is kept per metadata image (beside :func:`_partitions`' structs), the others are
    encoded now. None if the marker is not found once (the caller encodes the whole).

    Why: librdkafka asks for a topic's metadata two or three times while a keyed produce
    starts, and kio's writing of a 1,000-partition topic cost ~7.8 ms of the broker's CPU
    an answer (issue 21 item 1); the structs were already kept per image, their bytes were
    not. Byte for byte kio's encoding of the whole response (tested for every version)."""
    mark = ctx.build("MetadataResponseTopic", error_code=code(0), name=_MARK, topic_id=_ZERO,
                     is_internal=False, partitions=())
    head = _response(ctx, answer, unknown_ids, controller, (mark,))
    flexible = bool(type(head).__flexible__)
    marked = (varint(2) if flexible else _COUNT.pack(1)) + encode_entity(mark)
    framed = encode_response(ctx.request.correlation_id, head)
    at = framed.find(marked)
    if at < 0 or framed.find(marked, at + 1) >= 0:  # pragma: no cover - a defensive fallback
        return None
    out = bytearray(framed[:at])
    count = len(answer.topics) + len(unknown_ids)
    out += varint(count + 1) if flexible else _COUNT.pack(count)
    answers = ctx.core.metadata.answers()
    for t in answer.topics:
        if t.error_code or not t.partitions:
            out += encode_entity(_topic(ctx, t))
            continue
        key = ("kafka-metadata-topic", ctx.listener, ctx.version, t.name, len(t.partitions))
        encoded = answers.get(key)
        if not isinstance(encoded, bytes):
            encoded = answers[key] = _topic_encoded(ctx, t)
        out += encoded
    for topic_id in unknown_ids:
        out += encode_entity(_unknown(ctx, topic_id))
    out += memoryview(framed)[at + len(marked):]
    _COUNT.pack_into(out, 0, len(out) - 4)
    return bytes(out)


#: A partition no answer holds (its integers are chosen to be found once in the encoding).
_MARK_PARTITION = (0x3A5C7E11, 0x3A5C7E12, 0x3A5C7E13, 0x3A5C7E14)
#: Partition templates by (version, replicas, in-sync replicas, offline replicas): the
#: integers written into them are the error code, index, leader, leader epoch and node ids.
_PARTITIONS: TemplateCache[StructTemplate] = TemplateCache()


def _topic_encoded(ctx: Context, t: broker_pb2.TopicMetadata) -> bytes:
    """kio's encoding of topic ``t`` (error-free, with partitions): kio writes the topic with
    one marker partition, the marker is replaced by the partitions array, each partition from
    a template of its shape (:class:`StructTemplate`); kio's writing of the whole topic when
    that cannot be done.

    Why: kio's writing of 1,000 partitions cost ~6-7 ms of the broker's CPU in the first
    answer after a topic's creation (or any change of it), which librdkafka waits for before
    it sends a record (issue 21 item 1); the templates cost a copy and a few integers a
    partition. Byte for byte kio's encoding (tested for every version)."""
    index, leader, epoch, node = _MARK_PARTITION
    mark = ctx.build("MetadataResponsePartition", error_code=code(0), partition_index=index,
                     leader_id=leader, leader_epoch=epoch, replica_nodes=(node,),
                     isr_nodes=(node,), offline_replicas=(node,))
    head = ctx.build("MetadataResponseTopic", error_code=code(0), name=t.name,
                     topic_id=topic_uuid(t.topic_id) if t.topic_id else _ZERO,
                     is_internal=t.internal, partitions=(mark,))
    flexible = bool(type(head).__flexible__)
    marked = (varint(2) if flexible else _COUNT.pack(1)) + encode_entity(mark)
    whole = encode_entity(head)
    at = whole.find(marked)
    if at < 0 or whole.find(marked, at + 1) >= 0:  # pragma: no cover - a defensive fallback
        return encode_entity(_topic(ctx, t))
    out = bytearray(whole[:at])
    n = len(t.partitions)
    out += varint(n + 1) if flexible else _COUNT.pack(n)
    version = ctx.version
    for p in t.partitions:
        replicas, isr, offline = p.replicas, p.isr, p.offline_replicas
        shape = (version, len(replicas), len(isr), len(offline))
        try:
            template = _PARTITIONS[shape]
        except KeyError:
            template = _PARTITIONS.make(shape, functools.partial(_partition_template, ctx, shape))
        if template is None:  # pragma: no cover - kio's partition is always of that shape
            return encode_entity(_topic(ctx, t))
        template.write(out, (p.error_code, p.partition, p.leader, p.leader_epoch, *replicas,
                             *isr, *offline))
    out += memoryview(whole)[at + len(marked):]
    return bytes(out)


def _partition_template(ctx: Context, shape: tuple[int, int, int, int]) -> StructTemplate:
    """The template of a partition struct with ``shape``'s node counts."""
    _, replicas, isr, offline = shape

    def make(values: list[int]) -> Any:
        nodes = values[4:]
        return ctx.build("MetadataResponsePartition", error_code=code(values[0]),
                         partition_index=values[1], leader_id=values[2],
                         leader_epoch=values[3], replica_nodes=tuple(nodes[:replicas]),
                         isr_nodes=tuple(nodes[replicas:replicas + isr]),
                         offline_replicas=tuple(nodes[replicas + isr:]))

    return StructTemplate(make, [2, 4, 4, 4] + [4] * (replicas + isr + offline))


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
