"""The controller's decisions over images built through commands: reassignment (KIP-455),
elections, controlled shutdown and fencing, their epoch checks against races, and a property
test that fencing never leaves a fenced leader or an ISR outside the replicas."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.controller.decisions import (
    controlled_shutdown_changes,
    fence_changes,
    imbalanced_partitions,
    leaderless_elections,
    preferred_election,
    reassignment_cancel,
    reassignment_completions,
    reassignment_start,
    shutdown_ready,
    unclean_election,
)
from strom.controller.metadata import (
    NO_LEADER,
    Batch,
    ChangePartition,
    Command,
    CreateTopic,
    Endpoint,
    FenceBroker,
    MetadataError,
    MetadataImage,
    RegisterBroker,
    UnfenceBroker,
)
from strom.controller.placement import assign_replicas
from strom.protocol.errors import ErrorCode


class Log:
    """An image grown by applying commands at increasing offsets, as every replica does."""

    def __init__(self) -> None:
        self.image = MetadataImage()
        self.offset = 0

    def apply(self, *commands: Command) -> None:
        for c in commands:
            self.offset += 1
            self.image.apply(self.offset, c)

    def batch(self, commands: Sequence[Command]) -> list[tuple[int, str]]:
        self.apply(Batch(tuple(commands)))
        return list(self.image.errors)


def _cluster(n: int = 4, racks: bool = False) -> Log:
    log = Log()
    for b in range(n):
        rack = f"r{b % 2}" if racks else None
        log.apply(
            RegisterBroker(b, f"inc-{b}", (Endpoint("PLAINTEXT", "h", 9092 + b),), rack),
            UnfenceBroker(b, f"inc-{b}"),
        )
    return log


def _with_topic(assignments: tuple[tuple[int, ...], ...], n: int = 4) -> Log:
    log = _cluster(n)
    log.apply(CreateTopic("t", "tid", assignments))
    return log


def _code(exc: pytest.ExceptionInfo[MetadataError]) -> ErrorCode:
    return exc.value.code


# ---- reassignment ---------------------------------------------------------------------------


def test_reassignment_start_orders_target_first_and_keeps_the_original() -> None:
    log = _with_topic(((0, 1, 2),))
    change = reassignment_start(log.image, "t", 0, [3, 1, 2])
    assert change.expected_partition_epoch == 0
    assert change.replicas == (3, 1, 2, 0)
    assert change.adding_replicas == (3,) and change.removing_replicas == (0,)
    log.apply(change)
    p = log.image.partition("t", 0)
    assert p.replicas == [3, 1, 2, 0] and p.isr == [0, 1, 2] and p.leader == 0
    assert p.partition_epoch == 1


def test_reassignment_start_validates_the_target() -> None:
    log = _with_topic(((0, 1),))
    for bad in ([], [1, 1], [1, 9]):
        with pytest.raises(MetadataError) as info:
            reassignment_start(log.image, "t", 0, bad)
        assert _code(info) is ErrorCode.INVALID_REPLICA_ASSIGNMENT
        assert "t-0" in info.value.message
    with pytest.raises(MetadataError) as info:
        reassignment_start(log.image, "t", 5, [0])
    assert _code(info) is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_a_replication_factor_change_is_refused_when_not_allowed() -> None:
    """KIP-860: the replica count compared with the target's (the in-flight target's while a
    reassignment moves), Kafka's code and message; broker ids are checked first."""
    log = _with_topic(((0, 1),))
    for target, current in (([0], 2), ([0, 1, 2], 2)):
        with pytest.raises(MetadataError) as info:
            reassignment_start(log.image, "t", 0, target, allow_replication_factor_change=False)
        assert _code(info) is ErrorCode.INVALID_REPLICATION_FACTOR
        assert info.value.message == (
            f"The replication factor is changed from {current} to {len(target)}")
    with pytest.raises(MetadataError) as info:
        reassignment_start(log.image, "t", 0, [0, 9, 1], allow_replication_factor_change=False)
    assert _code(info) is ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert reassignment_start(log.image, "t", 0, [0, 1, 2]).replicas == (0, 1, 2)  # allowed
    log.apply(reassignment_start(log.image, "t", 0, [2, 3],
                                 allow_replication_factor_change=False))
    assert log.image.partition("t", 0).replicas == [2, 3, 0, 1]  # moving: 2 -> 2 replicas
    with pytest.raises(MetadataError) as info:
        reassignment_start(log.image, "t", 0, [3], allow_replication_factor_change=False)
    assert info.value.message == "The replication factor is changed from 2 to 1"
    assert reassignment_start(log.image, "t", 0, [3, 0],
                              allow_replication_factor_change=False).replicas == (3, 0, 1)


