"""DeleteRecords: move a partition's log start offset up, on its leader (Kafka's DeleteRecords,
what ``kafka-delete-records`` and Kafka Streams' repartition-topic purge call).

Records below the new log start offset are gone for every reader at once (Fetch and ListOffsets
answer from it); whole segments below it are deleted by the next retention pass; followers
learn the new start from their next replica fetch and move theirs (the storage and replication
layers already do this for retention). Offset -1 means the high watermark (delete everything
readable); an offset above the high watermark is OFFSET_OUT_OF_RANGE, as in Kafka.

Not as Kafka: the answer does not wait until every in-sync follower has moved its own log start
offset (Kafka's purgatory); the low watermark returned is the leader's.
"""

from __future__ import annotations

from strom.broker.core import BrokerCore
from strom.broker.requests import require_topic_names
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.v1 import broker_pb2

HIGH_WATERMARK = -1


def delete_records(core: BrokerCore, topic: str, partition: int, offset: int) -> int:
    """The partition's new log start offset; a StromError says why nothing was deleted."""
    plog, _ = core.replicas.leader_log(topic, partition)
    if offset == HIGH_WATERMARK:
        offset = plog.high_watermark
    if offset < 0 or offset > plog.high_watermark:
        raise StromError(ErrorCode.OFFSET_OUT_OF_RANGE,
                         f"offset {offset} for {topic}-{partition} is outside 0.."
                         f"{plog.high_watermark} (the high watermark); pass an offset up to it, "
                         f"or -1 for the high watermark")
    plog.advance_log_start_offset(offset)
    return plog.log_start_offset


async def handle(core: BrokerCore, request: broker_pb2.DeleteRecordsRequest
                 ) -> broker_pb2.DeleteRecordsResponse:
    require_topic_names(p.topic for p in request.partitions)
    response = broker_pb2.DeleteRecordsResponse()
    for p in request.partitions:
        out = response.partitions.add(topic=p.topic, partition=p.partition, low_watermark=-1)
        try:
            out.low_watermark = delete_records(core, p.topic, p.partition, p.offset)
        except StromError as err:
            out.error_code = int(err.code)
            out.error_message = err.message
            core.metrics.partition_errors.labels("DeleteRecords", err.code.name).inc()
    return response
