"""Produce: append producers' record batches to partition leaders.

Supports acks 0, 1 and -1 (all). acks=-1 first checks ``min.insync.replicas`` against the
current ISR (NOT_ENOUGH_REPLICAS, nothing written), then appends and waits until the high
watermark passes the batch, i.e. every in-sync replica has it: REQUEST_TIMED_OUT after
``timeout_ms`` (0 means 30 s), NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below
``min.insync.replicas`` meanwhile, NOT_LEADER_OR_FOLLOWER if this broker lost the leadership.
acks=0 is still answered (gRPC is request/response); the client simply does not wait. Any other
acks value fails the whole request with INVALID_REQUIRED_ACKS; a negative ``timeout_ms`` is
INVALID_REQUEST.

With acks=-1 the partitions of one request are served concurrently, so one partition waiting for
its followers does not hold up the others; with acks 0 and 1 nothing waits, so they are appended
one after the other in the request's own task, not a task each (issue 21: a thousand partitions a
request). Per partition, every batch is validated before anything is written:
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
from collections.abc import Sequence
from typing import NamedTuple

from strom.broker.core import BrokerCore
from strom.broker.metadata import TopicRecord
from strom.broker.metrics import BrokerMetrics
from strom.broker.requests import require_topic_names
from strom.broker.topics import INTERNAL_TOPICS
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.produce_wire import PartitionDataLike, ProduceRequestLike
from strom.protocol.v1 import broker_pb2
from strom.ratelimit import RateLimitedLog
from strom.storage.config import LogConfig
from strom.storage.log import AppendResult

_log = RateLimitedLog(logging.getLogger(__name__))

VALID_ACKS = (-1, 0, 1)
PRODUCE_FORBIDDEN = INTERNAL_TOPICS
"""Kafka's internal topics that only the broker writes (other ``__`` topics are ordinary)."""
DEFAULT_TIMEOUT_MS = 30_000


async def handle(core: BrokerCore, request: ProduceRequestLike) -> broker_pb2.ProduceResponse:
    _check(request)
    timeout_ms = request.timeout_ms or DEFAULT_TIMEOUT_MS
    response = broker_pb2.ProduceResponse()
    results: list[AppendResult | None]
    if request.acks != -1:
        results = await _produce_in_turn(core, request.partitions, request.acks, timeout_ms,
                                         response)
    else:
        outs = [_new_out(response, data) for data in request.partitions]
        if len(outs) == 1:
            results = [await _produce_one(core, request.partitions[0], -1, timeout_ms, outs[0])]
        else:
            results = await asyncio.gather(*(
                _produce_one(core, data, request.acks, timeout_ms, out)
                for data, out in zip(request.partitions, outs, strict=True)))
    _count(core.metrics, request.partitions, results)
    return response


async def handle_in_turn(core: BrokerCore, requests: Sequence[ProduceRequestLike]
                         ) -> list[broker_pb2.ProduceResponse | StromError]:
    """Serve acks 0/1 produce requests that arrived pipelined on one connection, one after the
    other in one pass: the answers, in order, are those :func:`handle` gives each request in
    turn (the StromError it raises for a whole request, else its response).

    Nothing waits for followers at acks 0/1, so serving them in turn here is serving them in
    turn there; each topic's record and log config are looked up once for all of them and bytes
    and messages in counted once per topic (librdkafka sends one partition per Produce request:
    at a thousand partitions a broker that is behind reads runs of requests for different
    partitions). An acks=-1 request is a ValueError: it waits, and is served by
    :func:`handle`."""
    if any(r.acks == -1 for r in requests):
        raise ValueError("handle_in_turn serves acks 0 and 1 only")
    looked_up: dict[str, TopicRecord | StromError] = {}
    checked: set[str] = set()
    answers: list[broker_pb2.ProduceResponse | StromError] = []
    served: list[PartitionDataLike] = []
    results: list[AppendResult | None] = []
    for request in requests:
        try:
            _check(request)
        except StromError as err:
            answers.append(err)
            continue
        response = broker_pb2.ProduceResponse()
        results += await _produce_in_turn(core, request.partitions, request.acks,
                                          request.timeout_ms or DEFAULT_TIMEOUT_MS, response,
                                          looked_up, checked)
        served += request.partitions
        answers.append(response)
    _count(core.metrics, served, results)
    return answers


