"""Pure functions behind the Admin-driven steps: cluster state, scaling plans, groups, settings."""

from __future__ import annotations

import datetime

import pytest

from strom.controller.placement import assign_replicas
from strom.model import reassign as rebalance
from strom_operator.model import groups, scaling
from strom_operator.model.cluster_state import Moving, PartitionInfo, build_state
from strom_operator.model.errors import PlanError
from strom_operator.model.groups import GroupView, PartitionLag
from strom_operator.model.manifests import ClusterRef
from strom_operator.model.specs import ResetOffsets, parse_cluster
from strom_operator.model.topics import deletion_step
from strom_operator.reconcilers.admin import parse_overrides, resolve_bootstrap


def _p(topic, partition, replicas, isr=None, leader=None):
    return PartitionInfo(
        topic,
        partition,
        tuple(replicas),
        tuple(replicas if isr is None else isr),
        replicas[0] if leader is None else leader,
    )


def test_build_state_counts():
    state = build_state(
        brokers={0: "a", 1: "b", 2: "a", 3: None},
        fenced=[3],
        controller=1,
        partitions=[
            _p("t", 0, [0, 1, 2]),
            _p("t", 1, [1, 2, 3], isr=[1, 2]),
            _p("u", 0, [3], leader=-1),
        ],
        topics=["t", "u"],
    )
    assert state.registered == frozenset({0, 1, 2}), "fenced brokers are not registered"
    assert state.replicas_per_broker == {0: 1, 1: 2, 2: 2, 3: 2}, "fenced brokers' data counts"
    assert state.under_replicated == 1 and state.offline == 1
    assert state.max_replication_factor == 3 and state.partitions == 3
    assert state.active_controller == 1 and not state.reassignment_in_progress
    assert state.racks[0] == "a" and state.led_by([1]) == [("t", 1)]
    assert state.leaders_per_broker() == {0: 1, 1: 1}
    assert state.percent_done == 100.0


def test_build_state_during_a_reassignment():
    state = build_state(
        brokers=dict.fromkeys(range(4)),
        fenced=[],
        controller=-1,
        partitions=[_p("t", 0, [0, 1, 2, 3], isr=[0, 1, 2], leader=1)],
        moving=[Moving("t", 0, 50.0, removing=(2,)), Moving("t", 1, None)],
    )
    assert state.max_replication_factor == 3, "the union of old and new is not the RF"
    assert state.reassignment_in_progress and state.active_controller is None
    assert state.percent_done == 25.0, "unknown progress counts as 0"
    assert state.not_preferred() == [("t", 0)]


def test_rebalance_plan_scale_out_and_drain():
    start = dict(enumerate(assign_replicas(12, 3, dict.fromkeys(range(3)))))
    assignment = {("t", p): r for p, r in start.items()}
    out = scaling.rebalance_plan(assignment, {}, range(5))
    loads = rebalance.loads(out.assignment, range(5))
    assert max(loads.values()) - min(loads.values()) <= 1
    assert len(out.moves) == rebalance.minimum_balance_moves(rebalance.loads(assignment, range(5)))
    for replicas in out.assignment.values():
        assert len(set(replicas)) == 3

    drained = scaling.rebalance_plan(out.assignment, {}, range(3))
    assert all(set(r) <= {0, 1, 2} for r in drained.assignment.values())
    with pytest.raises(PlanError) as err:
        scaling.rebalance_plan(out.assignment, {}, range(2))
    assert err.value.reason == "NotEnoughBrokers"


def test_rebalance_plan_is_rack_aware():
    racks = {0: "a", 1: "b", 2: "c", 3: "a", 4: "b", 5: "c"}
    start = dict(enumerate(assign_replicas(6, 3, {b: racks[b] for b in range(3)})))
    out = scaling.rebalance_plan({("t", p): r for p, r in start.items()}, racks, range(6))
    for replicas in out.assignment.values():
        assert len({racks[b] for b in replicas}) == 3


