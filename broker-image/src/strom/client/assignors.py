"""Partition assignors: who in a group reads which partition.

Kafka clients run the assignor on the group leader (the coordinator only relays the result), and
every client in a group must agree on the algorithm by name, so these are Kafka's own algorithms
with Kafka's orderings, not look-alikes: a Strom consumer and an operator computing "what would the
assignment be" must get the same answer.

- ``range``: per topic, members sorted (static members first by ``group.instance.id``, then dynamic
  members by member id, as Kafka's ``MemberInfo`` orders them), partitions split into contiguous
  ranges, the first ``n % m`` members getting one extra.
- ``roundrobin``: every subscribed topic-partition sorted by (topic, partition), dealt
  round-robin to the sorted members, skipping members not subscribed to the partition's topic.
- ``cooperative-sticky``: each member keeps the partitions it owned in the previous generation when
  they are still valid, the rest are balanced to within one (when subscriptions allow), and -- the
  point of KIP-429 -- a partition that moves from A to B is *not* given to B in the same generation:
  A first revokes it, rejoins, and B gets it in the follow-up rebalance. No member ever stops
  consuming a partition it keeps.

More members than partitions leaves the extras with an empty list. All functions are pure and
deterministic: the same input always gives the same output.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

TopicPartition = tuple[str, int]
Assignment = dict[str, list[TopicPartition]]


@dataclass(frozen=True)
class MemberSubscription:
    """One member's input to an assignor, as carried in its JoinGroup subscription."""

    member_id: str
    topics: tuple[str, ...]
    group_instance_id: str | None = None
    owned_partitions: tuple[TopicPartition, ...] = ()
    # The generation in which ``owned_partitions`` were owned; resolves conflicting claims.
    generation: int = -1


def member_sort_key(member: MemberSubscription) -> tuple[int, str]:
    """Kafka's ``MemberInfo.compareTo``: static members by instance id first, then member id."""
    if member.group_instance_id is not None:
        return (0, member.group_instance_id)
    return (1, member.member_id)


def _sorted_members(members: Iterable[MemberSubscription]) -> list[MemberSubscription]:
    return sorted(members, key=member_sort_key)


def range_assign(
    members: Sequence[MemberSubscription], partitions_per_topic: Mapping[str, int]
) -> Assignment:
    """Kafka's RangeAssignor (per topic, contiguous ranges, first ``n % m`` get one extra)."""
    result: Assignment = {m.member_id: [] for m in members}
    topics = sorted({t for m in members for t in m.topics})
    for topic in topics:
        n = partitions_per_topic.get(topic)
        if n is None:
            continue
        consumers = _sorted_members(m for m in members if topic in m.topics)
        per, extra = divmod(n, len(consumers))
        for i, member in enumerate(consumers):
            start = per * i + min(i, extra)
            length = per + (1 if i < extra else 0)
            result[member.member_id].extend((topic, p) for p in range(start, start + length))
    return result


def roundrobin_assign(
    members: Sequence[MemberSubscription], partitions_per_topic: Mapping[str, int]
) -> Assignment:
    """Kafka's RoundRobinAssignor: partitions sorted, members in a circle, skip unsubscribed."""
    result: Assignment = {m.member_id: [] for m in members}
    ordered = _sorted_members(members)
    if not ordered:
        return result
    topics = sorted({t for m in members for t in m.topics if t in partitions_per_topic})
    cursor = 0
    for topic in topics:
        for partition in range(partitions_per_topic[topic]):
            while topic not in ordered[cursor % len(ordered)].topics:
                cursor += 1
            result[ordered[cursor % len(ordered)].member_id].append((topic, partition))
            cursor += 1
    return result


def _valid_previous_owners(
    members: Sequence[MemberSubscription], partitions_per_topic: Mapping[str, int]
) -> dict[TopicPartition, str]:
    """Who validly owns what: the partition exists, the owner still subscribes to its topic, and
    no other member claims it with a newer generation (equal claims cancel out, as in Kafka)."""
    claims: dict[TopicPartition, list[tuple[int, str]]] = {}
    for m in members:
        for tp in m.owned_partitions:
            topic, partition = tp
            if topic not in m.topics or not 0 <= partition < partitions_per_topic.get(topic, 0):
                continue
            claims.setdefault(tp, []).append((m.generation, m.member_id))
    owners: dict[TopicPartition, str] = {}
    for tp, claimants in claims.items():
        claimants.sort(reverse=True)
        if len(claimants) > 1 and claimants[0][0] == claimants[1][0]:
            continue
        owners[tp] = claimants[0][1]
    return owners


