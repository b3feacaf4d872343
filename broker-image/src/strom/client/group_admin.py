"""Pure pieces of the consumer-group admin calls: wire -> model, merging, lag, reset plans.

Kept apart from ``aio_admin`` (which does the routing and retries) so that the rules an operator
relies on -- how a reset is clamped, what lag a never-committed partition has, which broker's
answer wins when a group moved -- are tested as plain functions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from strom.client.models import (
    GroupDescription,
    GroupListing,
    GroupMemberDescription,
    GroupPartitionLag,
    OffsetReset,
    TopicPartition,
)
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.v1 import group_pb2


def listing_from_proto(g: group_pb2.GroupListing) -> GroupListing:
    return GroupListing(group_id=g.group_id, state=g.state,
                        protocol_type=g.protocol_type, coordinator=g.coordinator)


def merge_listings(answers: Iterable[group_pb2.GroupListing],
                   states: Iterable[str] | None = None) -> list[GroupListing]:
    """One listing per group, sorted by id.

    Each broker lists the groups it coordinates; right after a coordinator moved, the old and the
    new one may both list a group, so a group listed twice keeps the answer that is not Dead (the
    loaded one), else the first.
    """
    wanted = {s.lower() for s in states or ()}
    chosen: dict[str, GroupListing] = {}
    for answer in answers:
        listing = listing_from_proto(answer)
        current = chosen.get(listing.group_id)
        if current is None or (current.state == "Dead" and listing.state != "Dead"):
            chosen[listing.group_id] = listing
    return [chosen[g] for g in sorted(chosen)
            if not wanted or chosen[g].state.lower() in wanted]


def description_from_proto(g: group_pb2.GroupDescription) -> GroupDescription:
    return GroupDescription(
        group_id=g.group_id, state=g.state or "Dead", protocol_type=g.protocol_type,
        protocol=g.protocol, generation=g.generation, leader_id=g.leader_id,
        coordinator=g.coordinator,
        members=[GroupMemberDescription(
            member_id=m.member_id, client_id=m.client_id,
            group_instance_id=m.group_instance_id or None,
            subscribed_topics=sorted(m.subscribed_topics),
            assignment=sorted(TopicPartition(tp.topic, tp.partition) for tp in m.assignment))
            for m in sorted(g.members, key=lambda m: m.member_id)])


def not_found_description(group_id: str) -> GroupDescription:
    """What Kafka answers for a group its coordinator does not know: state Dead, no members."""
    return GroupDescription(group_id=group_id, state="Dead")


def partition_lags(description: GroupDescription, committed: Mapping[TopicPartition, int],
                   log_start: Mapping[TopicPartition, int], log_end: Mapping[TopicPartition, int]
                   ) -> list[GroupPartitionLag]:
    """One row per partition the group committed or is assigned, sorted (the CLI's table)."""
    out: list[GroupPartitionLag] = []
    for tp in sorted(set(committed) | _assigned(description)):
        member = description.member_of(tp)
        out.append(GroupPartitionLag(
            topic=tp.topic, partition=tp.partition, committed=committed.get(tp),
            log_start_offset=log_start.get(tp, -1), log_end_offset=log_end.get(tp, -1),
            member_id=None if member is None else member.member_id,
            client_id=None if member is None else member.client_id,
            host=None if member is None else member.host))
    return out


def _assigned(description: GroupDescription) -> set[TopicPartition]:
    return {tp for m in description.members for tp in m.assignment}


def require_inactive(description: GroupDescription) -> None:
    """Kafka resets (and deletes) only groups without members: a live member would overwrite
    the new offsets with its next commit."""
    if description.is_empty:
        return
    raise StromError(
        ErrorCode.NON_EMPTY_GROUP,
        f"group {description.group_id!r} is {description.state} with "
        f"{len(description.members)} member(s); offsets can be reset only while it has none: "
        f"stop its consumers first (see 'strom group describe {description.group_id} "
        "--members')")


def plan_reset(spec: OffsetReset, partitions: Iterable[TopicPartition],
               committed: Mapping[TopicPartition, int], log_start: Mapping[TopicPartition, int],
               log_end: Mapping[TopicPartition, int],
               by_time: Mapping[TopicPartition, int] | None = None
               ) -> dict[TopicPartition, int]:
    """The new committed offset of each partition, clamped to [log start, log end].

    ``by_time`` is ListOffsets' answer for ``spec.value`` (``datetime``): -1 (no record at or
    after the time) means the log end, as in Kafka. ``shift`` needs a committed offset to shift
    from; without one there is no sensible base and the caller is told to pick another scenario.
    """
    plan: dict[TopicPartition, int] = {}
    for tp in sorted(partitions):
        start, end = log_start[tp], log_end[tp]
        if spec.kind == "earliest":
            target = start
        elif spec.kind == "latest":
            target = end
        elif spec.kind == "offset":
            target = spec.value
        elif spec.kind == "datetime":
            found = (by_time or {}).get(tp, -1)
            target = end if found < 0 else found
        else:  # shift
            base = committed.get(tp)
            if base is None:
                raise StromError(
                    ErrorCode.INVALID_REQUEST,
                    f"cannot shift {tp}: the group has no committed offset there; use "
                    "earliest, latest, a given offset or a date-time instead")
            target = base + spec.value
        plan[tp] = min(max(target, start), end)
    return plan
