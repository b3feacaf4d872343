"""DescribeTopicPartitions (key 75), version 0: topics and their partitions, paged (KIP-966;
Kafka 4's admin client describes topics with it), from the same Metadata handler the gRPC front
uses (:func:`strom.broker.metadata_rpc.handle`, no auto-creation).

Supports all topics (an empty list) or named ones (UNKNOWN_TOPIC_OR_PARTITION per unknown
name), topics in name order, ``response_partition_limit`` with the cursor in and
``next_cursor`` out, offline replicas.

Not supported: eligible leader replicas (KIP-966's ELR: Strom has none, so both lists are empty,
as Kafka answers with ELR disabled; a null list made Kafka 4's admin client, and so Kafka
Streams' internal-topic check, fail with a NullPointerException), authorized operations.
"""

from __future__ import annotations

from typing import Any

from strom.broker import metadata_rpc
from strom.broker.kafka.context import NO_THROTTLE, Context, code, topic_uuid
from strom.protocol.v1 import broker_pb2

KEY = 75
VERSIONS = (0, 0)


async def handle(ctx: Context) -> Any:
    body = ctx.body
    names = sorted(t.name for t in body.topics)
    answer = await metadata_rpc.handle(
        ctx.core, broker_pb2.MetadataRequest(topics=names, include_internal=True),
        listener=ctx.listener, auto_create=False)
    limit = max(int(body.response_partition_limit), 1)
    cursor = body.cursor
    out = []
    next_cursor = None
    left = limit
    for t in sorted(answer.topics, key=lambda t: t.name):
        if cursor is not None and t.name < cursor.topic_name:
            continue
        start = cursor.partition_index if cursor is not None and t.name == cursor.topic_name \
            else 0
        parts = [p for p in t.partitions if p.partition >= start]
        if left <= 0:
            next_cursor = ctx.build("Cursor", topic_name=t.name, partition_index=start)
            break
        if len(parts) > left:
            next_cursor = ctx.build("Cursor", topic_name=t.name,
                                    partition_index=parts[left].partition)
            parts = parts[:left]
        left -= len(parts)
        out.append(ctx.build(
            "DescribeTopicPartitionsResponseTopic", error_code=code(t.error_code), name=t.name,
            topic_id=topic_uuid(t.topic_id), is_internal=t.internal, partitions=tuple(
                ctx.build("DescribeTopicPartitionsResponsePartition",
                          error_code=code(p.error_code), partition_index=p.partition,
                          leader_id=p.leader, leader_epoch=p.leader_epoch,
                          replica_nodes=tuple(p.replicas), isr_nodes=tuple(p.isr),
                          eligible_leader_replicas=(), last_known_elr=(),
                          offline_replicas=tuple(p.offline_replicas))
                for p in parts)))
        if next_cursor is not None:
            break
    return ctx.build("DescribeTopicPartitionsResponse", throttle_time=NO_THROTTLE,
                     topics=tuple(out), next_cursor=next_cursor)
