"""DeleteRecords (key 21), versions 0-2: move partitions' log start offsets up, through the
core handler the gRPC front uses (:func:`strom.broker.delete_records.handle`).

Supports offsets up to the high watermark and -1 (the high watermark), per-partition errors
(NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, OFFSET_OUT_OF_RANGE, INVALID_TOPIC_EXCEPTION
for an empty name: an answer, never a closed connection), the low watermark.

Not as Kafka: ``timeout`` is not used (the answer does not wait for followers to move their own
log start offsets; the low watermark is the leader's).
"""

from __future__ import annotations

from typing import Any

from strom.broker import delete_records
from strom.broker.kafka.context import NO_THROTTLE, Context, code
from strom.protocol.errors import StromError
from strom.protocol.v1 import broker_pb2

KEY = 21
VERSIONS = (0, 2)


async def handle(ctx: Context) -> Any:
    request = broker_pb2.DeleteRecordsRequest(partitions=[
        broker_pb2.DeleteRecordsPartition(topic=t.name, partition=p.partition_index,
                                          offset=p.offset)
        for t in ctx.body.topics for p in t.partitions])
    try:
        answer = await delete_records.handle(ctx.core, request)
    except StromError as err:  # the request as a whole is refused (e.g. an empty topic name):
        answer = broker_pb2.DeleteRecordsResponse()  # every partition carries the reason
        for p in request.partitions:
            answer.partitions.add(topic=p.topic, partition=p.partition, low_watermark=-1,
                                  error_code=int(err.code), error_message=err.message)
    by_topic: dict[str, list[Any]] = {}
    for r in answer.partitions:
        by_topic.setdefault(r.topic, []).append(ctx.build(
            "DeleteRecordsPartitionResult", partition_index=r.partition,
            low_watermark=r.low_watermark, error_code=code(r.error_code)))
    return ctx.build("DeleteRecordsResponse", throttle_time=NO_THROTTLE, topics=tuple(
        ctx.build("DeleteRecordsTopicResult", name=name, partitions=tuple(parts))
        for name, parts in by_topic.items()))
