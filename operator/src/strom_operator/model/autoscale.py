"""Lag-based autoscaling of a consumer workload, decided like KEDA's Kafka scaler.

Desired replicas = ``ceil(total_lag / lagPerReplica)``, then:

* never above the topics' partition count (a consumer beyond it would get no partition: KEDA's
  ``allowIdleConsumers: false``), nor above ``maxReplicas``;
* never below ``minReplicas``; with ``minReplicas: 0`` the workload sleeps at zero until the total
  lag exceeds ``activationLag`` (KEDA's activation threshold), then wakes with at least one replica;
* scaling up happens at once; scaling down only when ``cooldownSeconds`` have passed since the last
  scaling (like the HPA's scale-down stabilisation window), so a burst does not make it flap.

Lag that is unknown (None: the group's offsets could not be read) changes nothing.
"""

from __future__ import annotations

import dataclasses
import math

from strom_operator.model.specs import Autoscale


@dataclasses.dataclass(frozen=True)
class ScaleChoice:
    replicas: int  # what the workload should have now
    changed: bool
    reason: str


def desired_replicas(spec: Autoscale, total_lag: int, partitions: int) -> int:
    """The target before cooldown: ceil(lag / lagPerReplica) within the bounds."""
    if spec.min_replicas == 0 and total_lag <= spec.activation_lag:
        return 0
    want = math.ceil(total_lag / spec.lag_per_replica) if total_lag > 0 else 0
    cap = min(spec.max_replicas, max(partitions, 1))
    floor = max(spec.min_replicas, 1 if spec.min_replicas == 0 else 0)
    return max(min(want, cap), min(floor, cap))


def decide(
    spec: Autoscale,
    *,
    total_lag: int | None,
    partitions: int,
    current: int,
    seconds_since_last_scale: float | None,
) -> ScaleChoice:
    if total_lag is None:
        return ScaleChoice(current, False, "lag unknown: keeping the current replicas")
    target = desired_replicas(spec, total_lag, partitions)
    if target == current:
        return ScaleChoice(current, False, f"lag {total_lag}: {current} replica(s) is right")
    if target > current:
        return ScaleChoice(
            target,
            True,
            f"lag {total_lag} > {current} x {spec.lag_per_replica}: scaling up to "
            f"{target}" + (" (capped at the partition count)" if target == partitions else ""),
        )
    cooling = (
        seconds_since_last_scale is not None and seconds_since_last_scale < spec.cooldown_seconds
    )
    if cooling:
        assert seconds_since_last_scale is not None
        wait = math.ceil(spec.cooldown_seconds - seconds_since_last_scale)
        return ScaleChoice(
            current, False, f"lag {total_lag} would need {target}; cooling down for {wait}s more"
        )
    return ScaleChoice(target, True, f"lag {total_lag}: scaling down to {target}")