def test_a_new_target_replaces_the_one_in_flight_from_the_original_replicas() -> None:
    log = _with_topic(((0, 1),))
    log.apply(reassignment_start(log.image, "t", 0, [2, 3]))
    # replica 2 catches up before the target changes again
    log.apply(ChangePartition("t", 0, isr=(0, 1, 2), expected_partition_epoch=1))
    change = reassignment_start(log.image, "t", 0, [3, 0])
    assert change.replicas == (3, 0, 1)
    assert change.adding_replicas == (3,) and change.removing_replicas == (1,)
    assert change.isr == (0, 1)  # 2 is no longer a replica
    log.apply(change)
    assert log.image.partition("t", 0).replicas == [3, 0, 1]


def test_target_equal_to_current_clears_the_reassignment() -> None:
    log = _with_topic(((0, 1),))
    noop = reassignment_start(log.image, "t", 0, [0, 1])
    assert noop.replicas == (0, 1) and noop.adding_replicas == () == noop.removing_replicas
    log.apply(noop)
    log.apply(reassignment_start(log.image, "t", 0, [2, 1]))
    back = reassignment_start(log.image, "t", 0, [0, 1])
    log.apply(back)
    p = log.image.partition("t", 0)
    assert p.replicas == [0, 1] and p.adding_replicas == [] and p.removing_replicas == []


def test_reassignment_cancel_restores_the_original_replicas() -> None:
    log = _with_topic(((0, 1),))
    with pytest.raises(MetadataError) as info:
        reassignment_cancel(log.image, "t", 0)
    assert _code(info) is ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
    log.apply(reassignment_start(log.image, "t", 0, [2, 3]))
    log.apply(ChangePartition("t", 0, isr=(0, 1, 2), expected_partition_epoch=1))
    # replica 2 caught up and became leader; cancelling must hand leadership back
    log.apply(ChangePartition("t", 0, leader=2, expected_partition_epoch=2))
    change = reassignment_cancel(log.image, "t", 0)
    assert change.replicas == (0, 1) and change.isr == (0, 1) and change.leader == 0
    log.apply(change)
    p = log.image.partition("t", 0)
    assert p.adding_replicas == [] and p.removing_replicas == [] and p.leader == 0


def test_reassignment_completes_only_when_every_added_replica_is_in_sync() -> None:
    log = _with_topic(((0, 1),))
    log.apply(reassignment_start(log.image, "t", 0, [2, 3]))
    assert reassignment_completions(log.image) == []
    log.apply(ChangePartition("t", 0, isr=(0, 1, 2), expected_partition_epoch=1))
    assert reassignment_completions(log.image) == []
    log.apply(ChangePartition("t", 0, isr=(0, 1, 2, 3), expected_partition_epoch=2))
    [done] = reassignment_completions(log.image)
    assert done.replicas == (2, 3) and done.isr == (2, 3) and done.leader == 2
    assert done.expected_partition_epoch == 3
    log.apply(done)
    p = log.image.partition("t", 0)
    assert (p.replicas, p.isr, p.leader, p.leader_epoch) == ([2, 3], [2, 3], 2, 1)
    assert reassignment_completions(log.image) == []


