"""Assignors: Kafka's documented examples, and sticky balance / stability properties."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.client.assignors import (
    ASSIGNORS,
    Assignment,
    MemberSubscription,
    cooperative_sticky_assign,
    partitions_revoked,
    range_assign,
    roundrobin_assign,
    sticky_assign,
)


def members(*ids: str, topics: tuple[str, ...] = ("t0", "t1")) -> list[MemberSubscription]:
    return [MemberSubscription(i, topics) for i in ids]


def test_range_kafka_example_two_members_two_topics_three_partitions() -> None:
    result = range_assign(members("C0", "C1"), {"t0": 3, "t1": 3})
    assert result == {
        "C0": [("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1)],
        "C1": [("t0", 2), ("t1", 2)],
    }


def test_range_orders_static_members_first_by_instance_id() -> None:
    ms = [
        MemberSubscription("a", ("t",)),
        MemberSubscription("z", ("t",), group_instance_id="i1"),
    ]
    assert range_assign(ms, {"t": 3}) == {"z": [("t", 0), ("t", 1)], "a": [("t", 2)]}


def test_roundrobin_kafka_example_same_subscriptions() -> None:
    result = roundrobin_assign(members("C0", "C1"), {"t0": 3, "t1": 3})
    assert result == {
        "C0": [("t0", 0), ("t0", 2), ("t1", 1)],
        "C1": [("t0", 1), ("t1", 0), ("t1", 2)],
    }


def test_roundrobin_kafka_example_different_subscriptions() -> None:
    ms = [
        MemberSubscription("C0", ("t0",)),
        MemberSubscription("C1", ("t0", "t1")),
        MemberSubscription("C2", ("t0", "t1", "t2")),
    ]
    result = roundrobin_assign(ms, {"t0": 1, "t1": 2, "t2": 3})
    assert result == {
        "C0": [("t0", 0)],
        "C1": [("t1", 0)],
        "C2": [("t1", 1), ("t2", 0), ("t2", 1), ("t2", 2)],
    }


@pytest.mark.parametrize("name", ["range", "roundrobin", "cooperative-sticky", "sticky"])
def test_three_consumers_on_six_partitions_each_get_two(name: str) -> None:
    result = ASSIGNORS[name](members("a", "b", "c", topics=("t",)), {"t": 6})
    assert sorted(len(v) for v in result.values()) == [2, 2, 2]
    assert sorted(tp for v in result.values() for tp in v) == [("t", p) for p in range(6)]


@pytest.mark.parametrize("name", ["range", "roundrobin", "cooperative-sticky"])
def test_more_members_than_partitions_leaves_extras_idle(name: str) -> None:
    result = ASSIGNORS[name](members("a", "b", "c", "d", topics=("t",)), {"t": 2})
    assert set(result) == {"a", "b", "c", "d"}
    assert sorted(len(v) for v in result.values()) == [0, 0, 1, 1]


def test_unknown_topic_is_skipped() -> None:
    assert range_assign(members("a", topics=("missing",)), {}) == {"a": []}
    assert roundrobin_assign(members("a", topics=("missing",)), {}) == {"a": []}
    assert sticky_assign(members("a", topics=("missing",)), {}) == {"a": []}


def _check_complete_and_balanced(result: Assignment, counts: dict[str, int]) -> None:
    every = Counter(tp for tps in result.values() for tp in tps)
    assert set(every) == {(t, p) for t, n in counts.items() for p in range(n)}
    assert all(c == 1 for c in every.values())
    sizes = [len(v) for v in result.values()]
    assert max(sizes) - min(sizes) <= 1


def _with_owned(
    ids: list[str], topics: tuple[str, ...], prev: Assignment, gen: int
) -> list[MemberSubscription]:
    return [
        MemberSubscription(i, topics, owned_partitions=tuple(prev.get(i, ())), generation=gen)
        for i in ids
    ]


topic_counts = st.dictionaries(
    st.sampled_from(["a", "b", "c"]), st.integers(min_value=1, max_value=12), min_size=1
)


@settings(max_examples=60, deadline=None)
@given(counts=topic_counts, n=st.integers(min_value=1, max_value=8))
def test_sticky_assigns_every_partition_once_balanced_within_one(
    counts: dict[str, int], n: int
) -> None:
    ids = [f"m{i}" for i in range(n)]
    result = sticky_assign(_with_owned(ids, tuple(counts), {}, -1), counts)
    _check_complete_and_balanced(result, counts)


@settings(max_examples=60, deadline=None)
@given(counts=topic_counts, n=st.integers(min_value=1, max_value=8))
def test_sticky_join_moves_only_what_the_newcomer_needs(counts: dict[str, int], n: int) -> None:
    topics = tuple(counts)
    ids = [f"m{i}" for i in range(n)]
    before = sticky_assign(_with_owned(ids, topics, {}, -1), counts)
    after = sticky_assign(_with_owned([*ids, "new"], topics, before, 1), counts)
    _check_complete_and_balanced(after, counts)
    for i in ids:
        assert set(after[i]) <= set(before[i])  # old members only give partitions up
    moved = sum(len(set(before[i]) - set(after[i])) for i in ids)
    assert moved == len(after["new"])
    total = sum(counts.values())
    assert len(after["new"]) == total // (n + 1)  # the newcomer takes the floor share, no more


@settings(max_examples=60, deadline=None)
@given(counts=topic_counts, n=st.integers(min_value=2, max_value=8))
def test_sticky_leave_keeps_everyone_elses_partitions(counts: dict[str, int], n: int) -> None:
    topics = tuple(counts)
    ids = [f"m{i}" for i in range(n)]
    before = sticky_assign(_with_owned(ids, topics, {}, -1), counts)
    survivors = ids[1:]
    after = sticky_assign(_with_owned(survivors, topics, before, 1), counts)
    _check_complete_and_balanced(after, counts)
    for i in survivors:
        assert set(before[i]) <= set(after[i])


def test_sticky_conflicting_claims_go_to_the_newest_generation() -> None:
    ms = [
        MemberSubscription("a", ("t",), owned_partitions=(("t", 0),), generation=1),
        MemberSubscription("b", ("t",), owned_partitions=(("t", 0),), generation=2),
    ]
    assert sticky_assign(ms, {"t": 2}) == {"a": [("t", 1)], "b": [("t", 0)]}


def test_cooperative_two_phase_revocation_when_a_member_joins() -> None:
    counts = {"t": 6}
    first = cooperative_sticky_assign(_with_owned(["a", "b"], ("t",), {}, -1), counts)
    assert sorted(len(v) for v in first.values()) == [3, 3]

    # Phase 1: c joins. Nothing a or b owns is given to c yet; they only revoke.
    ms1 = _with_owned(["a", "b", "c"], ("t",), first, 1)
    phase1 = cooperative_sticky_assign(ms1, counts)
    assert phase1["c"] == []
    revoked = partitions_revoked(ms1, phase1)
    assert sum(len(v) for v in revoked.values()) == 2
    for member_id in ("a", "b"):
        assert set(phase1[member_id]) <= set(first[member_id])
    assert Counter(len(v) for v in phase1.values()) == Counter({2: 2, 0: 1})

    # Phase 2: the follow-up rebalance; revoked partitions are unowned and go to c.
    ms2 = _with_owned(["a", "b", "c"], ("t",), phase1, 2)
    phase2 = cooperative_sticky_assign(ms2, counts)
    assert sorted(phase2["c"]) == sorted(tp for v in revoked.values() for tp in v)
    assert partitions_revoked(ms2, phase2) == {}
    _check_complete_and_balanced(phase2, counts)


def test_cooperative_gives_a_departed_members_partitions_out_at_once() -> None:
    counts = {"t": 6}
    first = cooperative_sticky_assign(_with_owned(["a", "b", "c"], ("t",), {}, -1), counts)
    after = cooperative_sticky_assign(_with_owned(["a", "b"], ("t",), first, 1), counts)
    _check_complete_and_balanced(after, counts)  # nothing owned by a survivor moved


def test_sticky_kafka_javadoc_example_same_subscriptions() -> None:
    """StickyAssignor javadoc: C0..C2 on t0..t3 x 2 partitions, then C1 leaves."""
    counts = {"t0": 2, "t1": 2, "t2": 2, "t3": 2}
    topics = tuple(counts)
    first = sticky_assign(_with_owned(["C0", "C1", "C2"], topics, {}, -1), counts)
    assert first == {
        "C0": [("t0", 0), ("t1", 1), ("t3", 0)],
        "C1": [("t0", 1), ("t2", 0), ("t3", 1)],
        "C2": [("t1", 0), ("t2", 1)],
    }
    after = sticky_assign(_with_owned(["C0", "C2"], topics, first, 1), counts)
    assert after == {
        "C0": [("t0", 0), ("t1", 1), ("t2", 0), ("t3", 0)],
        "C2": [("t0", 1), ("t1", 0), ("t2", 1), ("t3", 1)],
    }


def test_sticky_kafka_javadoc_example_different_subscriptions() -> None:
    """StickyAssignor javadoc: C0 on t0, C1 on t0-t1, C2 on t0-t2; then C0 leaves."""
    counts = {"t0": 1, "t1": 2, "t2": 3}
    subs = {"C0": ("t0",), "C1": ("t0", "t1"), "C2": ("t0", "t1", "t2")}
    first = sticky_assign([MemberSubscription(m, t) for m, t in subs.items()], counts)
    assert first == {
        "C0": [("t0", 0)],
        "C1": [("t1", 0), ("t1", 1)],
        "C2": [("t2", 0), ("t2", 1), ("t2", 2)],
    }
    survivors = [
        MemberSubscription(m, subs[m], owned_partitions=tuple(first[m]), generation=1)
        for m in ("C1", "C2")
    ]
    assert sticky_assign(survivors, counts) == {
        "C1": [("t0", 0), ("t1", 0), ("t1", 1)],
        "C2": [("t2", 0), ("t2", 1), ("t2", 2)],
    }
