"""ListOffsets (key 2), versions 1-11: offsets by position or time, through the core lookup the
gRPC front uses (:func:`strom.broker.offsets.lookup_with_epoch`).

Supports -1 latest (the high watermark, with the current leader epoch), -2 earliest, -3 the
record with the largest timestamp (KIP-734, v7+), -4 earliest-local (v8+), -5 latest-tiered
(v9+), -6 earliest-pending-upload (KIP-1023, v11+; the last three as Kafka answers them without
tiered storage: the log start offset, -1, -1), and a timestamp >= 0 (the first offset at or
after it, or -1 when there is none); ``current_leader_epoch`` (v4+) is checked (FENCED_/
UNKNOWN_LEADER_EPOCH); read_committed equals read_uncommitted (no transactions). Errors are per
partition with Kafka's codes: a special timestamp older than its version, or an unknown
negative one, is UNSUPPORTED_VERSION (what Kafka 4.3.1 answers).

Every answer carries the offset's leader epoch as Kafka's does (the core's
:func:`strom.broker.offsets.find`): the current one for latest, the log start offset's for
earliest, the found batch's for a time or max timestamp, -1 where the offset is -1.
"""

from __future__ import annotations

from typing import Any

from strom.broker.kafka.context import NO_THROTTLE, Context, code
from strom.broker.kafka.frames import ResponseTemplate, TemplateCache
from strom.broker.offsets import lookup_with_epoch
from strom.protocol.errors import ErrorCode, StromError

KEY = 2
VERSIONS = (1, 11)
#: The first version each special timestamp may be asked at (Kafka's ListOffsetsRequest rules).
SINCE = {-1: 0, -2: 0, -3: 7, -4: 8, -5: 9, -6: 11}


async def handle(ctx: Context) -> Any:
    core = ctx.core
    topics = []
    requested = ctx.body.topics
    if len(requested) == 1 and len(requested[0].partitions) == 1:
        encoded = _one_partition(ctx, requested[0].name, requested[0].partitions[0])
        if encoded is not None:
            return encoded
    for topic in ctx.body.topics:
        parts = []
        for p in topic.partitions:
            try:
                if p.timestamp < 0 and ctx.version < SINCE.get(p.timestamp, VERSIONS[1] + 1):
                    raise StromError(ErrorCode.UNSUPPORTED_VERSION,
                                     f"timestamp {p.timestamp} needs a newer ListOffsets version")
                offset, timestamp, epoch = lookup_with_epoch(
                    core, topic.name, p.partition_index, p.timestamp,
                    getattr(p, "current_leader_epoch", -1))
                error = 0
            except StromError as err:
                offset, timestamp, epoch, error = -1, -1, -1, int(err.code)
                core.metrics.partition_errors.labels("ListOffsets", err.code.name).inc()
            parts.append(ctx.build("ListOffsetsPartitionResponse",
                                   partition_index=p.partition_index, error_code=code(error),
                                   timestamp=timestamp, offset=offset, leader_epoch=epoch))
        topics.append(ctx.build("ListOffsetsTopicResponse", name=topic.name,
                                partitions=tuple(parts)))
    return ctx.build("ListOffsetsResponse", throttle_time=NO_THROTTLE, topics=tuple(topics))


#: Encoded answers to one-partition requests without error, by (version, topic): librdkafka
#: asks one partition per ListOffsets request (a consumer assigned 1,000 partitions from the
#: beginning sends 1,000), and kio's building and writing of an answer costs more than the
#: look-up. The integers written in: partition index, timestamp, offset, leader epoch.
_TEMPLATES: TemplateCache[ResponseTemplate] = TemplateCache()
_WIDTHS = (4, 8, 8, 4)


def _one_partition(ctx: Context, topic: str, p: Any) -> bytes | None:
    """The answer to a request for one partition, from a template when the look-up succeeds
    (kio's bytes: :class:`strom.broker.kafka.frames.ResponseTemplate`); None otherwise (the
    caller answers as for any request, errors included)."""
    if p.timestamp < 0 and ctx.version < SINCE.get(p.timestamp, VERSIONS[1] + 1):
        return None
    try:
        offset, timestamp, epoch = lookup_with_epoch(
            ctx.core, topic, p.partition_index, p.timestamp,
            getattr(p, "current_leader_epoch", -1))
    except StromError:
        return None
    key = (ctx.version, topic)
    try:
        template = _TEMPLATES[key]
    except KeyError:
        def make(values: list[int]) -> Any:
            partition, ts, off, leader_epoch = values
            return ctx.build("ListOffsetsResponse", throttle_time=NO_THROTTLE, topics=(
                ctx.build("ListOffsetsTopicResponse", name=topic, partitions=(
                    ctx.build("ListOffsetsPartitionResponse", partition_index=partition,
                              error_code=code(0), timestamp=ts, offset=off,
                              leader_epoch=leader_epoch),)),))

        template = _TEMPLATES.make(key, lambda: ResponseTemplate(make, _WIDTHS))
    if template is None:
        return None
    return template.encode(ctx.request.correlation_id, p.partition_index, timestamp, offset,
                           epoch)
