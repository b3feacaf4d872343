"""Pure rendering for ``strom reassign`` and ``strom leader``: plain data in, text out."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from strom.cli.output import format_table


def ids(values: Iterable[int]) -> str:
    return ",".join(str(v) for v in values)


def partitions(keys: Iterable[tuple[str, int]]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in keys)


def reassignment_data(r: Any) -> dict[str, Any]:
    """A ``PartitionReassignment`` as plain data (lower-case keys for -o json|yaml)."""
    return {
        "topic": r.topic, "partition": r.partition, "replicas": list(r.replicas),
        "adding": list(r.adding), "removing": list(r.removing), "isr": list(r.isr),
        "leader": r.leader, "leader_log_end_offset": r.leader_log_end_offset,
        "progress": {str(b): off for b, off in sorted(r.progress.items())},
        "percent_done": r.percent_done,
        "offsets_behind": {str(b): n for b, n in sorted(r.offsets_behind.items())},
    }


def results_data(results: Mapping[tuple[str, int], Any]) -> list[dict[str, Any]]:
    """Per-partition results (``None`` or an error) as rows, sorted by topic and partition."""
    return [{"topic": t, "partition": p,
             "error": None if err is None else f"{err.code.name}: {err.message}"}
            for (t, p), err in sorted(results.items())]


def plan_progress(plan: Mapping[tuple[str, int], Sequence[int]],
                  current: Mapping[tuple[str, int], Sequence[int]],
                  in_flight: set[tuple[str, int]]) -> list[dict[str, Any]]:
    """Per plan partition: done once nothing moves and the replica set is the target's.

    The order of replicas is not compared: only a preferred-leader election changes it, and
    ``strom leader elect`` is the tool for that.
    """
    out = []
    for key in sorted(plan):
        now = list(current.get(key, []))
        done = key not in in_flight and sorted(now) == sorted(plan[key])
        out.append({"topic": key[0], "partition": key[1], "target": list(plan[key]),
                    "replicas": now, "done": done})
    return out


def _percent(value: float | None) -> str:
    return "?" if value is None else f"{value:.1f}%"


def status_table(data: Mapping[str, Any]) -> str:
    moving = data["reassignments"]
    parts: list[str] = []
    if moving:
        rows = [[r["topic"], r["partition"], r["replicas"], r["adding"], r["removing"], r["isr"],
                 r["leader"], _percent(r["percent_done"]),
                 sum(r["offsets_behind"].values()) if r["offsets_behind"] else None]
                for r in moving]
        parts.append(format_table(("TOPIC", "PARTITION", "REPLICAS", "ADDING", "REMOVING", "ISR",
                                   "LEADER", "PROGRESS", "BEHIND"), rows))
    else:
        parts.append("No reassignment in progress.")
    throttle = data.get("throttle_bytes_per_sec")
    if data.get("throttle_removed"):
        parts.append(f"Replication throttle removed (was {throttle} bytes/s).")
    elif throttle:
        parts.append(f"Replication throttle: {throttle} bytes/s.")
    plan = data.get("plan")
    if plan is not None:
        done = sum(1 for p in plan if p["done"])
        pending = [p for p in plan if not p["done"]]
        parts.append(f"Plan: {done} of {len(plan)} partition(s) on their target replicas"
                     + ("." if not pending else ": waiting for "
                        + partitions((p["topic"], p["partition"]) for p in pending[:10])
                        + (" ..." if len(pending) > 10 else "")))
    return "\n".join(parts)


def results_table(rows: Sequence[Mapping[str, Any]], summary: str) -> str:
    failed = [r for r in rows if r["error"]]
    if not failed:
        return summary + "."
    table = format_table(("TOPIC", "PARTITION", "ERROR"),
                         [[r["topic"], r["partition"], r["error"]] for r in failed])
    return f"{table}\n{summary}."
