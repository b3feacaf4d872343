"""Fetch (key 1), versions 4-18: consumers read record batches, through the gRPC front's
long-poll handler (:func:`strom.broker.fetch.handle`).

Supports everything that handler does (``min_bytes`` / ``max_wait`` long-poll woken by appends,
``max_bytes`` and per-partition limits with KIP-74's first-batch rule, reads below the high
watermark from the leader only, ``current_leader_epoch`` checks with FENCED_/UNKNOWN_LEADER_EPOCH,
OFFSET_OUT_OF_RANGE), topic ids (v13+; an unknown id answers UNKNOWN_TOPIC_ID), record batches
returned exactly as stored (never decoded or re-encoded), ``last_stable_offset`` equal to the
high watermark (there are no transactions, so read_committed reads the same records).

Record bytes are not copied on the way out: :func:`strom.broker.fetch.read` hands over the
bytes object the log read returned, kio's writer puts it into the response as one chunk of a
list (:func:`strom.broker.kafka.frames.encode_response_chunks`), and the listener writes the
chunks to the socket (Kafka's zero-copy ``FileRecords.writeTo`` in spirit: here one read from the
segment file, then the socket). An answer with one partition and no error (a long poll's) is a
copy of a kept kio encoding with the session id and offsets written in, then the record set
(:func:`_encoded`); every other answer is built and written by kio.

Fetch sessions (KIP-227, :mod:`strom.broker.fetch_sessions`): a full fetch with epoch 0
opens a session, answered with its id; incremental fetches name only new or changed partitions
(and ``forgotten_topics_data``) and their answers carry only partitions with records, errors or a
changed high watermark / log start offset; an unknown session is FETCH_SESSION_ID_NOT_FOUND, a
wrong epoch INVALID_FETCH_SESSION_EPOCH (clients then start over with a full fetch); epoch -1 is
a sessionless full fetch. librdkafka does not use sessions; Kafka's Java consumer does.

Not supported: preferred read replicas (KIP-392: always -1, read from the leader), the
``diverging_epoch`` answer (followers replicate over gRPC; consumers validate positions with
OffsetForLeaderEpoch), ``current_leader`` hints, ``node_endpoints``. v18's only addition, the
partition's tagged ``high_watermark`` (KIP-1166), is the high watermark a follower knows: read
and ignored, as Kafka ignores it from consumers (Strom's followers replicate over gRPC).
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

from strom.broker import fetch
from strom.broker.fetch_sessions import FINAL_EPOCH, Plan, Wanted
from strom.broker.kafka.context import NO_THROTTLE, Context, code, ms, topics_by_id
from strom.broker.kafka.frames import (
    Chunk,
    PartTemplate,
    RecordsTemplate,
    TemplateCache,
    encode_entity,
    encode_response,
)
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.v1 import broker_pb2
from strom.protocol.wire import varint

KEY = 1
VERSIONS = (4, 18)
SESSIONS = 7
"""The first Fetch version with session id and epoch."""


async def handle(ctx: Context) -> Any:
    body = ctx.body
    core = ctx.core
    by_id: dict[uuid.UUID | None, str] | None = None

    def name_of(topic: Any) -> tuple[str, uuid.UUID | None]:
        nonlocal by_id
        name = getattr(topic, "topic", None)
        topic_id = getattr(topic, "topic_id", None)
        if name is None:
            if by_id is None:
                by_id = topics_by_id(core)
            name = by_id.get(topic_id, "")
        return name, topic_id

    requested: list[tuple[tuple[str, int], Wanted]] = []
    unknown: list[tuple[str, uuid.UUID | None, int]] = []
    topic_ids: dict[str, object] = {}
    for topic in body.topics:
        name, topic_id = name_of(topic)
        for p in topic.partitions:
            if not name:
                unknown.append((name, topic_id, p.partition))
                continue
            topic_ids[name] = topic_id
            requested.append(((name, p.partition), Wanted(
                p.fetch_offset, p.partition_max_bytes, getattr(p, "current_leader_epoch", -1))))
    forgotten = [(name_of(t)[0], p) for t in getattr(body, "forgotten_topics_data", None) or ()
                 for p in t.partitions]
    session_id = getattr(body, "session_id", 0)
    epoch = getattr(body, "session_epoch", FINAL_EPOCH)
    plan = (ctx.fetch_sessions.plan(session_id, epoch, requested, forgotten, topic_ids)
            if ctx.fetch_sessions is not None and ctx.version >= SESSIONS
            else Plan(partitions=tuple(requested)))
    if plan.error is not None:
        return ctx.build("FetchResponse", throttle_time=NO_THROTTLE,
                         error_code=code(int(plan.error)), session_id=0, responses=())
    head = broker_pb2.FetchRequest(max_wait_ms=ms(body.max_wait), min_bytes=body.min_bytes,
                                   max_bytes=getattr(body, "max_bytes", 0) or 0,
                                   isolation_level=getattr(body, "isolation_level", 0))
    try:
        answered = [((r.topic, r.partition), r.error_code, r.high_watermark, r.log_start_offset,
                     r.records) for r in await fetch.read_planned(core, plan, head)]
    except StromError as err:  # the whole request (a size): every partition's error
        answered = [(tp, int(err.code), -1, -1, b"") for tp, _ in plan.partitions]
    committed = head.isolation_level == 1
    session = plan.session
    known_ids = session.topic_ids if session is not None else topic_ids
    by_topic: dict[str, tuple[Any, list[_Part]]] = {}
    for (name, partition), error, hw, start, records in answered:
        by_topic.setdefault(name, (known_ids.get(name), []))[1].append(
            (partition, error, hw, start, records))
    for _, topic_id, partition in unknown:
        error = (ErrorCode.UNKNOWN_TOPIC_ID if topic_id is not None
                 else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        by_topic.setdefault(f"\0{topic_id}", (topic_id, []))[1].append(
            (partition, int(error), -1, -1, b""))
    session_id = session.session_id if session is not None else 0
    if len(by_topic) == 1 and len(next(iter(by_topic.values()))[1]) == 1:
        ((name, (topic_id, parts)),) = by_topic.items()  # one partition: a long poll's answer
        if len(parts) == 1 and parts[0][1] == 0 and name[:1] != "\0":
            encoded = _encoded(ctx, name, topic_id, parts[0], session_id, committed)
            if encoded is not None:
                return encoded
    elif by_topic:
        many = _encoded_many(ctx, session_id, by_topic, committed)
        if many is not None:
            return many
    return _response(ctx, session_id, by_topic, committed)


_Part = tuple[int, int, int, int, bytes]
"""One partition's answer: index, error code, high watermark, log start offset, records."""


