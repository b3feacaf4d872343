"""What the active controller (and the admin handlers) decide, as pure functions of the image.

Why it exists: elections, reassignments, fencing and controlled shutdown are where a controller
goes wrong, so the decisions are kept apart from timers, RPCs and the Raft log, where they can be
tested exhaustively. Each function reads a ``MetadataImage`` and returns the commands to propose;
it never changes the image.

Every ``ChangePartition`` carries ``expected_partition_epoch`` (the partition's epoch when the
decision was made): if anything changed the partition between deciding and applying (a leader's
ISR change, another decision), the command is rejected with INVALID_UPDATE_VERSION by every node
alike, and the controller recomputes from the newer image instead of overwriting it.

Semantics follow Kafka's KRaft controller (``ReplicationControlManager``,
``PartitionChangeBuilder``, KIP-455 reassignment): leaders are chosen in replica order among
unfenced in-sync replicas; a broker that is the last in-sync replica stays in the ISR when fenced
so that electing an out-of-sync replica (unclean election) stays a deliberate act.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from strom.controller.metadata import (
    NO_LEADER,
    ChangePartition,
    Command,
    FenceBroker,
    MetadataError,
    MetadataImage,
    PartitionState,
    changes_for_fenced_broker,
)
from strom.protocol.errors import ErrorCode

__all__ = [
    "controlled_shutdown_changes",
    "fence_changes",
    "imbalanced_partitions",
    "leaderless_elections",
    "offline_replica_changes",
    "preferred_election",
    "reassignment_cancel",
    "reassignment_completions",
    "reassignment_start",
    "shutdown_ready",
    "unclean_election",
]


def _live(image: MetadataImage, broker_id: int) -> bool:
    b = image.brokers.get(broker_id)
    return b is not None and not b.fenced


def _partitions(image: MetadataImage) -> Iterator[tuple[str, int, PartitionState]]:
    for name in sorted(image.topics):
        for index, p in sorted(image.topics[name].partitions.items()):
            yield name, index, p


def _first_live_in_isr(image: MetadataImage, replicas: Sequence[int], isr: Sequence[int],
                       offline: Sequence[int] = ()) -> int:
    """The first replica (in replica order) that is in the ISR, on an unfenced broker and not
    in an offline log directory; NO_LEADER if there is none."""
    return next((r for r in replicas if r in isr and _live(image, r) and r not in offline),
                NO_LEADER)


def _replica_change(
    topic: str,
    partition: int,
    p: PartitionState,
    replicas: Sequence[int],
    isr: Sequence[int],
    leader: int,
    adding: Sequence[int] = (),
    removing: Sequence[int] = (),
) -> ChangePartition:
    """A change of the replica set (start, cancel or end of a reassignment), epoch-checked."""
    return ChangePartition(
        topic,
        partition,
        leader=leader,
        isr=tuple(isr),
        replicas=tuple(replicas),
        adding_replicas=tuple(adding),
        removing_replicas=tuple(removing),
        expected_partition_epoch=p.partition_epoch,
    )


def _in_flight(p: PartitionState) -> bool:
    return bool(p.adding_replicas or p.removing_replicas)


# ---- reassignment (KIP-455) -----------------------------------------------------------------


def reassignment_start(
    image: MetadataImage, topic: str, partition: int, target: Sequence[int],
    allow_replication_factor_change: bool = True,
) -> ChangePartition:
    """Start moving ``topic-partition`` to ``target`` (preferred leader first).

    The partition keeps its original replicas while the new ones catch up: replicas become
    target + (original - target), in Kafka's order. A new target replaces one in flight and is
    computed from the original replicas; a target equal to the original cancels nothing but
    clears the in-flight state (dropping replicas that were being added).

    ``allow_replication_factor_change`` false (KIP-860) refuses a target whose length differs
    from the partition's replication factor - the in-flight target's while one is moving, as
    Kafka counts it - with INVALID_REPLICATION_FACTOR and Kafka's message, after the broker ids
    are checked (Kafka's order).
    """
    name = f"{topic}-{partition}"
    target = list(target)
    if not target:
        raise MetadataError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"{name}: the target replica list is empty; give at least one broker id",
        )
    if len(set(target)) != len(target):
        raise MetadataError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"{name}: the target replica list {target} repeats a broker; list each once",
        )
    unknown = [b for b in target if b not in image.brokers]
    if unknown:
        raise MetadataError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"{name}: target brokers {unknown} are not registered; "
            f"choose among {sorted(image.brokers)}",
        )
    p = image.partition(topic, partition)
    if not allow_replication_factor_change:
        current = len([r for r in p.replicas if r not in p.removing_replicas])
        if current != len(target):
            raise MetadataError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"The replication factor is changed from {current} to {len(target)}",
            )
    original = [r for r in p.replicas if r not in p.adding_replicas]
    replicas = target + [r for r in original if r not in target]
    adding = [r for r in target if r not in original]
    removing = [r for r in original if r not in target]
    isr = [r for r in p.isr if r in replicas]
    if not isr:
        raise MetadataError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"{name}: no in-sync replica {p.isr} would remain among {replicas}; "
            "include one of the in-sync replicas in the target",
        )
    leader = (p.leader if p.leader in isr
              else _first_live_in_isr(image, replicas, isr, p.offline_replicas))
    return _replica_change(topic, partition, p, replicas, isr, leader, adding, removing)


def reassignment_cancel(image: MetadataImage, topic: str, partition: int) -> ChangePartition:
    """Go back to the original replicas: those being added are dropped, ISR included."""
    p = image.partition(topic, partition)
    if not _in_flight(p):
        raise MetadataError(
            ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
            f"{topic}-{partition} has no reassignment in progress; nothing to cancel",
        )
    original = [r for r in p.replicas if r not in p.adding_replicas]
    isr = [r for r in p.isr if r in original]
    leader = (p.leader if p.leader in isr
              else _first_live_in_isr(image, original, isr, p.offline_replicas))
    return _replica_change(topic, partition, p, original, isr, leader)


def _indexed(image: MetadataImage,
             keys: set[tuple[str, int]]) -> Iterator[tuple[str, int, PartitionState]]:
    """The partitions named in one of the image's indexes, in topic and partition order."""
    for name, index in sorted(keys):
        yield name, index, image.topics[name].partitions[index]


def reassignment_completions(image: MetadataImage) -> list[ChangePartition]:
    """Finish every reassignment whose added replicas have all joined the ISR."""
    out: list[ChangePartition] = []
    for name, index, p in _indexed(image, image.reassigning):
        if not _in_flight(p) or not set(p.adding_replicas) <= set(p.isr):
            continue
        target = [r for r in p.replicas if r not in p.removing_replicas]
        isr = [r for r in p.isr if r in target]
        if not isr:
            continue
        leader = (p.leader if p.leader in target
                  else _first_live_in_isr(image, target, isr, p.offline_replicas))
        if leader == NO_LEADER and p.leader != NO_LEADER:
            continue  # no live target replica can take over yet: keep the current leader
        out.append(_replica_change(name, index, p, target, isr, leader))
    return out


# ---- elections --------------------------------------------------------------------------------


def preferred_election(image: MetadataImage, topic: str, partition: int) -> ChangePartition:
    """Give leadership back to the first replica (the preferred leader)."""
    p = image.partition(topic, partition)
    preferred = p.replicas[0]
    if p.leader == preferred:
        raise MetadataError(
            ErrorCode.ELECTION_NOT_NEEDED,
            f"{topic}-{partition}: preferred replica {preferred} already leads",
        )
    if preferred in p.offline_replicas:
        raise MetadataError(
            ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
            f"{topic}-{partition}: preferred replica {preferred} is in an offline log "
            "directory; repair the disk and restart that broker first",
        )
    if preferred not in p.isr or not _live(image, preferred):
        raise MetadataError(
            ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
            f"{topic}-{partition}: preferred replica {preferred} is "
            f"{'fenced' if preferred in p.isr else 'not in the ISR ' + str(p.isr)}; "
            "retry once it has caught up",
        )
    return ChangePartition(
        topic, partition, leader=preferred, expected_partition_epoch=p.partition_epoch
    )


def unclean_election(image: MetadataImage, topic: str, partition: int) -> ChangePartition:
    """Elect the first live replica of a leaderless partition even if it is not in sync: records
    it lacks are lost, which is why only an operator or the topic's config asks for it."""
    p = image.partition(topic, partition)
    if p.leader != NO_LEADER:
        raise MetadataError(
            ErrorCode.ELECTION_NOT_NEEDED, f"{topic}-{partition} already has leader {p.leader}"
        )
    leader = next((r for r in p.replicas if _live(image, r) and r not in p.offline_replicas),
                  NO_LEADER)
    if leader == NO_LEADER:
        raise MetadataError(
            ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
            f"{topic}-{partition}: none of the replicas {p.replicas} is live with its log "
            "directory online; start one of them first",
        )
    return ChangePartition(
        topic, partition, leader=leader, isr=(leader,), expected_partition_epoch=p.partition_epoch
    )


def imbalanced_partitions(image: MetadataImage) -> list[tuple[str, int]]:
    """Partitions whose preferred replica could lead but does not. Visits only the image's
    index of partitions not led by their preferred replica, so the periodic check of a
    balanced cluster costs nothing however many partitions it has (issue 21 item 2)."""
    return [
        (name, index)
        for name, index, p in _indexed(image, image.not_preferred)
        if p.replicas
        and p.leader != p.replicas[0]
        and p.replicas[0] in p.isr
        and _live(image, p.replicas[0])
        and p.replicas[0] not in p.offline_replicas
    ]


def leaderless_elections(
    image: MetadataImage, unclean_allowed: Callable[[str], bool]
) -> list[ChangePartition]:
    """Elect a leader for every partition without one: the first live in-sync replica, else
    (when the topic allows it) the first live replica."""
    out: list[ChangePartition] = []
    for name, index, p in _indexed(image, image.leaderless):
        if p.leader != NO_LEADER:
            continue
        leader = _first_live_in_isr(image, p.replicas, p.isr, p.offline_replicas)
        if leader != NO_LEADER:
            out.append(
                ChangePartition(
                    name, index, leader=leader, expected_partition_epoch=p.partition_epoch
                )
            )
        elif unclean_allowed(name):
            try:
                out.append(unclean_election(image, name, index))
            except MetadataError:
                continue
    return out


# ---- brokers leaving ----------------------------------------------------------------------------


def controlled_shutdown_changes(image: MetadataImage, broker_id: int) -> list[ChangePartition]:
    """Move leadership off a broker that asked to shut down and drop it from the ISRs.

    A partition where no other live in-sync replica exists keeps the broker (as leader and in
    the ISR): taking it away would only make the partition unavailable sooner, as in Kafka.
    """
    out: list[ChangePartition] = []
    for name, index, p in _partitions(image):
        if broker_id not in p.isr:
            continue
        isr = [r for r in p.isr if r != broker_id]
        leader = p.leader
        if leader in (broker_id, NO_LEADER):
            leader = _first_live_in_isr(image, p.replicas, isr, p.offline_replicas)
            if leader == NO_LEADER and p.leader == broker_id:
                continue
        if not isr:
            continue
        out.append(
            ChangePartition(
                name,
                index,
                leader=leader,
                isr=tuple(isr),
                expected_partition_epoch=p.partition_epoch,
            )
        )
    return out


def shutdown_ready(image: MetadataImage, broker_id: int) -> bool:
    """Whether a broker in controlled shutdown leads no partition that another live in-sync
    replica could take over: then stopping it makes nothing unavailable that could stay up."""
    return not any(
        p.leader == broker_id
        and any(r != broker_id and _live(image, r) and r not in p.offline_replicas
                for r in p.isr)
        for _, _, p in _partitions(image)
    )


# ---- log directories that failed ----------------------------------------------------------------


def offline_replica_changes(image: MetadataImage) -> list[ChangePartition]:
    """Move leadership and ISR membership off replicas in offline log directories (Kafka's
    ``handleDirectoriesOffline``): the ISR keeps only online replicas, and a leader whose
    replica is offline hands over to the first live online in-sync replica.

    Departure from Kafka (which leaves such a partition leaderless): when no other live
    in-sync replica exists, the offline leader keeps the partition - it serves reads of what it
    holds and answers writes KAFKA_STORAGE_ERROR - and stays in the ISR, so no data is given
    up; a follower that catches up from it is then elected here."""
    out: list[ChangePartition] = []
    for name, index, p in _indexed(image, image.with_offline_replicas):
        offline = set(p.offline_replicas) & set(p.isr)
        if not offline:
            continue
        online_isr = [r for r in p.isr if r not in offline]
        leader = p.leader
        if leader == NO_LEADER or leader in offline:
            leader = _first_live_in_isr(image, p.replicas, online_isr)
            if leader == NO_LEADER:
                continue  # nobody else can take over: keep it as it is
        out.append(ChangePartition(name, index, leader=leader, isr=tuple(online_isr),
                                   expected_partition_epoch=p.partition_epoch))
    return out


def fence_changes(image: MetadataImage, broker_id: int) -> list[Command]:
    """``FenceBroker`` then the partition changes that go with it, leadership moves first (a
    fencing with thousands of changes is proposed over several ticks; partitions without a
    live leader wait, the others only lose a follower from their ISR)."""
    moves: list[Command] = []
    shrinks: list[Command] = []
    topics = image.topics
    for change in changes_for_fenced_broker(image, broker_id):
        led = topics[change.topic].partitions[change.partition].leader == broker_id
        (moves if led else shrinks).append(change)
    return [FenceBroker(broker_id), *moves, *shrinks]
