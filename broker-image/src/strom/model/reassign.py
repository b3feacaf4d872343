"""Minimal-movement, rack-aware partition reassignment plans: the one planner.

The operator runs it for scale-out and scale-in, ``strom reassign plan`` (Kafka's
``kafka-reassign-partitions --generate``) for any change of the broker set or replication factor,
so both move replicas the same way.

Input: the current assignment (topic-partition -> ordered replica list, the first replica being the
preferred leader), the brokers that will remain (with their racks) and the brokers that will leave.
Output: a :class:`Plan` — the target assignment, the individual replica moves in the order to run
them, and the partitions whose replica lists change (what ``Admin.ReassignPartitions`` takes).

Algorithm
---------
1. **Refuse** when fewer brokers remain than the largest replication factor: nothing could hold the
   replicas (``PlanError`` with reason ``NotEnoughBrokers``).
2. **Drain** (scale-in first): every replica on a leaving broker moves to a remaining broker that
   does not hold the partition yet, choosing, in this order: a broker whose rack the partition
   does not use yet, then the least-loaded broker, then the lowest id.  The replacement keeps the
   leaving replica's position in the list, so leadership preference is kept where possible.
3. **Balance**: the ideal load of each remaining broker is ``floor(R/N)`` or ``ceil(R/N)`` replicas
   (R replicas, N brokers; the ``R mod N`` currently heaviest brokers get the ceiling).  While some
   broker is above its ideal and another below, move one replica from the most-loaded broker to the
   least-loaded one, choosing a partition the receiver does not hold and whose move does not reduce
   the number of distinct racks it spans.  Every such move lowers the excess by exactly one, so the
   number of balancing moves equals the sum of excesses — the minimum any plan can achieve (each
   move relieves one broker by one replica).  If the rack or placement constraints block every
   candidate move, balancing stops early and ``Plan.balanced`` is False.

Invariants (property-tested): no partition ever has two replicas on one broker; no replica stays
on a leaving broker; balancing never lowers the number of racks a partition spans (draining lowers
it only when no remaining broker offers an unused rack); replica counts per partition are kept.

Loads are replica counts.  Sizes in bytes are not considered yet (Kafka's own tool does the same).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence


class PlanError(ValueError):
    """A requested change the planner refuses (e.g. fewer brokers than the replication factor);
    ``reason`` is a CamelCase word for status conditions, the message names the fix."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)

TopicPartition = tuple[str, int]
Assignment = Mapping[TopicPartition, Sequence[int]]


@dataclasses.dataclass(frozen=True)
class Move:
    topic: str
    partition: int
    source: int
    target: int
    reason: str  # "drain" | "balance"


@dataclasses.dataclass(frozen=True)
class Plan:
    assignment: dict[TopicPartition, list[int]]
    moves: list[Move]
    balanced: bool

    @property
    def reassignments(self) -> dict[TopicPartition, list[int]]:
        """Only the partitions whose replica list changes, with the new list."""
        changed = {(m.topic, m.partition) for m in self.moves}
        return {tp: self.assignment[tp] for tp in sorted(changed)}

    @property
    def is_empty(self) -> bool:
        return not self.moves


def loads(assignment: Assignment, brokers: Iterable[int]) -> dict[int, int]:
    """Replicas per broker (brokers with none included as 0)."""
    out = dict.fromkeys(brokers, 0)
    for replicas in assignment.values():
        for b in replicas:
            out[b] = out.get(b, 0) + 1
    return out


def minimum_balance_moves(load: Mapping[int, int]) -> int:
    """Lower bound on replica moves to reach floor/ceil balance from ``load``."""
    n = len(load)
    if n == 0:
        return 0
    total = sum(load.values())
    low, extra = divmod(total, n)
    ordered = sorted(load.values(), reverse=True)
    ideals = [low + 1] * extra + [low] * (n - extra)
    return sum(max(0, have - want) for have, want in zip(ordered, ideals, strict=True))


def _racks_used(replicas: Sequence[int], racks: Mapping[int, str | None]) -> set[str]:
    return {r for b in replicas if (r := racks.get(b)) is not None}


