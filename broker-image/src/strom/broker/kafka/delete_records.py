"""DeleteRecords (key 21), versions 0-2: move partitions' log start offsets up, through the
core handler the gRPC front uses (:func:`strom.broker.delete_records.handle`).

Supports offsets up to the high watermark and -1 (the high watermark), per-partition errors
(NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, OFFSET_OUT_OF_RANGE), the low watermark.

Not as Kafka: ``timeout`` is not used (the answer does not wait for followers to move their own
log start offsets; the low watermark is the leader's).
"""

from __future__ import annotations

from typing import Any

from strom.broker import delete_records
from strom.broker.kafka.context import NO_THROTTLE, Context, code
from strom.protocol.v1 import broker_pb2

KEY = 21
VERSIONS = (0, 2)


async def handle(ctx: Context) -> Any:
    request = broker_pb2.DeleteRecordsRequest(partitions=[
        broker_pb2.DeleteRecordsPartition(topic=t.name, partition=p.partition_index,
                                          offset=p.offset)
        for t in ctx.body.topics for p in t.partitions])
    answer = await delete_records.handle(ctx.core, request)
    by_topic: dict[str, list[Any]] = {}
    for r in answer.partitions:
        by_topic.setdefault(r.topic, []).append(ctx.build(
            "DeleteRecordsPartitionResult", partition_index=r.partition,
            low_watermark=r.low_watermark, error_code=code(r.error_code)))
    return ctx.build("DeleteRecordsResponse", throttle_time=NO_THROTTLE, topics=tuple(
        ctx.build("DeleteRecordsTopicResult", name=name, partitions=tuple(parts))
        for name, parts in by_topic.items()))
