"""Committed offsets of a consumer group: the OffsetCommit / OffsetFetch wire mapping, pure.

Kept apart from the membership loop (``group_member``) so the error mapping -- which commit
failure means "you lost your partitions" and which means "find the coordinator again" -- is read
and tested in one place. No I/O here.
"""

from __future__ import annotations

from collections.abc import Mapping

from strom.client.models import TopicPartition
from strom.protocol.errors import ErrorCode, Handling, StromError, codes_with, error_code_from_int
from strom.protocol.v1 import common_pb2, group_pb2

#: Errors that mean "ask FindCoordinator again, then retry" (Kafka's coordinator errors).
COORDINATOR_ERRORS = codes_with(Handling.FIND_COORDINATOR)
#: Commit errors that mean the member's generation is gone: its partitions may be someone else's.
LOST_GENERATION_ERRORS = codes_with(Handling.LOST_GENERATION)


class CommitFailedError(StromError):
    """Kafka's CommitFailedException: the group rebalanced (or dropped this member) since the
    partitions were assigned, so the commit was refused; the original Kafka code is kept."""

    def __init__(self, code: ErrorCode, detail: str = "") -> None:
        super().__init__(code, (
            f"commit failed ({code.name}): the group has rebalanced or this consumer was "
            f"removed from it (e.g. poll() not called within max_poll_interval_ms), so its "
            f"partitions may now belong to another member; the records since the last commit "
            f"will be delivered again. Call poll() to rejoin; process faster or raise "
            f"max_poll_interval_ms / lower max_poll_records to avoid it"
            + (f" ({detail})" if detail else "")))


def commit_request(group_id: str, generation: int, member_id: str, instance_id: str | None,
                   offsets: Mapping[TopicPartition, int]) -> group_pb2.OffsetCommitRequest:
    return group_pb2.OffsetCommitRequest(
        group_id=group_id, generation=generation, member_id=member_id,
        group_instance_id=instance_id or "",
        partitions=[group_pb2.OffsetCommitPartition(topic=tp.topic, partition=tp.partition,
                                                    offset=off, leader_epoch=-1)
                    for tp, off in sorted(offsets.items())])


def commit_error(response: group_pb2.OffsetCommitResponse) -> StromError | None:
    """The first error of an OffsetCommit answer (group-level first), mapped as Kafka does."""
    if response.error_code:
        return _mapped(error_code_from_int(response.error_code), response.error_message)
    for p in response.partitions:
        if p.error_code:
            return _mapped(error_code_from_int(p.error_code),
                           p.error_message or f"{p.topic}-{p.partition}")
    return None


def _mapped(code: ErrorCode, message: str) -> StromError:
    if code in LOST_GENERATION_ERRORS:
        return CommitFailedError(code, message)
    return StromError(code, message or f"offset commit failed: {code.name}")


def fetch_request(group_id: str, partitions: list[TopicPartition]
                  ) -> group_pb2.OffsetFetchRequest:
    return group_pb2.OffsetFetchRequest(
        group_id=group_id, require_stable=True,
        partitions=[common_pb2.TopicPartition(topic=tp.topic, partition=tp.partition)
                    for tp in partitions])


def fetch_result(response: group_pb2.OffsetFetchResponse, wanted: list[TopicPartition]
                 ) -> dict[TopicPartition, int | None]:
    """{tp: committed offset or None}; raises the first error (group-level first)."""
    if response.error_code:
        code = error_code_from_int(response.error_code)
        raise StromError(code, response.error_message or f"offset fetch failed: {code.name}")
    out: dict[TopicPartition, int | None] = dict.fromkeys(wanted)
    for c in response.offsets:
        if c.error_code:
            code = error_code_from_int(c.error_code)
            raise StromError(code, f"offset fetch for {c.topic}-{c.partition}: {code.name}")
        tp = TopicPartition(c.topic, c.partition)
        if tp in out or not wanted:
            out[tp] = c.offset if c.offset >= 0 else None
    return out
