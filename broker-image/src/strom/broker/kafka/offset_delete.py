"""OffsetDelete (key 47), version 0: delete a group's committed offsets of some partitions,
through the coordinator's OffsetDelete handler the gRPC front uses
(``kafka-consumer-groups --delete-offsets``).

As Kafka: any partition of an empty group; while the group has members, partitions of topics
no member subscribes to (GROUP_SUBSCRIBED_TO_TOPIC for the others); a non-empty group of
another protocol type, or an unknown group, fails whole (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND);
an unknown topic or partition is UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from typing import Any

from strom.broker.coordinator import handlers as groups
from strom.broker.kafka.context import NO_THROTTLE, Context, code
from strom.protocol.v1 import common_pb2, group_pb2

KEY = 47
VERSIONS = (0, 0)


async def handle(ctx: Context) -> Any:
    body = ctx.body
    answer = await groups.offset_delete(ctx.core.groups, group_pb2.OffsetDeleteRequest(
        group_id=body.group_id, partitions=[
            common_pb2.TopicPartition(topic=t.name, partition=p.partition_index)
            for t in body.topics for p in t.partitions]))
    by_topic: dict[str, list[Any]] = {}
    for r in answer.partitions:
        by_topic.setdefault(r.topic, []).append(ctx.build(
            "OffsetDeleteResponsePartition", partition_index=r.partition,
            error_code=code(r.error_code)))
    return ctx.build("OffsetDeleteResponse", error_code=code(answer.error_code),
                     throttle_time=NO_THROTTLE, topics=tuple(
                         ctx.build("OffsetDeleteResponseTopic", name=name,
                                   partitions=tuple(parts))
                         for name, parts in by_topic.items()))