def plan(
    assignment: Assignment,
    racks: Mapping[int, str | None],
    leaving: Iterable[int] = (),
) -> Plan:
    """Plan moves so that ``leaving`` brokers are empty and the rest are balanced.

    ``racks`` maps every broker id that may hold replicas (old and new) to its rack, or None when
    unknown; brokers in ``leaving`` are excluded whether listed there or not.
    """
    gone = set(leaving)
    remaining = sorted(b for b in racks if b not in gone)
    current = {tp: list(replicas) for tp, replicas in sorted(assignment.items())}
    for tp, replicas in current.items():
        if len(set(replicas)) != len(replicas):
            raise PlanError("InvalidAssignment", f"{tp[0]}-{tp[1]} has a broker twice: {replicas}")
    max_rf = max((len(r) for r in current.values()), default=0)
    if max_rf > len(remaining):
        raise PlanError(
            "NotEnoughBrokers",
            f"{len(remaining)} broker(s) would remain but a topic has replication factor {max_rf}; "
            f"keep at least {max_rf} brokers or lower the replication factor first",
        )
    rack_of = {b: racks.get(b) for b in remaining}
    load = {b: 0 for b in remaining}
    for replicas in current.values():
        for b in replicas:
            if b in load:
                load[b] += 1
    moves: list[Move] = []

    # 2. Drain.
    for tp, replicas in current.items():
        for index, b in enumerate(list(replicas)):
            if b in load:
                continue
            others = [x for i, x in enumerate(replicas) if i != index]
            used = _racks_used(others, rack_of)
            candidates = [x for x in remaining if x not in replicas]
            target = min(
                candidates,
                key=lambda x: (rack_of[x] is not None and rack_of[x] in used, load[x], x),
            )
            replicas[index] = target
            load[target] += 1
            moves.append(Move(tp[0], tp[1], b, target, "drain"))

    # 3. Balance.
    balanced = _balance(current, rack_of, load, moves)
    return Plan(current, moves, balanced)


def _ideals(load: Mapping[int, int]) -> dict[int, int]:
    n = len(load)
    total = sum(load.values())
    low, extra = divmod(total, n)
    heaviest_first = sorted(load, key=lambda b: (-load[b], b))
    return {b: low + (1 if i < extra else 0) for i, b in enumerate(heaviest_first)}


def _balance(
    current: dict[TopicPartition, list[int]],
    rack_of: Mapping[int, str | None],
    load: dict[int, int],
    moves: list[Move],
) -> bool:
    if not load:
        return True
    ideal = _ideals(load)
    while True:
        donors = sorted((b for b in load if load[b] > ideal[b]), key=lambda b: (-load[b], b))
        takers = sorted((b for b in load if load[b] < ideal[b]), key=lambda b: (load[b], b))
        if not donors or not takers:
            return True
        move = _find_move(current, rack_of, donors, takers)
        if move is None:
            return False
        tp, source, target = move
        replicas = current[tp]
        replicas[replicas.index(source)] = target
        load[source] -= 1
        load[target] += 1
        moves.append(Move(tp[0], tp[1], source, target, "balance"))


def _find_move(
    current: Mapping[TopicPartition, list[int]],
    rack_of: Mapping[int, str | None],
    donors: Sequence[int],
    takers: Sequence[int],
) -> tuple[TopicPartition, int, int] | None:
    for source in donors:
        for target in takers:
            best: tuple[tuple[int, int, TopicPartition], TopicPartition] | None = None
            for tp, replicas in current.items():
                if source not in replicas or target in replicas:
                    continue
                before = _distinct_racks(replicas, rack_of)
                after_list = [target if b == source else b for b in replicas]
                after = _distinct_racks(after_list, rack_of)
                if after < before:
                    continue
                # Prefer follower moves (keep leaders) and rack gains; then a stable order.
                key = (replicas.index(source) == 0, -(after - before), tp)
                if best is None or key < best[0]:
                    best = (key, tp)
            if best is not None:
                return best[1], source, target
    return None


def _distinct_racks(replicas: Sequence[int], rack_of: Mapping[int, str | None]) -> int:
    """Racks spanned; brokers without a rack count as their own rack."""
    return len({rack_of.get(b) if rack_of.get(b) is not None else f"\0{b}" for b in replicas})


def scale_out(assignment: Assignment, racks: Mapping[int, str | None]) -> Plan:
    """New brokers (in ``racks`` but holding nothing) get the minimum moves to even the load."""
    return plan(assignment, racks)


def scale_in(
    assignment: Assignment, racks: Mapping[int, str | None], leaving: Iterable[int]
) -> Plan:
    """Drain ``leaving`` first (moves with reason "drain" come first), then rebalance the rest."""
    return plan(assignment, racks, leaving)


def new_replicas_for_rf(
    replicas: Sequence[int],
    new_rf: int,
    racks: Mapping[int, str | None],
    load: Mapping[int, int],
) -> list[int]:
    """Replica list after a replication-factor change: add rack-aware on the least-loaded brokers,
    or drop from the end (never the leader).  Raises PlanError when there are too few brokers."""
    if new_rf <= len(replicas):
        return list(replicas[: max(new_rf, 1)])
    if new_rf > len(racks):
        raise PlanError(
            "NotEnoughBrokers",
            f"replication factor {new_rf} needs {new_rf} brokers, the cluster has {len(racks)}",
        )
    out = list(replicas)
    load = dict(load)
    while len(out) < new_rf:
        used = _racks_used(out, racks)
        target = min(
            (b for b in racks if b not in out),
            key=lambda b: (racks[b] is not None and racks[b] in used, load.get(b, 0), b),
        )
        out.append(target)
        load[target] = load.get(target, 0) + 1
    return out


