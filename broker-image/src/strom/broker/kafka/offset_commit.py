"""OffsetCommit (key 8), versions 2-10: commit consumed positions, through the coordinator's
OffsetCommit handler the gRPC front uses (so committed offsets are shared by both fronts).

Supports group members' commits (generation and member id checked: ILLEGAL_GENERATION,
UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS), commits of "simple" consumers (generation -1, empty
member id) to groups without members, committed leader epochs (v6+), metadata strings, static
members (v7+), per-partition errors (UNKNOWN_TOPIC_OR_PARTITION, INVALID_COMMIT_OFFSET_SIZE),
topics named by id (v10): an id no topic has (or the zero id) fails its partitions with
UNKNOWN_TOPIC_ID whatever the group's state, and the answer names topics by the ids asked
(as Kafka 4.3.1 answers).

Not supported: ``retention_time_ms`` (v2-4: offsets follow the broker's retention), the new
consumer protocol's member epochs (KIP-848).
"""

from __future__ import annotations

from typing import Any

from strom.broker.coordinator import handlers as groups
from strom.broker.kafka.context import NO_THROTTLE, Context, code, topics_by_id
from strom.protocol.errors import ErrorCode
from strom.protocol.v1 import group_pb2

KEY = 8
VERSIONS = (2, 10)
TOPIC_IDS = 10
"""The first version that names topics by id."""


async def handle(ctx: Context) -> Any:
    body = ctx.body
    if ctx.version >= TOPIC_IDS:
        by_id = topics_by_id(ctx.core)
        names = [by_id.get(t.topic_id) for t in body.topics]
    else:
        names = [t.name for t in body.topics]
    request = group_pb2.OffsetCommitRequest(
        group_id=body.group_id, member_id=body.member_id,
        generation=body.generation_id_or_member_epoch,
        group_instance_id=getattr(body, "group_instance_id", None) or "")
    for topic, name in zip(body.topics, names, strict=True):
        for p in topic.partitions if name is not None else ():
            request.partitions.add(topic=name, partition=p.partition_index,
                                   offset=p.committed_offset,
                                   leader_epoch=getattr(p, "committed_leader_epoch", -1),
                                   metadata=p.committed_metadata or "")
    errors: dict[tuple[str, int], int] = {}
    group_error = 0
    if request.partitions:
        answer = await groups.offset_commit(ctx.core.groups, request)
        errors = {(p.topic, p.partition): p.error_code for p in answer.partitions}
        group_error = answer.error_code

    def error(name: str | None, partition: int) -> int:
        if name is None:
            return int(ErrorCode.UNKNOWN_TOPIC_ID)
        return group_error or errors.get((name, partition), 0)

    topics = tuple(
        ctx.build("OffsetCommitResponseTopic", name=name or "",
                  topic_id=getattr(topic, "topic_id", None), partitions=tuple(
                      ctx.build("OffsetCommitResponsePartition",
                                partition_index=p.partition_index,
                                error_code=code(error(name, p.partition_index)))
                      for p in topic.partitions))
        for topic, name in zip(body.topics, names, strict=True))
    return ctx.build("OffsetCommitResponse", throttle_time=NO_THROTTLE, topics=topics)