async def _produce_in_turn(core: BrokerCore, partitions: Sequence[PartitionDataLike], acks: int,
                           timeout_ms: int, response: broker_pb2.ProduceResponse,
                           records_of: dict[str, TopicRecord | StromError] | None = None,
                           checked: set[str] | None = None) -> list[AppendResult | None]:
    """acks 0 and 1: nothing waits for followers, so the partitions are appended one after the
    other, each to the end, in one loop without a coroutine, a task or a future per partition
    (issue 21: a request carries hundreds of one-batch partitions). Each topic's record and
    log config are looked up once per request: nothing else runs on the event loop between two
    partitions, so the metadata cannot change meanwhile, bar an auto-creation, which suspends
    and so goes through :func:`_produce_one` and forgets what was looked up. Answers, errors
    and their order are :func:`_produce_one`'s for each partition in turn. ``records_of`` and
    ``checked`` carry what was looked up from one request to the next (:func:`handle_in_turn`:
    nothing runs between them either)."""
    add = response.partitions.add
    if records_of is None:
        records_of = {}
    if checked is None:
        checked = set()
    results: list[AppendResult | None] = []
    for data in partitions:
        out = add(topic=data.topic, partition=data.partition, base_offset=-1,
                  log_append_time_ms=-1, log_start_offset=-1)
        done = _append_in_turn(core, data, records_of, checked)
        if done is None:  # an auto-creation may suspend: the general path
            results.append(await _produce_one(core, data, acks, timeout_ms, out))
            records_of.clear()
            checked.clear()
            continue
        result, log_start = done
        if isinstance(result, StromError):
            _set_error(out, result)
            results.append(None)
            continue
        _set_result(out, result, log_start)
        results.append(result)
    return results


def _append_in_turn(core: BrokerCore, data: PartitionDataLike,
                    records_of: dict[str, TopicRecord | StromError], checked: set[str]
                    ) -> tuple[AppendResult | StromError, int] | None:
    """One partition of :func:`_produce_in_turn` (acks 0/1), appended now: (its result and the
    log start offset, or the StromError it fails with, counted and logged as
    :func:`_failed` does), or None when its topic is unknown (an auto-creation, which may
    suspend: the caller serves it with :func:`_produce_one`). The one implementation of what
    :func:`_produce_in_turn` and :func:`handle_one_now` do per partition."""
    topic, partition = data.topic, data.partition
    record = records_of.get(topic)
    if record is None:
        try:
            record = _existing(core, topic)
        except StromError as err:
            record = err
        if record is None:
            return None
        records_of[topic] = record
    if isinstance(record, StromError):
        return _failure(core, data, record), -1
    try:
        _check_partition(record, topic, partition)
        if topic not in checked:  # its effective config, as _target (unused by acks 0/1)
            core.topics.log_config(topic)
            checked.add(topic)
        result, plog = core.replicas.append_now(topic, partition, data.records)
    except Exception as exc:  # as _produce_one: per partition
        return _failure(core, data, exc), -1
    return result, plog.log_start_offset


def handle_one_now(core: BrokerCore, request: ProduceRequestLike) -> PartitionResult | None:
    """:func:`handle` of an acks 0/1 request for one partition, served now (no coroutine, no
    response message): its one partition's outcome, or None when it cannot be served without
    waiting (its topic is unknown: an auto-creation; nothing done, serve it with
    :func:`handle`). A StromError that fails the whole request is raised, as :func:`handle`
    raises it.

    Why: librdkafka sends one partition per Produce request, and at a thousand partitions most
    reach the broker alone; :func:`handle`'s coroutines and protobuf response were a sizeable
    share of the broker's CPU per such request (issue 21 item 1). Same checks, appends,
    errors and metrics as :func:`handle` (:func:`_append_in_turn` is shared)."""
    if request.acks == -1 or len(request.partitions) != 1:
        raise ValueError("handle_one_now serves one partition at acks 0 or 1")
    answers = handle_each_now(core, (request,))
    if not answers:
        return None
    if isinstance(answers[0], StromError):
        raise answers[0]
    return answers[0]


def handle_each_now(core: BrokerCore, requests: Sequence[ProduceRequestLike]
                    ) -> list[PartitionResult | StromError]:
    """:func:`handle_one_now` of each of ``requests`` (acks 0/1, one partition each) in turn,
    now, in one pass: the answers, in order (the StromError that fails a whole request, as
    :func:`handle` raises it, in its place), up to the first request that cannot be served
    without waiting (its topic is unknown: an auto-creation), which is left with those behind
    it, nothing done (serve them with :func:`handle`).

    Why: at a thousand partitions a broker that is behind reads librdkafka's one-partition
    requests ~17 at a time (its socket buffer full); :func:`handle_in_turn` built a protobuf
    response for each, a sizeable share of the broker's CPU per request (issue 21 item 1).
    Each topic's record and log config are looked up once for the pass and bytes and messages
    in counted once per topic, as :func:`handle_in_turn` does; the same checks, appends,
    errors and metrics as :func:`handle` (:func:`_append_in_turn` is shared)."""
    looked_up: dict[str, TopicRecord | StromError] = {}
    checked: set[str] = set()
    answers: list[PartitionResult | StromError] = []
    served: list[PartitionDataLike] = []
    results: list[AppendResult | None] = []
    for request in requests:
        if request.acks == -1 or len(request.partitions) != 1:
            raise ValueError("handle_each_now serves one partition at acks 0 or 1")
        try:
            _check(request)
        except StromError as err:
            answers.append(err)
            continue
        data = request.partitions[0]
        done = _append_in_turn(core, data, looked_up, checked)
        if done is None:
            break
        result, log_start = done
        if isinstance(result, StromError):
            answers.append(PartitionResult(data.topic, data.partition, int(result.code),
                                           result.message, -1, -1, -1))
            continue
        served.append(data)
        results.append(result)
        answers.append(PartitionResult(data.topic, data.partition, 0, "", result.base_offset,
                                       result.log_append_time_ms, log_start))
    if served:
        _count(core.metrics, served, results)
    return answers