def _response(ctx: Context, session_id: int, by_topic: dict[str, tuple[Any, list[_Part]]],
              committed: bool, last_stable: int | None = None) -> Any:
    """The FetchResponse (``last_stable``: the last stable offset of every partition if not
    its high watermark: only for finding it in a template)."""
    responses = tuple(ctx.build("FetchableTopicResponse", topic=key if key[:1] != "\0" else "",
                                topic_id=topic_id, partitions=tuple(
                                    _partition(ctx, *part, committed, last_stable)
                                    for part in parts))
                      for key, (topic_id, parts) in by_topic.items())
    return ctx.build("FetchResponse", throttle_time=NO_THROTTLE, error_code=code(0),
                     session_id=session_id, responses=responses)


def _partition(ctx: Context, partition: int, error: int, high_watermark: int,
               log_start_offset: int, records: bytes, committed: bool,
               last_stable: int | None = None) -> Any:
    return ctx.build("PartitionData", partition_index=partition, error_code=code(error),
                     high_watermark=high_watermark,
                     last_stable_offset=high_watermark if last_stable is None else last_stable,
                     log_start_offset=log_start_offset,
                     aborted_transactions=() if committed else None,
                     preferred_read_replica=-1, records=records)


#: Encoded answers of one partition without error, by what decides their bytes besides the
#: correlation id, session id, offsets and records: (version, topic, topic id, partition,
#: read_committed). Shared by every connection; emptied when full.
_TEMPLATES: TemplateCache[RecordsTemplate] = TemplateCache()