def sticky_assign(
    members: Sequence[MemberSubscription], partitions_per_topic: Mapping[str, int]
) -> Assignment:
    """The sticky target assignment: keep valid ownership, then balance with the fewest moves.

    Unowned partitions go, hardest first (fewest eligible members), to the least-loaded eligible
    member; then partitions move from the most- to the least-loaded eligible member while the gap
    is more than one. With identical subscriptions this ends balanced within one, and every move is
    one a balanced result needs, so movement is minimal.
    """
    by_id = {m.member_id: m for m in members}
    key = {m.member_id: member_sort_key(m) for m in members}
    result: Assignment = {m.member_id: [] for m in members}
    if not members:
        return result
    all_partitions = sorted(
        (t, p)
        for t in {t for m in members for t in m.topics if t in partitions_per_topic}
        for p in range(partitions_per_topic[t])
    )
    eligible = {
        tp: sorted((m.member_id for m in members if tp[0] in m.topics), key=key.__getitem__)
        for tp in all_partitions
    }
    owners = _valid_previous_owners(members, partitions_per_topic)
    for tp, owner in sorted(owners.items()):
        result[owner].append(tp)

    def load(member_id: str) -> tuple[int, tuple[int, str]]:
        return (len(result[member_id]), key[member_id])

    unowned = [tp for tp in all_partitions if tp not in owners]
    unowned.sort(key=lambda tp: (len(eligible[tp]), tp))
    for tp in unowned:
        result[min(eligible[tp], key=load)].append(tp)

    moved = True
    while moved:
        moved = False
        for donor in sorted(result, key=load, reverse=True):
            # Give away partitions the donor did not own before first, newest ranges last.
            previously = set(by_id[donor].owned_partitions)
            for tp in sorted(result[donor], key=lambda tp: (tp in previously, tp)):
                target = min(eligible[tp], key=load)
                if len(result[donor]) - len(result[target]) > 1:
                    result[donor].remove(tp)
                    result[target].append(tp)
                    moved = True
                    break
            if moved:
                break
    for assigned in result.values():
        assigned.sort()
    return result


def cooperative_sticky_assign(
    members: Sequence[MemberSubscription], partitions_per_topic: Mapping[str, int]
) -> Assignment:
    """Kafka's CooperativeStickyAssignor: the sticky target minus partitions changing owner.

    A partition whose valid previous owner differs from its target owner is left out of this
    generation entirely; its old owner sees it missing from its assignment, revokes it, and rejoins,
    and the follow-up rebalance (where nobody owns it) gives it to the target.
    """
    target = sticky_assign(members, partitions_per_topic)
    owners = _valid_previous_owners(members, partitions_per_topic)
    return {
        member_id: [tp for tp in tps if owners.get(tp, member_id) == member_id]
        for member_id, tps in target.items()
    }


def partitions_revoked(
    members: Sequence[MemberSubscription], assignment: Mapping[str, Sequence[TopicPartition]]
) -> dict[str, list[TopicPartition]]:
    """Per member, the partitions it owned that the new assignment no longer gives it.

    Under the cooperative protocol a non-empty result for anyone means a follow-up rebalance is
    needed (Kafka's consumer rejoins after revoking).
    """
    revoked: dict[str, list[TopicPartition]] = {}
    for m in members:
        kept = set(assignment.get(m.member_id, ()))
        gone = sorted(tp for tp in m.owned_partitions if tp not in kept)
        if gone:
            revoked[m.member_id] = gone
    return revoked


Assignor = Callable[[Sequence[MemberSubscription], Mapping[str, int]], Assignment]

ASSIGNORS: dict[str, Assignor] = {
    "range": range_assign,
    "roundrobin": roundrobin_assign,
    "cooperative-sticky": cooperative_sticky_assign,
    "sticky": sticky_assign,
}
"""Assignors by the protocol name Kafka clients use in JoinGroup."""

COOPERATIVE = frozenset({"cooperative-sticky"})
"""Protocols that use the two-phase (incremental) rebalance of KIP-429."""