def test_completion_keeps_a_leader_that_stays_and_skips_fenced_candidates() -> None:
    log = _with_topic(((0, 1),))
    log.apply(reassignment_start(log.image, "t", 0, [1, 2]))  # removes 0 only... and adds 2
    log.apply(ChangePartition("t", 0, isr=(0, 1, 2), leader=1, expected_partition_epoch=1))
    [done] = reassignment_completions(log.image)
    assert done.leader == 1 and done.replicas == (1, 2)
    # a shrink-only reassignment whose remaining target replica is fenced: nobody can lead
    log2 = _with_topic(((0, 1),))
    log2.apply(reassignment_start(log2.image, "t", 0, [1]))
    log2.apply(FenceBroker(1))
    assert reassignment_completions(log2.image) == []


def test_a_stale_completion_is_rejected_when_applied() -> None:
    log = _with_topic(((0, 1),))
    log.apply(reassignment_start(log.image, "t", 0, [2, 1]))
    log.apply(ChangePartition("t", 0, isr=(0, 1, 2), expected_partition_epoch=1))
    [done] = reassignment_completions(log.image)
    log.apply(ChangePartition("t", 0, isr=(1, 2), leader=1, expected_partition_epoch=2))
    with pytest.raises(MetadataError) as info:
        log.apply(done)
    assert _code(info) is ErrorCode.INVALID_UPDATE_VERSION
    [again] = reassignment_completions(log.image)  # recomputed from the newer image
    log.apply(again)
    assert log.image.partition("t", 0).replicas == [2, 1]


# ---- elections ------------------------------------------------------------------------------


def test_preferred_election() -> None:
    log = _with_topic(((0, 1, 2),))
    with pytest.raises(MetadataError) as info:
        preferred_election(log.image, "t", 0)
    assert _code(info) is ErrorCode.ELECTION_NOT_NEEDED
    log.batch(fence_changes(log.image, 0))
    assert log.image.partition("t", 0).leader == 1
    assert imbalanced_partitions(log.image) == []
    with pytest.raises(MetadataError) as info:
        preferred_election(log.image, "t", 0)
    assert _code(info) is ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    log.apply(UnfenceBroker(0, "inc-0"))
    with pytest.raises(MetadataError):  # unfenced but not back in the ISR yet
        preferred_election(log.image, "t", 0)
    log.apply(ChangePartition("t", 0, isr=(1, 2, 0), expected_partition_epoch=1))
    assert imbalanced_partitions(log.image) == [("t", 0)]
    change = preferred_election(log.image, "t", 0)
    assert change.leader == 0 and change.expected_partition_epoch == 2
    log.apply(change)
    assert log.image.partition("t", 0).leader == 0
    assert imbalanced_partitions(log.image) == []


def _imbalanced_by_full_scan(image: MetadataImage) -> list[tuple[str, int]]:
    return [(name, index) for name in sorted(image.topics)
            for index, p in sorted(image.topics[name].partitions.items())
            if p.leader != p.replicas[0] and p.replicas[0] in p.isr
            and not image.brokers[p.replicas[0]].fenced]


def test_imbalanced_partitions_from_the_index_match_a_full_scan() -> None:
    log = _with_topic(tuple(assign_replicas(60, 3, {0: None, 1: None, 2: None, 3: None})))
    assert imbalanced_partitions(log.image) == [] == _imbalanced_by_full_scan(log.image)
    log.batch(fence_changes(log.image, 0))
    assert log.image.not_preferred  # broker 0's leaderships moved
    assert imbalanced_partitions(log.image) == [] == _imbalanced_by_full_scan(log.image)
    log.apply(UnfenceBroker(0, "inc-0"))
    for name, index in sorted(log.image.not_preferred)[::2]:  # half of them rejoin the ISR
        p = log.image.partition(name, index)
        log.apply(ChangePartition(name, index, isr=(*p.isr, 0),
                                  expected_partition_epoch=p.partition_epoch))
    found = imbalanced_partitions(log.image)
    assert found and found == _imbalanced_by_full_scan(log.image)
    log.batch([preferred_election(log.image, *tp) for tp in found])
    assert imbalanced_partitions(log.image) == [] == _imbalanced_by_full_scan(log.image)


