"""OffsetFetch (key 9), versions 1-10: committed positions of a group, through the coordinator's
OffsetFetch handler the gRPC front uses (what lag exporters and KEDA's scaler read).

Supports named partitions (a partition without a commit answers offset -1, as Kafka does) and
all of a group's commits (topics null, v2+), several groups per request (v8+), committed leader
epochs (v5+), group-level errors (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS) in the
version's error field. ``require_stable`` (v7+) changes nothing: without transactions every
commit is stable. Topics named by id (v10): an id no topic has (or the zero id) answers its
partitions with offset -1 and UNKNOWN_TOPIC_ID, and all of a group's commits are named by their
topics' ids, leaving out commits of topics that no longer exist (as Kafka 4.3.1 answers; a
request naming only unknown ids is answered without asking the coordinator, so without its
group-level error).

Not supported: member epochs (KIP-848).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from strom.broker.coordinator import handlers as groups
from strom.broker.kafka.context import NO_THROTTLE, Context, code, topic_uuid, topics_by_id
from strom.protocol.errors import ErrorCode
from strom.protocol.v1 import common_pb2, group_pb2

KEY = 9
VERSIONS = (1, 10)
_BATCHED = 8
_TOPIC_IDS = 10


async def handle(ctx: Context) -> Any:
    body = ctx.body
    if ctx.version >= _BATCHED:
        results = [await _group(ctx, g.group_id, g.topics) for g in body.groups]
        return ctx.build("OffsetFetchResponse", throttle_time=NO_THROTTLE, groups=tuple(
            ctx.build("OffsetFetchResponseGroup", group_id=g.group_id, topics=topics,
                      error_code=code(error))
            for g, (topics, error) in zip(body.groups, results, strict=True)))
    topics, error = await _group(ctx, body.group_id, body.topics)
    return ctx.build("OffsetFetchResponse", throttle_time=NO_THROTTLE, topics=topics,
                     error_code=code(error))


async def _group(ctx: Context, group_id: str, topics: Any) -> tuple[tuple[Any, ...], int]:
    batched = ctx.version >= _BATCHED
    by_id = ctx.version >= _TOPIC_IDS
    topic_cls = "OffsetFetchResponseTopics" if batched else "OffsetFetchResponseTopic"
    part_cls = "OffsetFetchResponsePartitions" if batched else "OffsetFetchResponsePartition"
    request = group_pb2.OffsetFetchRequest(group_id=group_id)
    unknown: list[Any] = []  # v10 topics whose id names no topic
    if topics is not None:
        names = topics_by_id(ctx.core) if by_id else {}
        for t in topics:
            name = names.get(t.topic_id) if by_id else t.name
            if name is None:
                unknown.append(t)
                continue
            request.partitions.extend(common_pb2.TopicPartition(topic=name, partition=p)
                                      for p in t.partition_indexes)
    missing = tuple(ctx.build(topic_cls, topic_id=t.topic_id, partitions=tuple(
        ctx.build(part_cls, partition_index=p, committed_offset=-1, committed_leader_epoch=-1,
                  metadata="", error_code=code(ErrorCode.UNKNOWN_TOPIC_ID))
        for p in t.partition_indexes)) for t in unknown)
    if topics is not None and not request.partitions:
        return missing, 0
    answer = await groups.offset_fetch(ctx.core.groups, request)
    if answer.error_code:
        return (), answer.error_code
    by_topic: dict[str, list[Any]] = defaultdict(list)
    for o in answer.offsets:
        by_topic[o.topic].append(ctx.build(
            part_cls, partition_index=o.partition, committed_offset=o.offset,
            committed_leader_epoch=o.leader_epoch, metadata=o.metadata, error_code=code(0)))
    if not by_id:
        return tuple(ctx.build(topic_cls, name=name, partitions=tuple(parts))
                     for name, parts in by_topic.items()), 0
    ids = {name: topic_uuid(t.topic_id) for name, t in ctx.core.metadata.topics().items()}
    return tuple(ctx.build(topic_cls, topic_id=ids[name], partitions=tuple(parts))
                 for name, parts in by_topic.items() if name in ids) + missing, 0