def _encoded(ctx: Context, name: str, topic_id: Any, part: _Part, session_id: int,
             committed: bool) -> list[Chunk] | None:
    """The answer with one partition and no error as kio would encode it, from a template
    (:class:`strom.broker.kafka.frames.RecordsTemplate`); None if it cannot be templated."""
    partition, _, hw, start, records = part
    key = (ctx.version, name, topic_id, partition, committed)
    try:
        template = _TEMPLATES[key]
    except KeyError:
        def make(values: list[int], recs: bytes) -> Any:
            return _response(ctx, values[0], {name: (topic_id, [(partition, 0, values[1],
                                                                 values[3], recs)])},
                             committed, last_stable=values[2])

        template = _TEMPLATES.make(key, lambda: RecordsTemplate(make, [4, 8, 8, 8]))
    if template is None:
        return None
    return template.encode(ctx.request.correlation_id, [session_id, hw, hw, start], records)


#: Partition structs of Fetch answers by (version, read_committed): see :func:`_encoded_many`.
_PARTS: TemplateCache[PartTemplate] = TemplateCache()
#: The integers of a partition's struct: index, error code, high watermark, last stable
#: offset, log start offset.
_PART_WIDTHS = [4, 2, 8, 8, 8]
_COUNT = struct.Struct(">i")


def _encoded_many(ctx: Context, session_id: int, by_topic: dict[str, tuple[Any, list[_Part]]],
                  committed: bool) -> list[Chunk] | None:
    """The answer over several partitions as kio would encode it, as chunks: the response and
    each topic by kio with no partitions, the partitions' array spliced in, each partition
    from one :class:`strom.broker.kafka.frames.PartTemplate` per (version, read_committed).
    None if a piece is not of the shape this splices (the caller builds the answer by kio).

    Why: a consumer catching up on 1,000 partitions gets answers naming hundreds of them, and
    kio's building and writing of those cost ~13 ms an answer here (~1.5 us a partition from
    the template). Byte for byte kio's: checked against it for every version."""
    key = (ctx.version, committed)
    try:
        template = _PARTS[key]
    except KeyError:
        def make(values: list[int], records: bytes) -> Any:
            index, error, high_watermark, last_stable, log_start = values
            return _partition(ctx, index, error, high_watermark, log_start, records, committed,
                              last_stable)

        template = _PARTS.make(key, lambda: PartTemplate(make, _PART_WIDTHS))
    if template is None:
        return None
    response = ctx.build("FetchResponse", throttle_time=NO_THROTTLE, error_code=code(0),
                         session_id=session_id, responses=())
    flexible = bool(type(response).__flexible__)  # kio's flag for this version
    tags = b"\x00" if flexible else b""  # an empty tagged-field section
    empty = b"\x01" + tags if flexible else _COUNT.pack(0)  # an empty array, then the tags
    head = encode_response(ctx.request.correlation_id, response)
    if not head.endswith(empty):
        return None
    first = small = bytearray(head[:-len(empty)])
    out: list[Chunk] = [small]
    small += varint(len(by_topic) + 1) if flexible else _COUNT.pack(len(by_topic))
    for name, (topic_id, parts) in by_topic.items():
        topic = encode_entity(ctx.build("FetchableTopicResponse",
                                        topic=name if name[:1] != "\0" else "",
                                        topic_id=topic_id, partitions=()))
        if not topic.endswith(empty):
            return None
        small += memoryview(topic)[:-len(empty)]
        small += varint(len(parts) + 1) if flexible else _COUNT.pack(len(parts))
        for partition, error, high_watermark, log_start, records in parts:
            small = template.write(out, small, (partition, error, high_watermark,
                                                high_watermark, log_start), records)
        small += tags
    small += tags
    _COUNT.pack_into(first, 0, sum(len(c) for c in out) - 4)
    return [c for c in out if len(c)]