def test_fencing_moves_leaderships_before_it_shrinks_isrs() -> None:
    log = _with_topic(tuple((1, 0, 2) if p % 2 else (0, 1, 2) for p in range(6)))
    commands = fence_changes(log.image, 0)
    assert isinstance(commands[0], FenceBroker)
    changes = [c for c in commands[1:] if isinstance(c, ChangePartition)]
    assert [c.partition for c in changes] == [0, 2, 4, 1, 3, 5]
    assert all(c.leader == 1 for c in changes[:3])


def test_unclean_election() -> None:
    log = _with_topic(((0, 1, 2),))
    with pytest.raises(MetadataError) as info:
        unclean_election(log.image, "t", 0)
    assert _code(info) is ErrorCode.ELECTION_NOT_NEEDED
    for b in (0, 1, 2):
        log.batch(fence_changes(log.image, b))
    p = log.image.partition("t", 0)
    assert p.leader == NO_LEADER and p.isr == [2]
    with pytest.raises(MetadataError) as info:
        unclean_election(log.image, "t", 0)
    assert _code(info) is ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
    log.apply(UnfenceBroker(1, "inc-1"))
    change = unclean_election(log.image, "t", 0)
    assert change.leader == 1 and change.isr == (1,)
    log.apply(change)
    p = log.image.partition("t", 0)
    assert p.leader == 1 and p.isr == [1]


def test_leaderless_elections_clean_first_unclean_only_when_allowed() -> None:
    log = _cluster(3)
    log.apply(CreateTopic("a", "ida", ((0, 1),)), CreateTopic("b", "idb", ((0, 2),)))
    for b in (1, 0, 2):
        log.batch(fence_changes(log.image, b))
    # a: ISR [0] (last one fenced); b: ISR [2]
    assert leaderless_elections(log.image, lambda t: True) == []
    log.apply(UnfenceBroker(0, "inc-0"), UnfenceBroker(1, "inc-1"))
    # a is cleanly electable (0 is in its ISR); b has only out-of-sync 0 live
    assert [c.topic for c in leaderless_elections(log.image, lambda t: False)] == ["a"]
    changes = leaderless_elections(log.image, lambda t: t == "b")
    assert [(c.topic, c.leader, c.isr) for c in changes] == [("a", 0, None), ("b", 0, (0,))]
    assert log.batch(list(changes)) == []
    assert log.image.partition("a", 0).leader == 0
    assert log.image.partition("b", 0).isr == [0]
    assert leaderless_elections(log.image, lambda t: True) == []


# ---- brokers leaving ------------------------------------------------------------------------


def test_controlled_shutdown_moves_leadership_and_keeps_sole_replicas() -> None:
    log = _with_topic(((0, 1), (1, 0), (0,)), n=2)
    changes = controlled_shutdown_changes(log.image, 0)
    by_partition = {c.partition: c for c in changes}
    assert set(by_partition) == {0, 1}  # partition 2 has no other replica: 0 keeps leading it
    assert by_partition[0].leader == 1 and by_partition[0].isr == (1,)
    assert by_partition[1].leader == 1 and by_partition[1].isr == (1,)
    assert all(c.expected_partition_epoch == 0 for c in changes)
    assert log.batch(list(changes)) == []
    assert controlled_shutdown_changes(log.image, 0) == []
    assert log.image.partition("t", 2).leader == 0


