"""OffsetCommit (key 8), versions 2-9: commit consumed positions, through the coordinator's
OffsetCommit handler the gRPC front uses (so committed offsets are shared by both fronts).

Supports group members' commits (generation and member id checked: ILLEGAL_GENERATION,
UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS), commits of "simple" consumers (generation -1, empty
member id) to groups without members, committed leader epochs (v6+), metadata strings, static
members (v7+), per-partition errors (UNKNOWN_TOPIC_OR_PARTITION, INVALID_COMMIT_OFFSET_SIZE).

Not supported: ``retention_time_ms`` (v2-4: offsets follow the broker's retention), topic ids
(v10, not advertised), the new consumer protocol's member epochs (KIP-848).
"""

from __future__ import annotations

from typing import Any

from strom.broker.coordinator import handlers as groups
from strom.broker.kafka.context import NO_THROTTLE, Context, code
from strom.protocol.v1 import group_pb2

KEY = 8
VERSIONS = (2, 9)


async def handle(ctx: Context) -> Any:
    body = ctx.body
    request = group_pb2.OffsetCommitRequest(
        group_id=body.group_id, member_id=body.member_id,
        generation=body.generation_id_or_member_epoch,
        group_instance_id=getattr(body, "group_instance_id", None) or "")
    for topic in body.topics:
        for p in topic.partitions:
            request.partitions.add(topic=topic.name, partition=p.partition_index,
                                   offset=p.committed_offset,
                                   leader_epoch=getattr(p, "committed_leader_epoch", -1),
                                   metadata=p.committed_metadata or "")
    answer = await groups.offset_commit(ctx.core.groups, request)
    errors = {(p.topic, p.partition): p.error_code for p in answer.partitions}
    topics = tuple(
        ctx.build("OffsetCommitResponseTopic", name=topic.name, partitions=tuple(
            ctx.build("OffsetCommitResponsePartition", partition_index=p.partition_index,
                      error_code=code(answer.error_code
                                      or errors.get((topic.name, p.partition_index), 0)))
            for p in topic.partitions))
        for topic in body.topics)
    return ctx.build("OffsetCommitResponse", throttle_time=NO_THROTTLE, topics=topics)
