"""Pure reassignment planning: the ``kafka-reassign-partitions --generate`` of Strom.

Given where partitions live now and the brokers they should live on, propose new replica lists.
The planning is the one planner the operator uses too (:mod:`strom.model.reassign`): the
replication factor is changed first where asked (replicas added rack-aware on the least-loaded
brokers, or dropped from the end, never the leader), then replicas on brokers that are not in the
new set are drained and the rest balanced with the fewest moves (moving a replica copies its
whole log), never lowering the racks a partition spans; last, preferred leaders are spread evenly,
keeping a partition's current leader where it may stay.

No I/O: the CLI reads the cluster, calls :func:`plan_reassignment`, prints :func:`plan_to_json`;
``execute`` reads the file back with :func:`parse_plan`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from strom.model.reassign import (
    OFFSETS_TOPIC,
    PlanError,
    balance_leaders,
    loads,
    new_replicas_for_rf,
    plan,
)
from strom.model.reassign import raise_replication as model_raise_replication
from strom.protocol.errors import ErrorCode, StromError

PartitionKey = tuple[str, int]
Assignment = dict[PartitionKey, list[int]]

PLAN_VERSION = 1

__all__ = ["OFFSETS_TOPIC", "parse_plan", "plan_reassignment", "plan_to_json", "raise_replication"]


def _invalid(message: str) -> StromError:
    return StromError(ErrorCode.INVALID_REQUEST, message)


def plan_reassignment(current: Mapping[PartitionKey, Sequence[int]], brokers: Iterable[int],
                      racks: Mapping[int, str | None] | None = None,
                      replication_factor: int | None = None) -> Assignment:
    """New replica lists for every partition of ``current`` on exactly ``brokers``.

    ``replication_factor`` None keeps each partition's current one. Deterministic: the same
    input always gives the same plan.
    """
    targets = sorted(set(brokers))
    if not targets:
        raise _invalid("brokers is empty; name the brokers the partitions should live on")
    if replication_factor is not None and replication_factor < 1:
        raise _invalid(f"replication factor {replication_factor} must be at least 1")
    rack_of = {b: (racks or {}).get(b) for b in targets}
    keys = sorted(current)
    before = {k: list(dict.fromkeys(current[k])) for k in keys}
    for k in keys:
        rf = replication_factor or len(before[k])
        if rf > len(targets):
            raise _invalid(f"{k[0]}-{k[1]} needs {rf} replicas but only {len(targets)} "
                           f"broker(s) were given ({_ids(targets)}); add brokers or lower the "
                           "replication factor")
    try:
        resized = dict(before)
        if replication_factor is not None:
            load = loads(before, targets)
            for k in keys:
                if replication_factor != len(before[k]):
                    resized[k] = new_replicas_for_rf(before[k], replication_factor, rack_of,
                                                     load)
                    for b in set(resized[k]) - set(before[k]):
                        load[b] = load.get(b, 0) + 1
        moved = plan(resized, rack_of).assignment
    except PlanError as err:
        raise _invalid(str(err)) from None
    return balance_leaders(moved, before)


def raise_replication(current: Mapping[PartitionKey, Sequence[int]], brokers: Iterable[int],
                      replication_factor: int) -> Assignment:
    """:func:`strom.model.reassign.raise_replication` over ``brokers`` without racks."""
    return model_raise_replication(current, dict.fromkeys(sorted(set(brokers))),
                                   replication_factor)


def moved_replicas(current: Mapping[PartitionKey, Sequence[int]],
                   proposed: Mapping[PartitionKey, Sequence[int]]) -> int:
    """How many replicas the plan copies to a new broker (the cost of executing it)."""
    return sum(len(set(proposed[k]) - set(current.get(k, ()))) for k in proposed)


def plan_to_json(assignment: Mapping[PartitionKey, Sequence[int]]) -> dict[str, Any]:
    """Kafka's reassignment file: ``{"version":1,"partitions":[{topic,partition,replicas}]}``."""
    return {"version": PLAN_VERSION, "partitions": [
        {"topic": t, "partition": p, "replicas": list(assignment[(t, p)])}
        for t, p in sorted(assignment)]}


def parse_plan(text: str, source: str = "the plan") -> Assignment:
    """Read a reassignment file back; every problem names the entry and the fix."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as err:
        raise _invalid(f"{source} is not JSON ({err}); give the file 'strom reassign plan' "
                       "printed") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("partitions"), list):
        raise _invalid(f'{source} has no "partitions" list; expected {{"version":1,'
                       '"partitions":[{"topic":..,"partition":..,"replicas":[..]}]}')
    if raw.get("version", PLAN_VERSION) != PLAN_VERSION:
        raise _invalid(f"{source} has version {raw.get('version')!r}; only version 1 is known")
    out: Assignment = {}
    for i, entry in enumerate(raw["partitions"]):
        where = f"{source}: partitions[{i}]"
        if not isinstance(entry, dict):
            raise _invalid(f"{where} is not an object with topic, partition and replicas")
        topic, partition, replicas = (entry.get("topic"), entry.get("partition"),
                                      entry.get("replicas"))
        if not isinstance(topic, str) or not topic:
            raise _invalid(f"{where} has no topic name")
        if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
            raise _invalid(f"{where} ({topic}) has no valid partition number")
        if replicas is None:
            raise _invalid(f"{where} ({topic}-{partition}) has no replicas list")
        if (not isinstance(replicas, list) or not replicas
                or not all(isinstance(b, int) and not isinstance(b, bool) and b >= 0
                           for b in replicas)):
            raise _invalid(f"{where} ({topic}-{partition}) replicas must be a non-empty list of "
                           "broker ids")
        if len(set(replicas)) != len(replicas):
            raise _invalid(f"{where} ({topic}-{partition}) lists a broker twice: {replicas}")
        if (topic, partition) in out:
            raise _invalid(f"{where} repeats {topic}-{partition}; list each partition once")
        out[(topic, partition)] = list(replicas)
    return out


def _ids(brokers: Iterable[int]) -> str:
    return ",".join(str(b) for b in brokers)
