"""Broker count changes: the next step when ``spec.brokers.replicas`` differs from the StatefulSet.

Scale out: grow the StatefulSet first; once the new brokers have registered, run a rebalance plan
(:mod:`strom.model.reassign`, the one planner) that moves replicas onto them.

Scale in: never remove a broker that holds data.  First refuse if the remaining brokers could not
hold the largest replication factor; otherwise drain (reassign every replica off the leaving
brokers, the highest ordinals, since a StatefulSet removes from the end), wait until the
reassignment is done and the leaving brokers hold nothing, and only then shrink the StatefulSet.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Literal

from strom.model import reassign

Step = Literal[
    "Steady",
    "GrowStatefulSet",
    "WaitForBrokers",
    "Rebalance",
    "Refuse",
    "Drain",
    "WaitForDrain",
    "ElectLeaders",
    "ShrinkStatefulSet",
]


@dataclasses.dataclass(frozen=True)
class ScaleDecision:
    step: Step
    message: str
    leaving: tuple[int, ...] = ()


def decide(
    *,
    desired: int,
    current: int,
    registered: frozenset[int] | None,
    replicas_per_broker: Mapping[int, int] | None,
    max_replication_factor: int,
    reassignment_in_progress: bool,
    leaders_per_broker: Mapping[int, int] | None = None,
) -> ScaleDecision:
    """``current`` is the StatefulSet's replicas; ``registered`` the broker ids the controller knows
    and ``replicas_per_broker`` their replica counts (None when the Admin API is not reachable)."""
    if desired > current:
        return ScaleDecision("GrowStatefulSet", f"scaling out from {current} to {desired} brokers")
    if desired < current:
        leaving = tuple(range(desired, current))
        if desired < max_replication_factor:
            return ScaleDecision(
                "Refuse",
                f"can not scale in to {desired} broker(s): a topic has replication factor "
                f"{max_replication_factor}; lower it or keep {max_replication_factor} brokers",
                leaving,
            )
        if replicas_per_broker is None:
            return ScaleDecision(
                "WaitForDrain",
                f"waiting for the cluster's assignment to drain brokers {list(leaving)}",
                leaving,
            )
        holding = [b for b in leaving if replicas_per_broker.get(b, 0) > 0]
        if reassignment_in_progress:
            return ScaleDecision("WaitForDrain", f"draining brokers {list(leaving)}", leaving)
        if holding:
            return ScaleDecision("Drain", f"moving replicas off brokers {holding}", leaving)
        leading = [b for b in leaving if (leaders_per_broker or {}).get(b, 0) > 0]
        if leading:
            return ScaleDecision(
                "ElectLeaders", f"moving leadership off brokers {leading}", leaving
            )
        return ScaleDecision(
            "ShrinkStatefulSet",
            f"brokers {list(leaving)} are empty; scaling in to {desired}",
            leaving,
        )
    if registered is None:
        return ScaleDecision("Steady", f"{current} broker(s)")
    missing = sorted(set(range(desired)) - registered)
    if missing:
        return ScaleDecision("WaitForBrokers", f"waiting for brokers {missing} to register")
    if replicas_per_broker is not None and not reassignment_in_progress:
        empty = [b for b in range(desired) if replicas_per_broker.get(b, 0) == 0]
        if empty and any(replicas_per_broker.values()):
            return ScaleDecision("Rebalance", f"brokers {empty} hold no replicas: rebalancing")
    return ScaleDecision("Steady", f"{current} broker(s)")


def rebalance_plan(
    assignment: reassign.Assignment,
    racks: Mapping[int, str | None],
    keep: Iterable[int],
) -> reassign.Plan:
    """The reassignment that leaves replicas only on ``keep`` (draining every other broker that
    holds some) and evens the load across ``keep`` with the fewest moves, rack-aware.

    Raises :class:`~strom_operator.model.errors.PlanError` (``NotEnoughBrokers``) when ``keep``
    can not hold the largest replication factor.
    """
    kept = sorted(set(keep))
    holders = {b for replicas in assignment.values() for b in replicas}
    leaving = sorted(holders - set(kept))
    broker_racks = {b: racks.get(b) for b in kept}
    broker_racks.update({b: racks.get(b) for b in leaving})
    return reassign.plan(assignment, broker_racks, leaving)


#: The broker's default ``offsets.topic.replication.factor``.
DEFAULT_OFFSETS_RF = 3


def internal_replication_targets(
    assignment: Mapping[reassign.TopicPartition, list[int]],
    racks: Mapping[int, str | None],
    brokers: Iterable[int],
    config: Mapping[str, object],
    pending: Mapping[reassign.TopicPartition, list[int]] | None = None,
) -> dict[reassign.TopicPartition, list[int]]:
    """Raise ``__consumer_offsets`` to ``min(offsets.topic.replication.factor, brokers)``.

    The coordinator creates it at ``min(offsets.topic.replication.factor, live brokers)``; a
    cluster that started with fewer brokers keeps that small RF (and with it the risk of losing
    committed offsets) until a reassignment raises it, which Kafka leaves to the administrator.
    After a scale-out the operator does it: the partitions' replica lists after ``pending`` (the
    rebalance being started, if any) grow on ``brokers`` (:func:`reassign.raise_replication`).
    """
    try:
        wanted = int(str(config.get("offsets.topic.replication.factor", DEFAULT_OFFSETS_RF)))
    except ValueError:
        wanted = DEFAULT_OFFSETS_RF
    after = dict(pending or {})
    offsets = {tp: list(after.get(tp, replicas)) for tp, replicas in assignment.items()
               if tp[0] == reassign.OFFSETS_TOPIC}
    kept = sorted(set(brokers))
    return reassign.raise_replication(offsets, {b: racks.get(b) for b in kept}, wanted)


def progress(
    moves_total: int, moving_partitions: int, percent: float | None
) -> dict[str, int | float | str]:
    """The ``status.rebalance`` block while a reassignment runs."""
    out: dict[str, int | float | str] = {
        "state": "Moving" if moving_partitions else "Done",
        "movesTotal": moves_total,
        "partitionsMoving": moving_partitions,
    }
    if percent is not None:
        out["percent"] = percent
    if not moving_partitions:
        out["movesDone"] = moves_total
    return out


def throttle_arg(bytes_per_sec: int) -> int:
    """``Admin.alter_partition_reassignments``'s throttle: N > 0 throttles, -1 removes it."""
    return bytes_per_sec if bytes_per_sec > 0 else -1


def brokers_to_unregister(fenced: Iterable[int], replicas_per_broker: Mapping[int, int],
                          desired: int) -> list[int]:
    """Brokers removed by a finished scale-in that the cluster still lists: ids at or beyond the
    desired count, fenced (their pods are gone) and holding no replica. Unregistering them
    (KIP-631's UnregisterBroker) keeps the broker list and the fenced count honest; a broker
    that still holds data is never forgotten."""
    return sorted(b for b in fenced if b >= desired and replicas_per_broker.get(b, 0) == 0)
