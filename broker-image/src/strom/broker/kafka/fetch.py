"""Fetch (key 1), versions 4-17: consumers read record batches, through the gRPC front's
long-poll handler (:func:`strom.broker.fetch.handle`).

Supports everything that handler does (``min_bytes`` / ``max_wait`` long-poll woken by appends,
``max_bytes`` and per-partition limits with KIP-74's first-batch rule, reads below the high
watermark from the leader only, ``current_leader_epoch`` checks with FENCED_/UNKNOWN_LEADER_EPOCH,
OFFSET_OUT_OF_RANGE), topic ids (v13+; an unknown id answers UNKNOWN_TOPIC_ID), record batches
returned exactly as stored (never decoded or re-encoded), ``last_stable_offset`` equal to the
high watermark (there are no transactions, so read_committed reads the same records).

Fetch sessions (KIP-227): this broker never creates one and says so the way Kafka allows: a full
fetch (session id 0) is answered with session id 0, which tells the client no session exists, so
it keeps sending full fetches; an incremental fetch (a session id it cannot know) is answered
FETCH_SESSION_ID_NOT_FOUND, and session id 0 with an epoch > 0 INVALID_FETCH_SESSION_EPOCH, both
of which make clients fall back to a full fetch. ``forgotten_topics_data`` is therefore ignored.

Not supported: preferred read replicas (KIP-392: always -1, read from the leader), the
``diverging_epoch`` answer (followers replicate over gRPC; consumers validate positions with
OffsetForLeaderEpoch), ``current_leader`` hints, ``node_endpoints``.
"""

from __future__ import annotations

import uuid
from typing import Any

from strom.broker import fetch
from strom.broker.kafka.context import NO_THROTTLE, Context, code, ms, topic_uuid
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.v1 import broker_pb2

KEY = 1
VERSIONS = (4, 17)
FINAL_EPOCH = -1


async def handle(ctx: Context) -> Any:
    body = ctx.body
    session_error = _session_error(body)
    if session_error is not None:
        return ctx.build("FetchResponse", throttle_time=NO_THROTTLE,
                         error_code=code(int(session_error)), session_id=0, responses=())
    core = ctx.core
    by_id: dict[uuid.UUID, str] | None = None
    request = broker_pb2.FetchRequest(max_wait_ms=ms(body.max_wait), min_bytes=body.min_bytes,
                                      max_bytes=getattr(body, "max_bytes", 0) or 0,
                                      isolation_level=getattr(body, "isolation_level", 0))
    order: list[tuple[str, uuid.UUID | None, list[int]]] = []
    unknown_ids: set[uuid.UUID] = set()
    for topic in body.topics:
        name = getattr(topic, "topic", None)
        topic_id = getattr(topic, "topic_id", None)
        if name is None:
            if by_id is None:
                by_id = {topic_uuid(t.topic_id): n for n, t in core.metadata.topics().items()}
            name = by_id.get(topic_id, "") if topic_id is not None else ""
            if not name and topic_id is not None:
                unknown_ids.add(topic_id)
        partitions = []
        for p in topic.partitions:
            partitions.append(p.partition)
            if name:
                request.partitions.add(topic=name, partition=p.partition,
                                       fetch_offset=p.fetch_offset,
                                       partition_max_bytes=p.partition_max_bytes,
                                       current_leader_epoch=getattr(
                                           p, "current_leader_epoch", -1))
        order.append((name, topic_id, partitions))
    results: dict[tuple[str, int], Any] = {}
    whole: StromError | None = None
    if request.partitions:
        try:
            answer = await fetch.handle(core, request)
            results = {(p.topic, p.partition): p for p in answer.partitions}
        except StromError as err:
            whole = err
    committed = request.isolation_level == 1
    responses = []
    for name, topic_id, partitions in order:
        parts = []
        for partition in partitions:
            out = results.get((name, partition))
            if out is None or whole is not None:
                error = (whole.code if whole is not None
                         else ErrorCode.UNKNOWN_TOPIC_ID if topic_id in unknown_ids
                         else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                parts.append(_partition(ctx, partition, int(error), -1, -1, b"", committed))
                continue
            parts.append(_partition(ctx, partition, out.error_code, out.high_watermark,
                                    out.log_start_offset, out.records, committed))
        responses.append(ctx.build("FetchableTopicResponse", topic=name, topic_id=topic_id,
                                   partitions=tuple(parts)))
    return ctx.build("FetchResponse", throttle_time=NO_THROTTLE, error_code=code(0),
                     session_id=0, responses=tuple(responses))


def _session_error(body: Any) -> ErrorCode | None:
    session_id = getattr(body, "session_id", 0)
    epoch = getattr(body, "session_epoch", FINAL_EPOCH)
    if session_id != 0:
        return ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    if epoch not in (0, FINAL_EPOCH):
        return ErrorCode.INVALID_FETCH_SESSION_EPOCH
    return None


def _partition(ctx: Context, partition: int, error: int, high_watermark: int,
               log_start_offset: int, records: bytes, committed: bool) -> Any:
    return ctx.build("PartitionData", partition_index=partition, error_code=code(error),
                     high_watermark=high_watermark, last_stable_offset=high_watermark,
                     log_start_offset=log_start_offset,
                     aborted_transactions=() if committed else None,
                     preferred_read_replica=-1, records=records)