def _count(metrics: BrokerMetrics, partitions: Sequence[PartitionDataLike],
           results: Sequence[AppendResult | None]) -> None:
    """Bytes and messages in, once per topic of the request, not a labelled counter lookup
    per partition (issue 21: a thousand partitions a request). One partition (a lone Kafka
    Produce request, most of them at a thousand partitions) is counted without the totals."""
    if len(partitions) == 1 == len(results):
        if results[0] is not None:
            metrics.produced(partitions[0].topic, results[0].size_bytes, results[0].record_count)
        return
    totals: dict[str, list[int]] = {}
    for data, result in zip(partitions, results, strict=True):
        if result is not None:
            total = totals.get(data.topic)
            if total is None:
                total = totals[data.topic] = [0, 0]
            total[0] += result.size_bytes
            total[1] += result.record_count
    for topic, (size, count) in totals.items():
        metrics.produced(topic, size, count)


class PartitionResult(NamedTuple):
    """One request's outcome in :func:`handle_run`: the fields of
    ``broker_pb2.PartitionProduceResponse`` as plain data (no protobuf message per request of a
    pipelined run; an error has ``base_offset`` -1 and a message)."""

    topic: str
    partition: int
    error_code: int
    error_message: str
    base_offset: int
    log_append_time_ms: int
    log_start_offset: int


async def handle_run(core: BrokerCore, requests: Sequence[ProduceRequestLike]
                     ) -> list[PartitionResult] | None:
    """Serve produce requests that arrived pipelined on one connection, each for the same single
    partition with the same acks and timeout, with one append of all their batches (one
    validation walk, one write, one high-watermark move): the answers, in order, are those
    :func:`handle` gives each request in turn (its one partition's).

    None when that cannot be promised (the requests differ, a request or its target is
    invalid, or an append of all of them fails, which writes nothing): the caller then serves
    each request with :func:`handle`, which finds which one fails and how."""
    if len(requests) < 2 or any(len(r.partitions) != 1 for r in requests):
        return None
    first = requests[0]
    data = first.partitions[0]
    topic, partition = data.topic, data.partition
    key = (first.acks, first.timeout_ms, topic, partition)
    if any((r.acks, r.timeout_ms, r.partitions[0].topic, r.partitions[0].partition) != key
           for r in requests):
        return None
    metrics = core.metrics
    try:
        _check(first)
        config = await _target(core, topic, partition)
        results = await core.replicas.append_many(
            topic, partition, [r.partitions[0].records for r in requests], first.acks,
            config, first.timeout_ms or DEFAULT_TIMEOUT_MS)
    except StromError:
        return None
    except Exception as exc:  # as _produce_one: every request gets UNKNOWN_SERVER_ERROR
        _log.error(f"unexpected {type(exc).__name__}", "produce to %s-%d failed unexpectedly",
                   topic, partition, exc_info=True)
        err = StromError(ErrorCode.UNKNOWN_SERVER_ERROR,
                         f"{type(exc).__name__}: {exc}; see the broker log")
        metrics.partition_errors.labels("Produce", err.code.name).inc(len(requests))
        return [PartitionResult(topic, partition, int(err.code), err.message, -1, -1, -1)
                for _ in requests]
    if results is None:
        return None
    plog = core.replicas.get(topic, partition)
    log_start = plog.log_start_offset if plog is not None else 0
    appended: list[AppendResult | None] = []
    outs: list[PartitionResult] = []
    for result in results:
        if isinstance(result, StromError):
            metrics.partition_errors.labels("Produce", result.code.name).inc()
            outs.append(PartitionResult(topic, partition, int(result.code), result.message,
                                        -1, -1, -1))
            appended.append(None)
        else:
            outs.append(PartitionResult(topic, partition, 0, "", result.base_offset,
                                        result.log_append_time_ms, log_start))
            appended.append(result)
    _count(metrics, [r.partitions[0] for r in requests], appended)
    return outs


