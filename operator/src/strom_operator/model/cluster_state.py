"""What the brokers report through the Admin API, reduced to what the reconcile steps decide on.

:func:`build_state` turns plain facts (brokers with racks, fenced ids, the active controller, every
partition's replicas/ISR/leader, the reassignments in flight) into a :class:`ClusterState`.  Kept
pure so the counting rules (what "registered", "under-replicated" or "offline" mean) are tested
without brokers:

* ``registered``: brokers the controller knows and has not fenced (a stopped pod's broker stays
  in the broker list, fenced, until it comes back);
* ``replicas_per_broker`` counts replicas on *every* broker, fenced ones included, because "never
  remove a broker that holds data" must not be fooled by a broker that is merely down;
* under-replicated: fewer in-sync replicas than replicas; offline: no leader.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

TopicPartition = tuple[str, int]


@dataclasses.dataclass(frozen=True)
class PartitionInfo:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int  # -1: none


@dataclasses.dataclass(frozen=True)
class Moving:
    """One partition reassignment in flight; ``percent`` None when the leader could not say.

    While it runs the partition's replica list is the union of old and new replicas (KIP-455);
    ``removing`` are the ones that will go, so the target replication factor is known.
    """

    topic: str
    partition: int
    percent: float | None
    removing: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True)
class ClusterState:
    """What the brokers report through the Admin API."""

    registered: frozenset[int]
    replicas_per_broker: dict[int, int]
    max_replication_factor: int
    partitions: int
    under_replicated: int
    active_controller: int | None
    reassignment_in_progress: bool
    offline: int = 0
    assignment: dict[TopicPartition, list[int]] = dataclasses.field(default_factory=dict)
    leaders: dict[TopicPartition, int] = dataclasses.field(default_factory=dict)
    racks: dict[int, str | None] = dataclasses.field(default_factory=dict)
    topics: tuple[str, ...] = ()  # user topics (internal ones excluded)
    moving: tuple[Moving, ...] = ()
    fenced: frozenset[int] = frozenset()
    """Registered brokers the controller has fenced (down, or still catching up)."""

    @property
    def percent_done(self) -> float | None:
        """Mean progress of the moves in flight (100 when none; None when none is known)."""
        if not self.moving:
            return 100.0
        known = [m.percent for m in self.moving if m.percent is not None]
        if not known:
            return None
        return round(sum(known) / len(self.moving), 1)

    def led_by(self, brokers: Iterable[int]) -> list[TopicPartition]:
        """Partitions whose current leader is one of ``brokers``."""
        wanted = set(brokers)
        return sorted(tp for tp, leader in self.leaders.items() if leader in wanted)

    def not_preferred(self) -> list[TopicPartition]:
        """Partitions led by another replica than the first (the preferred leader)."""
        return sorted(
            tp
            for tp, replicas in self.assignment.items()
            if replicas and self.leaders.get(tp, -1) not in (-1, replicas[0])
        )

    def leaders_per_broker(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for leader in self.leaders.values():
            if leader >= 0:
                out[leader] = out.get(leader, 0) + 1
        return out


def build_state(
    *,
    brokers: Mapping[int, str | None],
    fenced: Iterable[int],
    controller: int | None,
    partitions: Sequence[PartitionInfo],
    moving: Sequence[Moving] = (),
    topics: Iterable[str] = (),
) -> ClusterState:
    """``brokers``: every registered broker id with its rack (fenced ones included)."""
    fenced_ids = set(fenced)
    removing = {(m.topic, m.partition): set(m.removing) for m in moving}
    max_rf = 0
    per_broker = {b: 0 for b in brokers}
    assignment: dict[TopicPartition, list[int]] = {}
    leaders: dict[TopicPartition, int] = {}
    under = offline = 0
    for p in partitions:
        tp = (p.topic, p.partition)
        assignment[tp] = list(p.replicas)
        leaders[tp] = p.leader
        for b in p.replicas:
            per_broker[b] = per_broker.get(b, 0) + 1
        if len(set(p.isr) & set(p.replicas)) < len(p.replicas):
            under += 1
        if p.leader < 0:
            offline += 1
        max_rf = max(max_rf, len(set(p.replicas) - removing.get(tp, set())))
    return ClusterState(
        registered=frozenset(b for b in brokers if b not in fenced_ids),
        replicas_per_broker=per_broker,
        max_replication_factor=max_rf,
        partitions=len(partitions),
        under_replicated=under,
        active_controller=controller if controller is not None and controller >= 0 else None,
        reassignment_in_progress=bool(moving),
        offline=offline,
        assignment=assignment,
        leaders=leaders,
        racks=dict(brokers),
        topics=tuple(sorted(set(topics))),
        fenced=frozenset(fenced_ids),
        moving=tuple(moving),
    )
