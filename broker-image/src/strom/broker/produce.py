"""Produce: append producers' record batches to partition leaders.

Supports acks 0, 1 and -1 (all). acks=-1 first checks ``min.insync.replicas`` against the
current ISR (NOT_ENOUGH_REPLICAS, nothing written), then appends and waits until the high
watermark passes the batch, i.e. every in-sync replica has it: REQUEST_TIMED_OUT after
``timeout_ms`` (0 means 30 s), NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below
``min.insync.replicas`` meanwhile, NOT_LEADER_OR_FOLLOWER if this broker lost the leadership.
acks=0 is still answered (gRPC is request/response); the client simply does not wait. Any other
acks value fails the whole request with INVALID_REQUIRED_ACKS; a negative ``timeout_ms`` is
INVALID_REQUEST.

Partitions of one request are served concurrently, so one partition waiting for its followers
does not hold up the others. Per partition, every batch is validated before anything is written:
its header (magic 2, lengths, CRC-32C, ``max.message.bytes``) and every record in it, decoded and
decompressed (:mod:`strom.protocol.validation`, Kafka's LogValidator: counts, offset deltas,
lengths, timestamps, control/transactional flags, producer fields). UNKNOWN_TOPIC_OR_PARTITION,
CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, INVALID_RECORD, INVALID_TIMESTAMP, INVALID_TXN_STATE leave
that partition's log unchanged, and other partitions of the same request are unaffected. Errors
are per partition: an I/O error answers KAFKA_STORAGE_ERROR for that partition only (its log
directory goes offline, see :meth:`strom.storage.manager.LogManager.io_error`), with one
rate-limited log line, and any unexpected exception UNKNOWN_SERVER_ERROR for that partition only.
Unknown topics are created only with auto.create.topics.enable. A successful append wakes fetches
waiting on the partition.

Not supported: transactions.
"""

from __future__ import annotations

import asyncio
import logging

from strom.broker.core import BrokerCore
from strom.broker.metrics import BrokerMetrics
from strom.broker.requests import require_topic_names
from strom.broker.topics import INTERNAL_TOPICS
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.produce_wire import PartitionDataLike, ProduceRequestLike
from strom.protocol.v1 import broker_pb2
from strom.ratelimit import RateLimitedLog

_log = RateLimitedLog(logging.getLogger(__name__))

VALID_ACKS = (-1, 0, 1)
PRODUCE_FORBIDDEN = INTERNAL_TOPICS
"""Kafka's internal topics that only the broker writes (other ``__`` topics are ordinary)."""
DEFAULT_TIMEOUT_MS = 30_000


async def handle(core: BrokerCore, request: ProduceRequestLike) -> broker_pb2.ProduceResponse:
    if request.acks not in VALID_ACKS:
        raise StromError(ErrorCode.INVALID_REQUIRED_ACKS,
                         f"acks={request.acks} is invalid; use 0, 1 or -1 (all)")
    if request.timeout_ms < 0:
        raise StromError(ErrorCode.INVALID_REQUEST,
                         f"timeout_ms={request.timeout_ms} is negative; use 0 (the default, "
                         f"{DEFAULT_TIMEOUT_MS} ms) or more")
    require_topic_names(p.topic for p in request.partitions)
    timeout_ms = request.timeout_ms or DEFAULT_TIMEOUT_MS
    response = broker_pb2.ProduceResponse()
    outs = [response.partitions.add(topic=data.topic, partition=data.partition,
                                    base_offset=-1, log_append_time_ms=-1, log_start_offset=-1)
            for data in request.partitions]
    if len(outs) == 1:
        await _produce_one(core, request.partitions[0], request.acks, timeout_ms, outs[0])
    else:
        await asyncio.gather(*(_produce_one(core, data, request.acks, timeout_ms, out)
                               for data, out in zip(request.partitions, outs, strict=True)))
    return response


def _fail(out: broker_pb2.PartitionProduceResponse, err: StromError,
          metrics: BrokerMetrics) -> None:
    out.error_code = int(err.code)
    out.error_message = err.message
    metrics.partition_errors.labels("Produce", err.code.name).inc()


async def _produce_one(core: BrokerCore, data: PartitionDataLike, acks: int,
                       timeout_ms: int, out: broker_pb2.PartitionProduceResponse) -> None:
    metrics = core.metrics
    try:
        record = core.metadata.topic(data.topic)
        if data.topic in PRODUCE_FORBIDDEN:
            raise StromError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                             f"topic {data.topic!r} is internal (it holds the cluster's own "
                             f"state); producers cannot write to it")
        if record is None:
            record = await core.topics.auto_create(data.topic)
        if record is None:
            raise StromError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"topic {data.topic!r} does not exist; create it first (or enable "
                             f"auto.create.topics.enable)")
        if not 0 <= data.partition < record.partitions:
            raise StromError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"partition {data.partition} of topic {data.topic!r} does not exist; "
                             f"the topic has {record.partitions} partitions "
                             f"(0..{record.partitions - 1})")
        config = core.topics.log_config(data.topic)
        result = await core.replicas.append(data.topic, data.partition, data.records, acks,
                                            config, timeout_ms)
    except StromError as err:
        _fail(out, err, metrics)
        if err.code == ErrorCode.KAFKA_STORAGE_ERROR:
            _log.warning(f"storage {data.topic}", "produce to %s-%d failed: %s", data.topic,
                         data.partition, err.message)
        return
    except Exception as exc:  # one partition's surprise never fails the others
        _log.error(f"unexpected {type(exc).__name__}", "produce to %s-%d failed unexpectedly",
                   data.topic, data.partition, exc_info=True)
        _fail(out, StromError(ErrorCode.UNKNOWN_SERVER_ERROR,
                              f"{type(exc).__name__}: {exc}; see the broker log"), metrics)
        return
    out.base_offset = result.base_offset
    out.log_append_time_ms = result.log_append_time_ms
    plog = core.replicas.get(data.topic, data.partition)
    out.log_start_offset = plog.log_start_offset if plog is not None else 0
    metrics.bytes_in.labels(data.topic).inc(result.size_bytes)
    metrics.messages_in.labels(data.topic).inc(result.record_count)