def _check(request: ProduceRequestLike) -> None:
    """What fails a whole request."""
    if request.acks not in VALID_ACKS:
        raise StromError(ErrorCode.INVALID_REQUIRED_ACKS,
                         f"acks={request.acks} is invalid; use 0, 1 or -1 (all)")
    if request.timeout_ms < 0:
        raise StromError(ErrorCode.INVALID_REQUEST,
                         f"timeout_ms={request.timeout_ms} is negative; use 0 (the default, "
                         f"{DEFAULT_TIMEOUT_MS} ms) or more")
    require_topic_names(p.topic for p in request.partitions)


def _new_out(response: broker_pb2.ProduceResponse, data: PartitionDataLike
             ) -> broker_pb2.PartitionProduceResponse:
    return response.partitions.add(topic=data.topic, partition=data.partition, base_offset=-1,
                                   log_append_time_ms=-1, log_start_offset=-1)


def _existing(core: BrokerCore, topic: str) -> TopicRecord | None:
    """The record of a topic producers may write, None if it does not exist (yet), or a
    StromError if it is one of the broker's own."""
    record = core.metadata.topic(topic)
    if topic in PRODUCE_FORBIDDEN:
        raise StromError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                         f"topic {topic!r} is internal (it holds the cluster's own "
                         f"state); producers cannot write to it")
    return record


def _check_partition(record: TopicRecord, topic: str, partition: int) -> None:
    if not 0 <= partition < record.partitions:
        raise StromError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                         f"partition {partition} of topic {topic!r} does not exist; "
                         f"the topic has {record.partitions} partitions "
                         f"(0..{record.partitions - 1})")


async def _target(core: BrokerCore, topic: str, partition: int) -> LogConfig:
    """The log configuration of a partition producers may write, or a StromError saying why
    not (an unknown topic is created with auto.create.topics.enable)."""
    record = _existing(core, topic)
    if record is None:
        record = await core.topics.auto_create(topic)
    if record is None:
        raise StromError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                         f"topic {topic!r} does not exist; create it first (or enable "
                         f"auto.create.topics.enable)")
    _check_partition(record, topic, partition)
    return core.topics.log_config(topic)


async def _produce_one(core: BrokerCore, data: PartitionDataLike, acks: int,
                       timeout_ms: int, out: broker_pb2.PartitionProduceResponse
                       ) -> AppendResult | None:
    """Append one partition's records and fill ``out``; the append's result, None if failed."""
    try:
        config = await _target(core, data.topic, data.partition)
        result = await core.replicas.append(data.topic, data.partition, data.records, acks,
                                            config, timeout_ms)
    except Exception as exc:  # one partition's surprise never fails the others
        _failed(core, data, out, exc)
        return None
    plog = core.replicas.get(data.topic, data.partition)
    _set_result(out, result, plog.log_start_offset if plog is not None else 0)
    return result


def _failed(core: BrokerCore, data: PartitionDataLike, out: broker_pb2.PartitionProduceResponse,
            exc: Exception) -> None:
    """Answer a partition's failed append: its error code, or UNKNOWN_SERVER_ERROR for a
    surprise (logged with its traceback: call it in the ``except`` block); a storage error is
    logged, rate-limited."""
    _set_error(out, _failure(core, data, exc))


def _set_error(out: broker_pb2.PartitionProduceResponse, err: StromError) -> None:
    out.error_code = int(err.code)
    out.error_message = err.message


def _failure(core: BrokerCore, data: PartitionDataLike, exc: Exception) -> StromError:
    """What a partition's failed append answers (:func:`_failed`), counted and logged."""
    if isinstance(exc, StromError):
        err = exc
        if err.code == ErrorCode.KAFKA_STORAGE_ERROR:
            _log.warning(f"storage {data.topic}", "produce to %s-%d failed: %s", data.topic,
                         data.partition, err.message)
    else:
        _log.error(f"unexpected {type(exc).__name__}", "produce to %s-%d failed unexpectedly",
                   data.topic, data.partition, exc_info=True)
        err = StromError(ErrorCode.UNKNOWN_SERVER_ERROR,
                         f"{type(exc).__name__}: {exc}; see the broker log")
    core.metrics.partition_errors.labels("Produce", err.code.name).inc()
    return err


def _set_result(out: broker_pb2.PartitionProduceResponse, result: AppendResult,
                log_start_offset: int) -> None:
    out.base_offset = result.base_offset
    out.log_append_time_ms = result.log_append_time_ms
    out.log_start_offset = log_start_offset
