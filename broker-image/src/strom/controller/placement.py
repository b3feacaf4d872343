"""Where the replicas of new partitions go: Kafka's rack-aware round-robin assignment.

Why it exists: leaders and replicas must spread evenly over brokers and racks so no broker carries
more than its share and losing one rack never loses every replica of a partition. This is a pure
function over the live (unfenced) brokers, used by the controller for CreateTopic and
CreatePartitions and by the operator's rebalance planner.

The algorithm is Kafka's ``AdminUtils.assignReplicasToBrokers``: brokers are ordered so that racks
alternate (rack A's first broker, rack B's first, rack C's first, rack A's second, ...); partition
``p``'s leader is broker ``(start + p) mod n`` of that list, and its followers are taken at a
shifting distance from the leader, the shift growing by one every ``n`` partitions so the follower
sets differ too. With racks, a follower is skipped while its rack already holds a replica of the
partition and an unused rack remains. Brokers without a rack form one rack of their own.
"""

from __future__ import annotations

from collections.abc import Mapping

from strom.protocol.errors import ErrorCode, StromError

__all__ = ["assign_replicas", "rack_alternated"]


def rack_alternated(racks: Mapping[int, str | None]) -> list[int]:
    """Broker ids ordered so that consecutive brokers are on different racks where possible."""
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(racks):
        by_rack.setdefault(racks[broker] or "", []).append(broker)
    columns = [by_rack[r] for r in sorted(by_rack)]
    out: list[int] = []
    for k in range(max((len(c) for c in columns), default=0)):
        out.extend(c[k] for c in columns if k < len(c))
    return out


def _replica_index(first: int, shift: int, k: int, n: int) -> int:
    return (first + 1 + (shift + k) % (n - 1)) % n


def assign_replicas(
    partitions: int,
    replication_factor: int,
    racks: Mapping[int, str | None],
    *,
    start_index: int = 0,
    first_partition: int = 0,
) -> list[list[int]]:
    """Replica lists (leader first) for ``partitions`` partitions over the brokers in ``racks``.

    ``racks`` maps each live (unfenced) broker to its rack (or None). ``start_index`` rotates the
    whole layout - pass a random one per topic so that leaders of many topics do not all start on
    the same broker, as Kafka does. ``first_partition`` continues an existing layout (for
    CreatePartitions).
    """
    n = len(racks)
    if partitions <= 0:
        raise StromError(ErrorCode.INVALID_PARTITIONS, f"partitions must be > 0, got {partitions}")
    if replication_factor <= 0:
        raise StromError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"replication factor must be > 0, got {replication_factor}",
        )
    if replication_factor > n:
        raise StromError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"replication factor {replication_factor} is larger than the number of live "
            f"(unfenced) brokers, {n}: {sorted(racks)}",
        )
    brokers = rack_alternated(racks)
    rack_of = {b: racks[b] or "" for b in brokers}
    num_racks = len(set(rack_of.values()))
    start = start_index % n
    out: list[list[int]] = []
    for p in range(first_partition, first_partition + partitions):
        shift = start + p // n
        first = (p + start) % n
        leader = brokers[first]
        replicas = [leader]
        used_racks = {rack_of[leader]}
        k = 0
        while len(replicas) < replication_factor:
            # Skip a broker whose rack already has a replica until every rack has one.
            broker = brokers[_replica_index(first, shift * num_racks, k, n)]
            k += 1
            if broker in replicas:
                continue
            if rack_of[broker] in used_racks and len(used_racks) < num_racks:
                continue
            replicas.append(broker)
            used_racks.add(rack_of[broker])
        out.append(replicas)
    return out
