"""OffsetFetch (key 9), versions 1-9: committed positions of a group, through the coordinator's
OffsetFetch handler the gRPC front uses (what lag exporters and KEDA's scaler read).

Supports named partitions (a partition without a commit answers offset -1, as Kafka does) and
all of a group's commits (topics null, v2+), several groups per request (v8+), committed leader
epochs (v5+), group-level errors (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS) in the
version's error field. ``require_stable`` (v7+) changes nothing: without transactions every
commit is stable.

Not supported: topic ids (v10, not advertised), member epochs (KIP-848).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from strom.broker.coordinator import handlers as groups
from strom.broker.kafka.context import NO_THROTTLE, Context, code
from strom.protocol.v1 import common_pb2, group_pb2

KEY = 9
VERSIONS = (1, 9)
_BATCHED = 8


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
    topic_cls = "OffsetFetchResponseTopics" if batched else "OffsetFetchResponseTopic"
    part_cls = "OffsetFetchResponsePartitions" if batched else "OffsetFetchResponsePartition"
    request = group_pb2.OffsetFetchRequest(group_id=group_id)
    if topics is not None:
        request.partitions.extend(common_pb2.TopicPartition(topic=t.name, partition=p)
                                  for t in topics for p in t.partition_indexes)
    if topics is not None and not request.partitions:
        return (), 0
    answer = await groups.offset_fetch(ctx.core.groups, request)
    if answer.error_code:
        return (), answer.error_code
    by_topic: dict[str, list[Any]] = defaultdict(list)
    for o in answer.offsets:
        by_topic[o.topic].append(ctx.build(
            part_cls, partition_index=o.partition, committed_offset=o.offset,
            committed_leader_epoch=o.leader_epoch, metadata=o.metadata, error_code=code(0)))
    return tuple(ctx.build(topic_cls, name=name, partitions=tuple(parts))
                 for name, parts in by_topic.items()), 0
