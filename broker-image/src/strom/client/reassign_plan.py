"""Pure reassignment planning: the ``kafka-reassign-partitions --generate`` of Strom.

Given where partitions live now and the brokers they should live on, propose new replica lists.
Moving a replica copies its whole log, so the plan moves as few replicas as it can: a replica on
a broker that stays is kept unless that broker would then hold more than its even share
(``replicas // brokers``, one more on ``replicas % brokers`` of them). Added replicas go to the
least-loaded broker, preferring racks the partition does not use yet (rack-aware when racks are
known), and the preferred leader (the first replica) is the current one when it stays and
leaders are still balanced, else the replica leading the fewest partitions so far. Kept
replicas on one rack are not moved just to fix rack spread: the operator
asked for a broker change, not a rack rebalance.

No I/O: the CLI reads the cluster, calls :func:`plan_reassignment`, prints :func:`plan_to_json`;
``execute`` reads the file back with :func:`parse_plan`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from strom.protocol.errors import ErrorCode, StromError

PartitionKey = tuple[str, int]
Assignment = dict[PartitionKey, list[int]]

PLAN_VERSION = 1


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
    rf = {k: replication_factor or len(current[k]) for k in keys}
    for k in keys:
        if rf[k] > len(targets):
            raise _invalid(f"{k[0]}-{k[1]} needs {rf[k]} replicas but only {len(targets)} "
                           f"broker(s) were given ({_ids(targets)}); add brokers or lower the "
                           "replication factor")
    load = _Loads(targets, sum(rf.values()))

    # 1. keep what may stay (minimal movement), without exceeding any broker's even share;
    #    position by position (all leaders first), so the replicas that must go come from
    #    different partitions and no partition loses all of its copies to a full broker
    kept: dict[PartitionKey, list[int]] = {k: [] for k in keys}
    olds = {k: list(dict.fromkeys(current[k])) for k in keys}
    for position in range(max((len(v) for v in olds.values()), default=0)):
        for k in keys:
            if position >= len(olds[k]):
                continue
            b = olds[k][position]
            if b in load.count and len(kept[k]) < rf[k] and load.has_room(b):
                kept[k].append(b)
                load.add(b)

    # 2. fill the missing slots: new rack first, then the least-loaded broker, spread by index
    chosen: Assignment = {}
    for index, k in enumerate(keys):
        replicas = list(kept[k])
        while len(replicas) < rf[k]:
            b = _pick(targets, replicas, load, rack_of, index)
            replicas.append(b)
            load.add(b)
        chosen[k] = replicas

    # 3. preferred leaders: keep the current one while balanced, else the least-leading replica
    leader_cap = math.ceil(len(keys) / len(targets)) if keys else 0
    leads = dict.fromkeys(targets, 0)
    out: Assignment = {}
    pending: list[PartitionKey] = []
    for k in keys:
        old_leader = current[k][0] if current[k] else None
        if old_leader in chosen[k] and leads[old_leader] < leader_cap:
            out[k] = _leader_first(chosen[k], old_leader)
            leads[old_leader] += 1
        else:
            pending.append(k)
    for k in pending:
        leader = min(chosen[k], key=lambda b: (leads[b], load.count[b], b))
        out[k] = _leader_first(chosen[k], leader)
        leads[leader] += 1
    return {k: out[k] for k in keys}


class _Loads:
    """Replicas per broker, capped at an even share: ``total // n`` each, and one more for only
    ``total % n`` of them (so loads never differ by more than one when the caps can be met)."""

    def __init__(self, brokers: Sequence[int], total: int) -> None:
        self.count = dict.fromkeys(brokers, 0)
        self.floor, self.extra_slots = divmod(total, len(brokers))
        self.extra: set[int] = set()

    def has_room(self, b: int) -> bool:
        n = self.count[b]
        if n < self.floor:
            return True
        return n == self.floor and b not in self.extra and len(self.extra) < self.extra_slots

    def add(self, b: int) -> None:
        if self.count[b] >= self.floor:
            self.extra.add(b)
        self.count[b] += 1


def _pick(targets: Sequence[int], replicas: Sequence[int], load: _Loads,
          rack_of: Mapping[int, str | None], index: int) -> int:
    used_racks = {rack_of.get(b) for b in replicas} - {None}
    free = [b for b in targets if b not in replicas]
    n = len(targets)

    def score(b: int) -> tuple[int, int, int, int]:
        over = 0 if load.has_room(b) else 1
        same_rack = 1 if rack_of.get(b) is not None and rack_of[b] in used_racks else 0
        return (over, same_rack, load.count[b], (targets.index(b) - index) % n)

    return min(free, key=score)


def _leader_first(replicas: Sequence[int], leader: int) -> list[int]:
    return [leader, *(b for b in replicas if b != leader)]


#: The group coordinator's internal topic (``strom.groups.offsets.OFFSETS_TOPIC``; the client
#: layer cannot import the broker's groups package).
OFFSETS_TOPIC = "__consumer_offsets"


def raise_replication(current: Mapping[PartitionKey, Sequence[int]], brokers: Iterable[int],
                      replication_factor: int) -> Assignment:
    """New replica lists for the partitions of ``current`` with fewer than
    ``replication_factor`` replicas (capped at the brokers given); {} when none has.

    How an internal topic created small (``__consumer_offsets`` at RF 1 on a one-broker cluster)
    gets its replication raised once brokers are added: a reassignment to larger replica lists
    (Kafka's way too: ``kafka-reassign-partitions --execute`` with a plan naming more replicas),
    planned by :func:`plan_reassignment` (current replicas kept up to each broker's even share,
    new ones on the least-loaded brokers). ``strom dev up`` and the operator run it after a
    scale-out.
    """
    targets = sorted(set(brokers))
    rf = min(replication_factor, len(targets))
    low = {k: list(v) for k, v in current.items() if len(v) < rf}
    if not low:
        return {}
    return plan_reassignment(low, targets, replication_factor=rf)


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