#: The group coordinator's internal topic (``strom.groups.offsets.OFFSETS_TOPIC``, repeated here
#: because this package imports nothing else of Strom).
OFFSETS_TOPIC = "__consumer_offsets"


def raise_replication(
    assignment: Mapping[TopicPartition, Sequence[int]],
    racks: Mapping[int, str | None],
    replication_factor: int,
) -> dict[TopicPartition, list[int]]:
    """New replica lists for the partitions with fewer than ``replication_factor`` replicas
    (capped at the brokers in ``racks``); {} when none has.

    How an internal topic created small gets its replication raised once brokers are added
    (``__consumer_offsets`` is created at ``min(offsets.topic.replication.factor, live brokers)``,
    so at RF 1 on a one-broker cluster): a reassignment to longer replica lists, Kafka's way too
    (``kafka-reassign-partitions --execute`` with a plan naming more replicas). Every current
    replica stays (the leader first); added ones go rack-aware to the least-loaded brokers
    (:func:`new_replicas_for_rf`). ``strom dev up`` and the operator run it after a scale-out.
    """
    rf = min(replication_factor, len(racks))
    load = loads({tp: list(r) for tp, r in assignment.items()}, racks)
    out: dict[TopicPartition, list[int]] = {}
    for tp in sorted(assignment):
        replicas = list(assignment[tp])
        if len(replicas) >= rf:
            continue
        grown = new_replicas_for_rf(replicas, rf, racks, load)
        for b in set(grown) - set(replicas):
            load[b] = load.get(b, 0) + 1
        out[tp] = grown
    return out


def balance_leaders(assignment: Mapping[TopicPartition, Sequence[int]],
                    before: Mapping[TopicPartition, Sequence[int]]
                    ) -> dict[TopicPartition, list[int]]:
    """Preferred leaders (the first replica) spread evenly, moving as few as possible.

    A partition keeps its current leader while that broker is still a replica and leads fewer
    than ``ceil(partitions / brokers)`` partitions; the others get the replica that leads the
    fewest so far (then the least-loaded, then the lowest id). Only the order changes.
    """
    keys = sorted(assignment)
    brokers = sorted({b for replicas in assignment.values() for b in replicas})
    if not keys or not brokers:
        return {k: list(assignment[k]) for k in keys}
    load = loads(assignment, brokers)
    cap = -(-len(keys) // len(brokers))
    leads = dict.fromkeys(brokers, 0)
    out: dict[TopicPartition, list[int]] = {}
    pending: list[TopicPartition] = []
    for k in keys:
        old = before[k][0] if before.get(k) else None
        if old is not None and old in assignment[k] and leads[old] < cap:
            out[k] = _leader_first(assignment[k], old)
            leads[old] += 1
        else:
            pending.append(k)
    for k in pending:
        leader = min(assignment[k], key=lambda b: (leads[b], load[b], b))
        out[k] = _leader_first(assignment[k], leader)
        leads[leader] += 1
    while any(_shift_leadership(out, leads, u)
              for u in sorted(brokers, key=lambda b: (-leads[b], b))):
        pass  # each shift lowers the sum of squared leader counts, so this ends
    return {k: out[k] for k in keys}


def _shift_leadership(out: dict[TopicPartition, list[int]], leads: dict[int, int], u: int) -> bool:
    """Move one leadership off ``u`` along a chain of partitions (u leads k1 where v1 is a
    replica, v1 leads k2 where v2 is a replica, ...) ending at a broker that leads at least two
    fewer than ``u``; a breadth-first search, so the chain is the shortest. False if none."""
    led: dict[int, list[TopicPartition]] = {}
    for k in sorted(out):
        led.setdefault(out[k][0], []).append(k)
    parent: dict[int, tuple[int, TopicPartition] | None] = {u: None}
    queue = [u]
    while queue:
        x = queue.pop(0)
        for k in led.get(x, ()):
            for y in sorted(out[k][1:]):
                if y in parent:
                    continue
                parent[y] = (x, k)
                if leads[y] + 1 < leads[u]:
                    z = y
                    while (step := parent[z]) is not None:
                        x2, k2 = step
                        out[k2] = _leader_first(out[k2], z)
                        z = x2
                    leads[u] -= 1
                    leads[y] += 1
                    return True
                queue.append(y)
    return False


def _leader_first(replicas: Sequence[int], leader: int) -> list[int]:
    return [leader, *(b for b in replicas if b != leader)]


def imbalance(load: Mapping[int, int]) -> int:
    """max - min replicas per broker (0 or 1 means balanced)."""
    if not load:
        return 0
    return max(load.values()) - min(load.values())


__all__ = [
    "Assignment",
    "Move",
    "Plan",
    "PlanError",
    "TopicPartition",
    "balance_leaders",
    "imbalance",
    "loads",
    "minimum_balance_moves",
    "new_replicas_for_rf",
    "plan",
    "scale_in",
    "scale_out",
]
