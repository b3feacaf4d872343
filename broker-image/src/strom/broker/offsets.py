"""ListOffsets: find offsets by position or by time in partition leaders.

Supports Kafka's special timestamps: -1 latest (the high watermark, what a consumer can read up
to), -2 earliest (the log start offset), -3 the record with the largest timestamp (KIP-734), the
tiered-storage ones as Kafka answers them without remote storage (checked against Kafka 4.3.1):
-4 earliest-local (KIP-405) is the log start offset, as the whole log is local, -5 latest-tiered
(KIP-1005) and -6 earliest-pending-upload (KIP-1023) are offset -1 (nothing is tiered), and any
timestamp >= 0: the first offset whose record timestamp is >= it, or offset -1 when there is
none (as Kafka answers). Errors are per partition (UNKNOWN_TOPIC_OR_PARTITION, or INVALID_REQUEST
for another negative timestamp).

Answered only by the partition's leader (NOT_LEADER_OR_FOLLOWER elsewhere), so "latest" is the
leader's high watermark: an offset every in-sync replica has. Every answer carries the leader
epoch of the offset found, as Kafka's (see :func:`find`), for consumers' KIP-320 validation.

Not supported: tiered storage (so -4 equals -2, and -5 / -6 find nothing), isolation
levels (no transactions, so the last stable offset equals the high watermark), the
current_leader_epoch check (the request has no such field yet).
"""

from __future__ import annotations

from strom.broker.core import BrokerCore
from strom.broker.requests import require_topic_names
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.v1 import broker_pb2
from strom.storage.log import PartitionLog, TimestampAndOffset

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5
EARLIEST_PENDING_UPLOAD = -6
NOT_FOUND = TimestampAndOffset(-1, -1, -1)


async def handle(core: BrokerCore, request: broker_pb2.ListOffsetsRequest
                 ) -> broker_pb2.ListOffsetsResponse:
    require_topic_names(p.topic for p in request.partitions)
    response = broker_pb2.ListOffsetsResponse()
    for p in request.partitions:
        out = response.partitions.add(topic=p.topic, partition=p.partition, offset=-1,
                                      timestamp=-1, leader_epoch=-1)
        try:
            out.offset, out.timestamp, out.leader_epoch = lookup_with_epoch(
                core, p.topic, p.partition, p.timestamp)
        except StromError as err:
            out.error_code = int(err.code)
            out.error_message = err.message
            core.metrics.partition_errors.labels("ListOffsets", err.code.name).inc()
    return response


def lookup(core: BrokerCore, topic: str, partition: int, timestamp: int) -> tuple[int, int]:
    """(offset, timestamp) for one partition; -1 fields where Kafka answers -1."""
    offset, ts, _ = lookup_with_epoch(core, topic, partition, timestamp)
    return offset, ts


def lookup_with_epoch(core: BrokerCore, topic: str, partition: int, timestamp: int,
                      current_leader_epoch: int = -1) -> tuple[int, int, int]:
    """(offset, timestamp, leader epoch) for one partition, -1 where Kafka answers -1.

    ``current_leader_epoch`` >= 0 is checked as Fetch checks it (FENCED_/UNKNOWN_LEADER_EPOCH).
    """
    plog, view = core.replicas.leader_log(topic, partition, current_leader_epoch)
    return find(plog, timestamp, view.leader_epoch, topic=topic, partition=partition)


def find(plog: PartitionLog, timestamp: int, leader_epoch: int, *, topic: str = "",
         partition: int = -1) -> TimestampAndOffset:
    """What a leader in ``leader_epoch`` answers for ``timestamp`` on ``plog``, as Kafka's
    Partition.fetchOffsetForTimestamp / UnifiedLog.fetchOffsetByTimestamp do.

    The epoch is the one a consumer resetting to the offset validates it with (KIP-320; -1 makes
    Java's consumer skip that check): "latest" the current leader epoch, "earliest" (and
    "earliest local", the whole log being local) the epoch of the log start offset from the epoch
    cache, a time or "max timestamp" the epoch of the batch holding the found record; the tiered
    queries and a time with no record at or after it answer -1 / -1. A record found beyond the
    high watermark, by a time or as the max timestamp, is not found (consumers cannot read it
    yet), as in Kafka.
    """
    if timestamp == LATEST:
        return TimestampAndOffset(plog.high_watermark, -1, leader_epoch)
    if timestamp in (EARLIEST, EARLIEST_LOCAL):  # no tiered storage: every offset is local
        start = plog.log_start_offset
        return TimestampAndOffset(start, -1, plog.epoch_for_offset(start))
    if timestamp in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):  # nothing tiered, none pending
        return NOT_FOUND
    if timestamp == MAX_TIMESTAMP:
        found = plog.offset_of_max_timestamp()
    elif timestamp < 0:
        raise StromError(ErrorCode.INVALID_REQUEST,
                         f"timestamp={timestamp} for {topic}-{partition} is invalid; use -1 "
                         f"(latest), -2 (earliest), -3 (max timestamp), -4 (earliest local), -5 "
                         f"(latest tiered), -6 (earliest pending upload) or a time in ms >= 0")
    else:
        found = plog.offset_for_timestamp(timestamp)
    if found is None or found.offset >= plog.high_watermark:  # both, as Kafka's filter on
        return NOT_FOUND  # lastFetchableOffset in Partition.fetchOffsetForTimestamp
    return found


def end_offset_for_epoch(core: BrokerCore, topic: str, partition: int, epoch: int,
                         current_leader_epoch: int = -1) -> tuple[int, int]:
    """(epoch, end offset) for a consumer validating its position after a leader change
    (KIP-320): the largest epoch <= ``epoch`` this leader has and the offset where it ends
    (the log end offset for the current epoch); (-1, -1) when the leader knows no such epoch.
    Answered only by the leader; ``current_leader_epoch`` >= 0 is checked as Fetch checks it.
    """
    plog, _ = core.replicas.leader_log(topic, partition, current_leader_epoch)
    return plog.end_offset_for_epoch(epoch)
