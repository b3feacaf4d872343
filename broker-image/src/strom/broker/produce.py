"""Produce: append producers' record batches to partition leaders.

Supports acks 0, 1 and -1 (all). With one replica per partition (the single-broker metadata
store) acks=-1 completes when the leader has appended, as Kafka does when the ISR is just the
leader, after checking ``min.insync.replicas`` (NOT_ENOUGH_REPLICAS if the ISR is smaller).
acks=0 is still answered (gRPC is request/response); the client simply does not wait. Any other
acks value fails the whole request with INVALID_REQUIRED_ACKS.

Per partition, every batch is validated before anything is written (magic 2, lengths, CRC-32C,
``max.message.bytes``, record counts): UNKNOWN_TOPIC_OR_PARTITION, CORRUPT_MESSAGE,
MESSAGE_TOO_LARGE, INVALID_RECORD leave that partition's log unchanged, and other partitions of
the same request are unaffected. Unknown topics are created only with auto.create.topics.enable.
A successful append wakes fetches waiting on the partition.

Not supported yet: idempotent producer sequence checks (producer id/epoch/sequence are stored as
sent), transactions, timeout_ms (nothing to wait for without followers).
"""

from __future__ import annotations

from strom.broker.core import BrokerCore
from strom.broker.requests import require_topic_names
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.v1 import broker_pb2

VALID_ACKS = (-1, 0, 1)


async def handle(core: BrokerCore, request: broker_pb2.ProduceRequest
                 ) -> broker_pb2.ProduceResponse:
    if request.acks not in VALID_ACKS:
        raise StromError(ErrorCode.INVALID_REQUIRED_ACKS,
                         f"acks={request.acks} is invalid; use 0, 1 or -1 (all)")
    require_topic_names(p.topic for p in request.partitions)
    response = broker_pb2.ProduceResponse()
    metrics = core.metrics
    for data in request.partitions:
        out = response.partitions.add(topic=data.topic, partition=data.partition,
                                      base_offset=-1, log_append_time_ms=-1,
                                      log_start_offset=-1)
        try:
            if core.metadata.topic(data.topic) is None:
                core.topics.auto_create(data.topic)
            config = core.topics.log_config(data.topic) if request.acks == -1 else None
            result = core.replicas.append(data.topic, data.partition, data.records,
                                          request.acks, config)
        except StromError as err:
            out.error_code = int(err.code)
            out.error_message = err.message
            metrics.partition_errors.labels("Produce", err.code.name).inc()
            continue
        out.base_offset = result.base_offset
        out.log_append_time_ms = result.log_append_time_ms
        plog = core.replicas.get(data.topic, data.partition)
        out.log_start_offset = plog.log_start_offset if plog is not None else 0
        metrics.bytes_in.labels(data.topic).inc(result.size_bytes)
        metrics.messages_in.labels(data.topic).inc(result.record_count)
    return response
