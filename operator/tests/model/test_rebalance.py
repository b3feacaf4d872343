"""Rebalance plans: no broker twice in a partition, minimum moves, racks respected, drain first."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.controller.placement import assign_replicas
from strom.model import reassign as rebalance
from strom_operator.model.errors import PlanError


def _check_invariants(before, plan, remaining, leaving=()):
    for tp, replicas in plan.assignment.items():
        assert len(set(replicas)) == len(replicas), f"{tp} has a broker twice: {replicas}"
        assert len(replicas) == len(before[tp])
        assert not set(replicas) & set(leaving)
        assert set(replicas) <= set(remaining)


def _cluster(brokers, partitions, rf, racks=None):
    rack_map = {b: (racks[b % len(racks)] if racks else None) for b in range(brokers)}
    start = dict(enumerate(assign_replicas(partitions, rf, rack_map)))
    return {("t", p): r for p, r in start.items()}, rack_map


def test_scale_out_3_to_5_moves_the_minimum_onto_new_brokers():
    assignment, racks = _cluster(3, 12, 3)
    racks5 = {**racks, 3: None, 4: None}
    plan = rebalance.scale_out(assignment, racks5)
    _check_invariants(assignment, plan, racks5)
    before = rebalance.loads(assignment, racks5)
    assert plan.balanced
    assert len(plan.moves) == rebalance.minimum_balance_moves(before)
    assert all(m.target in (3, 4) for m in plan.moves), "only new brokers receive replicas"
    after = rebalance.loads(plan.assignment, racks5)
    assert rebalance.imbalance(after) <= 1
    assert sorted(plan.reassignments) == sorted({(m.topic, m.partition) for m in plan.moves})


def test_balanced_cluster_needs_no_moves():
    assignment, racks = _cluster(3, 9, 3)
    plan = rebalance.plan(assignment, racks)
    assert plan.is_empty and plan.balanced


def test_scale_in_5_to_3_drains_first_then_balances():
    assignment, racks = _cluster(5, 20, 3)
    plan = rebalance.scale_in(assignment, racks, leaving=[3, 4])
    _check_invariants(assignment, plan, [0, 1, 2], leaving=[3, 4])
    kinds = [m.reason for m in plan.moves]
    assert kinds == sorted(kinds, key=lambda k: k != "drain"), "drain moves come first"
    on_leaving = sum(b in (3, 4) for r in assignment.values() for b in r)
    assert kinds.count("drain") == on_leaving


def test_scale_in_refused_below_replication_factor():
    assignment, racks = _cluster(3, 6, 3)
    with pytest.raises(PlanError) as err:
        rebalance.scale_in(assignment, racks, leaving=[2])
    assert err.value.reason == "NotEnoughBrokers"
    assert "replication factor 3" in str(err.value)


def test_drain_prefers_a_rack_the_partition_does_not_use():
    racks = {0: "a", 1: "b", 2: "c", 3: "a", 4: "c"}
    assignment = {("t", 0): [0, 1, 2]}
    plan = rebalance.scale_in(assignment, racks, leaving=[2])
    # Broker 2 (rack c) leaves; 4 is the only other broker in rack c.
    assert plan.assignment[("t", 0)] == [0, 1, 4]


def test_balance_never_reduces_rack_spread():
    racks = {0: "a", 1: "b", 2: "c", 3: "a"}
    assignment, _ = _cluster(3, 12, 3, racks=["a", "b", "c"])
    plan = rebalance.scale_out(assignment, racks)
    for tp, replicas in plan.assignment.items():
        assert len({racks[b] for b in replicas}) == 3, (tp, replicas)
    _check_invariants(assignment, plan, racks)


def test_duplicate_broker_in_input_is_rejected():
    with pytest.raises(PlanError):
        rebalance.plan({("t", 0): [1, 1]}, {0: None, 1: None})


def test_new_replicas_for_rf_grow_and_shrink():
    racks = {0: "a", 1: "a", 2: "b"}
    assert rebalance.new_replicas_for_rf([0], 2, racks, {0: 1, 1: 0, 2: 5}) == [0, 2]
    assert rebalance.new_replicas_for_rf([0, 2, 1], 1, racks, {}) == [0]
    with pytest.raises(PlanError):
        rebalance.new_replicas_for_rf([0], 4, racks, {})


@st.composite
def clusters(draw):
    brokers = draw(st.integers(min_value=1, max_value=7))
    rf = draw(st.integers(min_value=1, max_value=brokers))
    nracks = draw(st.integers(min_value=0, max_value=3))
    rack_names = [None] if nracks == 0 else [f"r{i}" for i in range(nracks)]
    racks = {b: rack_names[draw(st.integers(0, len(rack_names) - 1))] for b in range(brokers)}
    assignment = {}
    for t in range(draw(st.integers(1, 3))):
        for p in range(draw(st.integers(1, 8))):
            replicas = draw(st.permutations(range(brokers)))[:rf]
            assignment[(f"t{t}", p)] = list(replicas)
    added = draw(st.integers(0, 3))
    for b in range(brokers, brokers + added):
        racks[b] = rack_names[b % len(rack_names)]
    leaving = draw(st.sets(st.sampled_from(sorted(racks)), max_size=2))
    return assignment, racks, leaving, rf


@settings(max_examples=300, deadline=None)
@given(clusters())
def test_plan_properties(case):
    assignment, racks, leaving, rf = case
    remaining = [b for b in racks if b not in leaving]
    if len(remaining) < rf:
        with pytest.raises(PlanError):
            rebalance.plan(assignment, racks, leaving)
        return
    plan = rebalance.plan(assignment, racks, leaving)
    _check_invariants(assignment, plan, remaining, leaving)
    drains = [m for m in plan.moves if m.reason == "drain"]
    assert len(drains) == sum(b in leaving for r in assignment.values() for b in r)
    # Balancing moves are exactly the lower bound from the post-drain loads.
    post_drain = dict(assignment)
    replay = {tp: list(r) for tp, r in assignment.items()}
    for m in drains:
        replay[(m.topic, m.partition)][replay[(m.topic, m.partition)].index(m.source)] = m.target
    post_drain = replay
    balance_moves = len(plan.moves) - len(drains)
    if plan.balanced:
        bound = rebalance.minimum_balance_moves(rebalance.loads(post_drain, remaining))
        assert balance_moves == bound
        assert rebalance.imbalance(rebalance.loads(plan.assignment, remaining)) <= 1
    # Balancing never lowers rack spread of a partition.
    for m in plan.moves:
        if m.reason != "balance":
            continue
    for tp, replicas in plan.assignment.items():
        drained_racks = {racks[b] if racks[b] is not None else f"b{b}" for b in post_drain[tp]}
        final_racks = {racks[b] if racks[b] is not None else f"b{b}" for b in replicas}
        assert len(final_racks) >= len(drained_racks)
