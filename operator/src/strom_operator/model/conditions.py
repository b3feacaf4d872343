"""Status conditions (``Ready``, ``Rebalancing``, ...) in the Kubernetes convention.

A condition changes its ``lastTransitionTime`` only when its ``status`` flips; ``reason`` is a
CamelCase word for machines, ``message`` a sentence for people; ``observedGeneration`` says which
spec generation the condition describes.  These helpers compute new condition lists; the reconcilers
write them with a status patch.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

Status = Literal["True", "False", "Unknown"]

READY = "Ready"
RECONCILED = "Reconciled"
REBALANCING = "Rebalancing"
ROLLING = "RollingRestart"
SCALING = "Scaling"
STORAGE_RESIZING = "StorageResizing"
ADMIN_API = "AdminApiAvailable"
OFFSETS_RESET = "OffsetsReset"
AUTOSCALING = "Autoscaling"
SERVICE_MONITOR = "ServiceMonitorAvailable"
RACK_AWARE = "RackAware"
NETWORK_POLICY = "NetworkPolicyEnforced"

KNOWN_TYPES = (
    READY,
    RECONCILED,
    REBALANCING,
    ROLLING,
    SCALING,
    STORAGE_RESIZING,
    ADMIN_API,
    OFFSETS_RESET,
    AUTOSCALING,
    SERVICE_MONITOR,
    RACK_AWARE,
    NETWORK_POLICY,
)


@dataclasses.dataclass(frozen=True)
class Condition:
    type: str
    status: Status
    reason: str
    message: str = ""
    observed_generation: int | None = None
    last_transition_time: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": self.type,
            "status": self.status,
            "reason": self.reason,
            "message": self.message,
            "lastTransitionTime": self.last_transition_time,
        }
        if self.observed_generation is not None:
            out["observedGeneration"] = self.observed_generation
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Condition:
        status = raw.get("status", "Unknown")
        return cls(
            type=str(raw.get("type", "")),
            status=status if status in ("True", "False") else "Unknown",
            reason=str(raw.get("reason", "")),
            message=str(raw.get("message", "")),
            observed_generation=raw.get("observedGeneration"),
            last_transition_time=str(raw.get("lastTransitionTime", "")),
        )


def now_rfc3339(now: datetime.datetime | None = None) -> str:
    moment = now or datetime.datetime.now(tz=datetime.UTC)
    return moment.astimezone(datetime.UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(
    conditions: Iterable[Mapping[str, Any]],
    type: str,
    status: Status,
    reason: str,
    message: str = "",
    *,
    observed_generation: int | None = None,
    now: datetime.datetime | None = None,
) -> list[dict[str, Any]]:
    """Return ``conditions`` with ``type`` set; keep its transition time if status is unchanged."""
    existing = [Condition.from_dict(c) for c in conditions]
    out: list[Condition] = []
    found = False
    for cond in existing:
        if cond.type != type:
            out.append(cond)
            continue
        found = True
        when = cond.last_transition_time if cond.status == status else now_rfc3339(now)
        out.append(
            Condition(type, status, reason, message, observed_generation, when or now_rfc3339(now))
        )
    if not found:
        out.append(Condition(type, status, reason, message, observed_generation, now_rfc3339(now)))
    return [c.to_dict() for c in out]


def get_condition(conditions: Sequence[Mapping[str, Any]], type: str) -> Condition | None:
    for raw in conditions:
        if raw.get("type") == type:
            return Condition.from_dict(raw)
    return None


def is_true(conditions: Sequence[Mapping[str, Any]], type: str) -> bool:
    cond = get_condition(conditions, type)
    return cond is not None and cond.status == "True"
