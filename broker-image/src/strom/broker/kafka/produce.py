"""Produce (key 0), versions 3-13: append producers' record batches, through the gRPC front's
handler (:func:`strom.broker.produce.handle`).

Supports acks 0/1/-1 with ``min.insync.replicas``, idempotent producers (sequence and epoch
checks live in the storage layer below both fronts), every compression codec (batches are stored
as sent; the broker never decompresses), per-partition errors with Kafka's codes and messages,
topic ids (v13). The records field is passed to the core as received: no record is decoded or
re-encoded. acks=0 gets no response, and an error on an acks=0 request closes the connection
(Kafka's way to tell a producer that does not read responses).

Not supported: transactional produce (a ``transactional_id`` fails every partition with
INVALID_REQUEST, as InitProducerId does for a transactional id), per-record errors
(``record_errors`` is empty: a bad batch fails whole), ``current_leader`` hints on
NOT_LEADER_OR_FOLLOWER (clients refresh metadata instead).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from kio.serial.readers import tz_aware_from_i64

from strom.broker import produce
from strom.broker.kafka.context import NO_THROTTLE, Context, code, ms, topic_uuid
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.produce_wire import PartitionData, ProduceRequest

KEY = 0
VERSIONS = (3, 13)


class CloseConnection(Exception):
    """Raised for a failed acks=0 request: Kafka closes the connection."""


@dataclass(frozen=True, slots=True)
class _Slot:
    topic: str
    topic_id: uuid.UUID | None
    partition: int
    error: StromError | None = None


async def handle(ctx: Context) -> Any:
    body = ctx.body
    core = ctx.core
    by_id = None
    slots: list[_Slot] = []
    data: list[PartitionData] = []
    for topic in body.topic_data:
        topic_id = getattr(topic, "topic_id", None)
        name = getattr(topic, "name", None)
        error = None
        if name is None:
            if by_id is None:
                by_id = {topic_uuid(t.topic_id): n for n, t in core.metadata.topics().items()}
            name = by_id.get(topic_id, "") if topic_id is not None else ""
            if not name:
                error = StromError(ErrorCode.UNKNOWN_TOPIC_ID,
                                   f"topic id {topic_id} is unknown; refresh metadata")
        for p in topic.partition_data:
            slots.append(_Slot(name, topic_id, p.index, error))
            if error is None:
                data.append(PartitionData(name, p.index, memoryview(p.records or b"")))
    acks = int(body.acks)
    request = ProduceRequest(acks, ms(body.timeout), data)
    results: dict[tuple[str, int], Any] = {}
    whole: StromError | None = None
    if body.transactional_id is not None:
        whole = StromError(ErrorCode.INVALID_REQUEST,
                           "transactions are not supported; produce without a transactional.id")
    else:
        try:
            answer = await produce.handle(core, request)
            results = {(p.topic, p.partition): p for p in answer.partitions}
        except StromError as err:
            whole = err
    failed = whole is not None or any(s.error is not None for s in slots) or any(
        p.error_code for p in results.values())
    if acks == 0:
        if failed:
            raise CloseConnection("an acks=0 produce failed")
        return None
    return _response(ctx, slots, results, whole)


def _response(ctx: Context, slots: list[_Slot], results: dict[tuple[str, int], Any],
              whole: StromError | None) -> Any:
    topics: dict[tuple[str, uuid.UUID | None], list[Any]] = {}
    for slot in slots:
        err = whole or slot.error
        out = results.get((slot.topic, slot.partition))
        if err is not None or out is None:
            error = err or StromError(ErrorCode.UNKNOWN_SERVER_ERROR, "no result")
            part = ctx.build("PartitionProduceResponse", index=slot.partition,
                             error_code=code(int(error.code)), base_offset=-1,
                             log_append_time=None, log_start_offset=-1, record_errors=(),
                             error_message=error.message)
        else:
            part = ctx.build(
                "PartitionProduceResponse", index=slot.partition,
                error_code=code(out.error_code),
                base_offset=out.base_offset,
                log_append_time=(tz_aware_from_i64(out.log_append_time_ms)
                                 if out.log_append_time_ms >= 0 else None),
                log_start_offset=out.log_start_offset, record_errors=(),
                error_message=out.error_message or None)
        topics.setdefault((slot.topic, slot.topic_id), []).append(part)
    responses = tuple(ctx.build("TopicProduceResponse", name=name, topic_id=topic_id,
                                partition_responses=tuple(parts))
                      for (name, topic_id), parts in topics.items())
    return ctx.build("ProduceResponse", responses=responses, throttle_time=NO_THROTTLE)