def test_controlled_shutdown_skips_partitions_whose_other_replicas_are_fenced() -> None:
    log = _with_topic(((0, 1),), n=2)
    log.apply(FenceBroker(1))  # fenced without the ISR change (as in a race)
    assert controlled_shutdown_changes(log.image, 0) == []


def test_fence_changes_race_with_an_isr_change() -> None:
    log = _with_topic(((0, 1, 2), (1, 2, 0)))
    commands = fence_changes(log.image, 0)
    assert commands[0] == FenceBroker(0)
    assert len(commands) == 3
    log.apply(ChangePartition("t", 1, isr=(1, 2), expected_partition_epoch=0))  # a leader shrinks
    errors = log.batch(commands)
    assert len(errors) == 1 and "t-1 is at partition epoch 1, not 0" in errors[0][1]
    assert log.image.brokers[0].fenced
    assert log.image.partition("t", 0).leader == 1
    # the controller recomputes: nothing left to change for t-1 (0 already left its ISR)
    assert fence_changes(log.image, 0)[1:] == []


def test_rack_aware_placement_needs_nothing_special() -> None:
    log = _cluster(4, racks=True)
    layout = assign_replicas(4, 2, log.image.live_brokers())
    log.apply(CreateTopic("t", "tid", tuple(tuple(r) for r in layout)))
    log.batch(fence_changes(log.image, 0))  # rack r0 loses a broker
    for index, p in log.image.topics["t"].partitions.items():
        assert p.leader != NO_LEADER and not log.image.brokers[p.leader].fenced
        assert 0 not in p.isr
        assert p.leader == next(r for r in layout[index] if r != 0)


@st.composite
def _clusters(draw: st.DrawFn) -> tuple[Log, list[int]]:
    n = draw(st.integers(1, 5))
    log = _cluster(n)
    rf = draw(st.integers(1, n))
    partitions = draw(st.integers(1, 6))
    assignments = [tuple(draw(st.permutations(range(n)))[:rf]) for _ in range(partitions)]
    log.apply(CreateTopic("t", "tid", tuple(assignments)))
    steps = draw(
        st.lists(
            st.tuples(st.sampled_from(["fence", "unfence", "join"]), st.integers(0, n - 1)),
            max_size=12,
        )
    )
    order: list[int] = []
    for action, b in steps:
        if action == "fence":
            log.batch(fence_changes(log.image, b))
            order.append(b)
        elif action == "unfence":
            log.apply(UnfenceBroker(b, f"inc-{b}"))
        else:  # broker b catches up on every partition it replicates and is live
            for index, p in log.image.topics["t"].partitions.items():
                if b in p.replicas and b not in p.isr and not log.image.brokers[b].fenced:
                    log.apply(
                        ChangePartition(
                            "t", index, isr=(*p.isr, b), expected_partition_epoch=p.partition_epoch
                        )
                    )
            log.batch(leaderless_elections(log.image, lambda t: False))
    return log, order


@settings(max_examples=150, deadline=None)
@given(_clusters(), st.integers(0, 4))
def test_fencing_never_leaves_a_fenced_leader(case: tuple[Log, list[int]], victim: int) -> None:
    log, _ = case
    victim %= len(log.image.brokers)
    log.batch(fence_changes(log.image, victim))
    for p in log.image.topics["t"].partitions.values():
        assert set(p.isr) <= set(p.replicas)
        assert p.leader == NO_LEADER or not log.image.brokers[p.leader].fenced
        assert p.leader == NO_LEADER or p.leader in p.isr
        assert p.isr, "the last in-sync replica stays in the ISR"


def test_shutdown_ready_ignores_partitions_nobody_else_can_lead() -> None:
    log = _with_topic(((0, 1), (0,)), n=2)
    assert not shutdown_ready(log.image, 0)
    assert shutdown_ready(log.image, 1)
    log.batch(controlled_shutdown_changes(log.image, 0))
    assert shutdown_ready(log.image, 0)
    assert log.image.partition("t", 1).leader == 0
