"""DescribeProducers (key 61), version 0: the idempotent producers a partition's leader keeps
state for, through the core handler the gRPC front uses
(:func:`strom.broker.producers.handle`).

Supports producer id, epoch, last sequence and last timestamp per producer; per-partition
errors (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC_EXCEPTION for an
empty name: an answer, never a closed connection) with their messages.

Not as Kafka: no transactions (``coordinator_epoch`` and ``current_txn_start_offset`` are -1).
"""

from __future__ import annotations

from typing import Any

from strom.broker import producers
from strom.broker.kafka.context import NO_THROTTLE, Context, code
from strom.protocol.errors import StromError
from strom.protocol.v1 import broker_pb2, common_pb2

KEY = 61
VERSIONS = (0, 0)


async def handle(ctx: Context) -> Any:
    request = broker_pb2.DescribeProducersRequest(partitions=[
        common_pb2.TopicPartition(topic=t.name, partition=p)
        for t in ctx.body.topics for p in t.partition_indexes])
    try:
        answer = await producers.handle(ctx.core, request)
    except StromError as err:  # the request as a whole is refused (e.g. an empty topic name):
        answer = broker_pb2.DescribeProducersResponse()  # every partition carries the reason
        for tp in request.partitions:
            answer.partitions.add(topic=tp.topic, partition=tp.partition,
                                  error_code=int(err.code), error_message=err.message)
    by_topic: dict[str, list[Any]] = {}
    for r in answer.partitions:
        by_topic.setdefault(r.topic, []).append(ctx.build(
            "PartitionResponse", partition_index=r.partition, error_code=code(r.error_code),
            error_message=r.error_message or None,
            active_producers=tuple(ctx.build(
                "ProducerState", producer_id=p.producer_id, producer_epoch=p.producer_epoch,
                last_sequence=p.last_sequence, last_timestamp=p.last_timestamp,
                coordinator_epoch=-1, current_txn_start_offset=-1) for p in r.producers)))
    return ctx.build("DescribeProducersResponse", throttle_time=NO_THROTTLE, topics=tuple(
        ctx.build("TopicResponse", name=name, partitions=tuple(parts))
        for name, parts in by_topic.items()))
