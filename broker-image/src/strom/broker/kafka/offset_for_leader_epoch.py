"""OffsetForLeaderEpoch (key 23), versions 2-4: where a leader epoch ends, for consumers that
validate their position after a leader change (KIP-320), through the core's
:func:`strom.broker.offsets.end_offset_for_epoch`.

Supports ``current_leader_epoch`` checks (FENCED_/UNKNOWN_LEADER_EPOCH), NOT_LEADER_OR_FOLLOWER
off the leader, UNKNOWN_TOPIC_OR_PARTITION, an epoch the leader never had (-1/-1: the consumer
resets by its policy). Followers replicate over gRPC (divergence is handled there), so every
request is answered as a consumer's. The gRPC front has no such call: Strom's own consumer does
not validate positions by epoch (it relies on OFFSET_OUT_OF_RANGE).
"""

from __future__ import annotations

from typing import Any

from strom.broker.kafka.context import NO_THROTTLE, Context, code
from strom.broker.offsets import end_offset_for_epoch
from strom.protocol.errors import StromError

KEY = 23
VERSIONS = (2, 4)


async def handle(ctx: Context) -> Any:
    core = ctx.core
    topics = []
    for t in ctx.body.topics:
        parts = []
        for p in t.partitions:
            try:
                epoch, end = end_offset_for_epoch(core, t.topic, p.partition, p.leader_epoch,
                                                  p.current_leader_epoch)
                error = 0
            except StromError as err:
                epoch, end, error = -1, -1, int(err.code)
            parts.append(ctx.build("EpochEndOffset", error_code=code(error),
                                   partition=p.partition, leader_epoch=epoch, end_offset=end))
        topics.append(ctx.build("OffsetForLeaderTopicResult", topic=t.topic,
                                partitions=tuple(parts)))
    return ctx.build("OffsetForLeaderEpochResponse", throttle_time=NO_THROTTLE,
                     topics=tuple(topics))
