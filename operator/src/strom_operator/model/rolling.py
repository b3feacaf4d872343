"""Rolling restarts: which broker pod to restart next, one at a time, the active controller last.

The StatefulSet uses ``updateStrategy: OnDelete``, so pods keep running until the operator deletes
them; a pod is *stale* when its ``strom.dev/config-hash`` annotation differs from the desired one
(config, image, resources or rack settings changed — see ``manifests.config_hash``).

Algorithm (after Strimzi's KafkaRoller)
---------------------------------------
Each reconcile asks :func:`next_restart` for at most one pod:

1. Pods that are up to date are never restarted.
2. If any pod is not ready, or is being deleted, or (when known) any partition is under-replicated,
   wait: restarting another broker now could take a partition below ``min.insync.replicas``.
   One exception: a stale pod that is itself not ready is restarted first — it serves nothing, and
   restarting it with the new config may be what makes it healthy (a bad config is fixed by the
   user changing the spec, which changes the hash again).
3. Otherwise restart, among the stale pods, in this order: brokers that are not controller voters,
   then voters that are not the active controller, then the active controller, so the quorum fails
   over once, at the end.  Within a group, the lowest ordinal first.
4. After the restart the next reconcile waits (rule 2) until the new pod is ready and back in every
   ISR before the next one.

Under-replicated counts and the active controller come from the Admin API; when they are unknown
(None) the roll relies on pod readiness alone, and says so in the decision's message.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence


@dataclasses.dataclass(frozen=True)
class BrokerPod:
    name: str
    ordinal: int
    config_hash: str
    ready: bool
    terminating: bool = False


@dataclasses.dataclass(frozen=True)
class RollDecision:
    restart: str | None  # the pod to delete now, or None
    reason: str  # "UpToDate" | "Waiting" | "Restarting"
    message: str
    remaining: tuple[str, ...] = ()  # stale pods in the order they will be restarted


def roll_order(
    pods: Sequence[BrokerPod],
    desired_hash: str,
    controller_voters: int,
    active_controller: int | None,
) -> list[BrokerPod]:
    """Stale pods in restart order (unready first, then rule 3)."""
    stale = [p for p in pods if p.config_hash != desired_hash]

    def group(p: BrokerPod) -> int:
        if not p.ready:
            return 0
        if p.ordinal == active_controller:
            return 3
        if p.ordinal < controller_voters:
            return 2
        return 1

    return sorted(stale, key=lambda p: (group(p), p.ordinal))


def next_restart(
    pods: Sequence[BrokerPod],
    desired_hash: str,
    *,
    controller_voters: int,
    active_controller: int | None = None,
    under_replicated: int | None = None,
) -> RollDecision:
    order = roll_order(pods, desired_hash, controller_voters, active_controller)
    names = tuple(p.name for p in order)
    if not order:
        return RollDecision(None, "UpToDate", "all broker pods run the desired configuration")
    if any(p.terminating for p in pods):
        busy = ", ".join(p.name for p in pods if p.terminating)
        return RollDecision(None, "Waiting", f"waiting for {busy} to terminate", names)
    first = order[0]
    if not first.ready:
        return RollDecision(
            first.name, "Restarting", f"restarting {first.name} (stale and not ready)", names
        )
    unready = [p.name for p in pods if not p.ready]
    if unready:
        return RollDecision(
            None, "Waiting", f"waiting for {', '.join(unready)} to become ready", names
        )
    if under_replicated:
        return RollDecision(
            None,
            "Waiting",
            f"waiting: {under_replicated} partition(s) under-replicated",
            names,
        )
    note = "" if under_replicated is not None else " (ISR state unknown: judged by readiness)"
    return RollDecision(
        first.name,
        "Restarting",
        f"restarting {first.name}, {len(order)} pod(s) stale{note}",
        names,
    )
