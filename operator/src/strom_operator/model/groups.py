"""StromConsumerGroup decisions: the status from the group's lag, when to reset offsets.

Offset resets are declarative: ``spec.resetOffsets`` is applied once per *change of that block*
(its hash is remembered in ``status.appliedResetHash``), not once per generation, so editing the
autoscale settings does not rewind the group again.  Kafka only lets an admin move the committed
offsets of a group without members, so while members are connected the reset waits (and says so).
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from strom_operator.model.specs import ResetOffsets


@dataclasses.dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int | None
    end_offset: int
    lag: int


@dataclasses.dataclass(frozen=True)
class GroupView:
    """The group as the cluster reports it; ``partitions``: of the spec's topics, in total."""

    state: str
    members: int
    lags: tuple[PartitionLag, ...]
    partitions: int

    @property
    def is_empty(self) -> bool:
        return self.members == 0 and self.state in ("Empty", "Dead", "")


def lag_status(view: GroupView, topics: Iterable[str]) -> dict[str, Any]:
    """``status`` fields: state, members, per-partition lag (the spec's topics only), total."""
    wanted = set(topics)
    rows = sorted((r for r in view.lags if r.topic in wanted), key=lambda r: (r.topic, r.partition))
    out_rows: list[dict[str, Any]] = []
    for r in rows:
        row: dict[str, Any] = {
            "topic": r.topic,
            "partition": r.partition,
            "endOffset": r.end_offset,
            "lag": r.lag,
        }
        if r.committed is not None:
            row["committedOffset"] = r.committed
        out_rows.append(row)
    return {
        "state": view.state or "Unknown",
        "members": view.members,
        "partitionLag": out_rows,
        "totalLag": sum(r.lag for r in rows),
    }


def reset_hash(reset: ResetOffsets) -> str:
    """A stable fingerprint of the resetOffsets block (what "a change" means)."""
    raw = json.dumps(dataclasses.asdict(reset), sort_keys=True, default=str)
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


ResetStep = Literal["None", "Apply", "WaitForEmptyGroup", "Done"]


@dataclasses.dataclass(frozen=True)
class ResetDecision:
    step: ResetStep
    message: str
    hash: str | None = None


def reset_decision(
    reset: ResetOffsets | None, applied_hash: str | None, view: GroupView
) -> ResetDecision:
    if reset is None:
        return ResetDecision("None", "no resetOffsets requested")
    digest = reset_hash(reset)
    if digest == applied_hash:
        return ResetDecision("Done", f"offsets were reset to {describe_reset(reset)}", digest)
    if not view.is_empty:
        return ResetDecision(
            "WaitForEmptyGroup",
            f"waiting to reset offsets to {describe_reset(reset)}: the group has "
            f"{view.members} member(s) (state {view.state}); stop the consumers to apply it",
            digest,
        )
    return ResetDecision("Apply", f"resetting offsets to {describe_reset(reset)}", digest)


def describe_reset(reset: ResetOffsets) -> str:
    if reset.to == "timestamp":
        return f"timestamp {reset.timestamp}"
    if reset.to == "offset":
        return f"offset {reset.offset}"
    return reset.to


def reset_target(reset: ResetOffsets) -> tuple[str, int]:
    """``(kind, value)`` of ``strom.client.OffsetReset``: earliest, latest, offset N, datetime."""
    if reset.to == "offset":
        return ("offset", int(reset.offset or 0))
    if reset.to == "timestamp":
        assert reset.timestamp is not None
        text = reset.timestamp.replace("Z", "+00:00")
        moment = datetime.datetime.fromisoformat(text)
        return ("datetime", int(moment.timestamp() * 1000))
    return (reset.to, 0)


def reset_topics(reset: ResetOffsets, topics: Sequence[str]) -> list[str]:
    return sorted(reset.topics or topics)


def seconds_since(stamp: str | None, now: datetime.datetime) -> float | None:
    """Seconds from an RFC 3339 ``stamp`` (as the status stores it) to ``now``; None if unset."""
    if not stamp:
        return None
    try:
        then = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (now - then).total_seconds()