def test_scale_in_waits_for_leadership_to_move():
    decision = scaling.decide(
        desired=3,
        current=5,
        registered=frozenset(range(5)),
        replicas_per_broker={0: 3, 1: 3, 2: 3, 3: 0, 4: 0},
        max_replication_factor=3,
        reassignment_in_progress=False,
        leaders_per_broker={4: 1},
    )
    assert decision.step == "ElectLeaders" and decision.leaving == (3, 4)


def test_progress_and_throttle_arg():
    assert scaling.progress(7, 2, 12.5) == {
        "state": "Moving",
        "movesTotal": 7,
        "partitionsMoving": 2,
        "percent": 12.5,
    }
    done = scaling.progress(7, 0, None)
    assert done["state"] == "Done" and done["movesDone"] == 7
    assert scaling.throttle_arg(1000) == 1000 and scaling.throttle_arg(0) == -1


def test_deletion_step():
    assert deletion_step("Delete", True) == "DeleteTopic"
    assert deletion_step("Delete", False) == "Release"
    assert deletion_step("Retain", True) == "Release"


def test_reset_decision_and_target():
    reset = ResetOffsets(to="offset", offset=42)
    empty = GroupView("Empty", 0, (), 1)
    busy = GroupView("Stable", 2, (), 1)
    assert groups.reset_decision(None, None, empty).step == "None"
    first = groups.reset_decision(reset, None, empty)
    assert first.step == "Apply" and first.hash == groups.reset_hash(reset)
    assert groups.reset_decision(reset, first.hash, busy).step == "Done"
    assert groups.reset_decision(reset, "older", busy).step == "WaitForEmptyGroup"
    assert groups.reset_hash(ResetOffsets(to="offset", offset=43)) != first.hash
    assert groups.reset_target(reset) == ("offset", 42)
    assert groups.reset_target(ResetOffsets(to="latest")) == ("latest", 0)
    ts = ResetOffsets(to="timestamp", timestamp="1970-01-01T00:00:01+00:00")
    assert groups.reset_target(ts) == ("datetime", 1000)
    assert groups.reset_topics(ResetOffsets(to="earliest", topics=["b"]), ["a", "b"]) == ["b"]
    assert groups.reset_topics(ResetOffsets(to="earliest"), ["b", "a"]) == ["a", "b"]


def test_lag_status_and_seconds_since():
    view = GroupView(
        "Stable",
        1,
        (PartitionLag("t", 1, None, 5, 5), PartitionLag("t", 0, 3, 4, 1)),
        2,
    )
    status = groups.lag_status(view, ["t"])
    assert status["totalLag"] == 6 and [r["partition"] for r in status["partitionLag"]] == [0, 1]
    assert "committedOffset" not in status["partitionLag"][1]
    now = datetime.datetime(2026, 1, 1, 0, 1, tzinfo=datetime.UTC)
    assert groups.seconds_since("2026-01-01T00:00:00Z", now) == 60.0
    assert groups.seconds_since(None, now) is None and groups.seconds_since("junk", now) is None


def test_bootstrap_overrides():
    spec = parse_cluster({"storage": {"size": "1Gi"}})
    ref = ClusterRef(name="c", namespace="ns", uid="u", generation=1)
    assert resolve_bootstrap(ref, spec, {}) == "c-bootstrap.ns.svc:9092"
    assert resolve_bootstrap(ref, spec, parse_overrides("127.0.0.1:1,127.0.0.1:2")) == (
        "127.0.0.1:1,127.0.0.1:2"
    )
    mapping = parse_overrides('{"ns/c": "127.0.0.1:5", "*": "x:1"}')
    assert resolve_bootstrap(ref, spec, mapping) == "127.0.0.1:5"
    other = ClusterRef(name="d", namespace="ns", uid="u", generation=1)
    assert resolve_bootstrap(other, spec, mapping) == "x:1"
    assert parse_overrides("") == {}
    with pytest.raises(ValueError):
        parse_overrides('{"ns/c": ')
