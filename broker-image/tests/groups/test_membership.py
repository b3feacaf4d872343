"""The group state machine driven through whole scenarios, with no broker and a fake clock."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TypeVar

from strom.client.assignors import MemberSubscription, range_assign
from strom.groups.membership import (
    Group,
    GroupConfig,
    GroupState,
    Heartbeat,
    HeartbeatResponse,
    JoinGroup,
    JoinGroupResponse,
    LeaveGroup,
    LeaveGroupResponse,
    LeavingMember,
    MemberRemoved,
    MetadataChanged,
    Output,
    RebalanceCompleted,
    RebalanceStarted,
    Subscription,
    SyncGroup,
    SyncGroupResponse,
)
from strom.protocol.errors import ErrorCode

SUB = Subscription(("t",))
SESSION = 10_000
REBALANCE = 30_000
DELAY = 3_000
COUNTS = {"t": 6}


def new_group() -> Group:
    counter = itertools.count(1)
    return Group(
        "g",
        GroupConfig(initial_rebalance_delay_ms=DELAY),
        new_member_id=lambda client: f"{client}-{next(counter)}",
    )


_req = itertools.count(1)


def join(
    name: str,
    member_id: str = "",
    instance: str | None = None,
    sub: Subscription = SUB,
) -> JoinGroup:
    return JoinGroup(
        request_id=next(_req),
        member_id=member_id,
        subscription=sub,
        group_instance_id=instance,
        client_id=name,
        session_timeout_ms=SESSION,
        rebalance_timeout_ms=REBALANCE,
    )


T = TypeVar("T")


def of(outputs: Sequence[Output], kind: type[T]) -> list[T]:
    return [o for o in outputs if isinstance(o, kind)]


def state_of(g: Group) -> GroupState:
    """The state, read through a call so mypy does not carry narrowing across events."""
    return g.state


def assign_as_leader(resp: JoinGroupResponse) -> dict[str, tuple[tuple[str, int], ...]]:
    subs = [
        MemberSubscription(m.member_id, m.subscription.topics, m.group_instance_id)
        for m in resp.members
    ]
    return {k: tuple(v) for k, v in range_assign(subs, COUNTS).items()}


def form_group(
    g: Group, names: Sequence[str], now: int, static: bool = False
) -> tuple[dict[str, str], dict[str, tuple[tuple[str, int], ...]]]:
    """Join everyone, complete the initial delay, sync; return name -> member id, assignments."""
    ids: dict[str, str] = {}
    for name in names:
        if static:
            assert of(g.handle(join(name, instance=name), now), JoinGroupResponse) == []
            ids[name] = g.static_members[name]
        else:
            (resp,) = of(g.handle(join(name), now), JoinGroupResponse)
            assert resp.error is ErrorCode.MEMBER_ID_REQUIRED
            ids[name] = resp.member_id
            assert of(g.handle(join(name, resp.member_id), now), JoinGroupResponse) == []
    out = g.tick(now + DELAY)
    joins = {r.member_id: r for r in of(out, JoinGroupResponse)}
    assert set(joins) == set(ids.values())
    assert all(r.error is ErrorCode.NONE for r in joins.values())
    assert state_of(g) is GroupState.COMPLETING_REBALANCE
    return ids, sync_all(g, joins, now + DELAY)


def sync_all(
    g: Group, joins: dict[str, JoinGroupResponse], now: int
) -> dict[str, tuple[tuple[str, int], ...]]:
    leader = next(r for r in joins.values() if r.members)
    followers = [r for r in joins.values() if r is not leader]
    for r in followers:  # followers sync first and wait for the leader
        assert g.handle(SyncGroup(next(_req), r.member_id, r.generation), now) == []
    plan = assign_as_leader(leader)
    out = g.handle(SyncGroup(next(_req), leader.member_id, leader.generation, None, plan), now)
    syncs = of(out, SyncGroupResponse)
    assert len(syncs) == len(joins)
    assert all(s.error is ErrorCode.NONE for s in syncs)
    assert state_of(g) is GroupState.STABLE
    return plan


def heartbeat(g: Group, member_id: str, now: int, instance: str | None = None) -> ErrorCode:
    (resp,) = of(
        g.handle(Heartbeat(next(_req), member_id, g.generation, instance), now), HeartbeatResponse
    )
    return resp.error


def test_join_sync_heartbeat_three_members_get_two_partitions_each() -> None:
    g = new_group()
    ids, plan = form_group(g, ["a", "b", "c"], now=0)
    assert g.generation == 1
    assert sorted(len(v) for v in plan.values()) == [2, 2, 2]
    for member_id in ids.values():
        assert heartbeat(g, member_id, 4_000) is ErrorCode.NONE
    assert {m.member_id: m.assignment for m in g.snapshot().members} == plan


def test_rebalance_completed_reports_generation_and_duration() -> None:
    g = new_group()
    (resp,) = of(g.handle(join("a"), 1_000), JoinGroupResponse)
    out = g.handle(join("a", resp.member_id), 1_000)
    assert of(out, RebalanceStarted)
    (joined,) = of(g.tick(1_000 + DELAY), JoinGroupResponse)
    out = g.handle(SyncGroup(next(_req), joined.member_id, 1, None, {}), 5_500)
    assert of(out, RebalanceCompleted) == [RebalanceCompleted("g", 1, 4_500)]


def test_session_timeout_removes_member_and_its_partitions_move() -> None:
    g = new_group()
    ids, plan = form_group(g, ["a", "b", "c"], now=0)
    dead = ids["c"]
    t = DELAY
    for _ in range(2):  # a and b keep heartbeating, c has gone silent
        t += 4_000
        for name in ("a", "b"):
            assert heartbeat(g, ids[name], t) is ErrorCode.NONE
        g.tick(t)
    out = g.tick(DELAY + SESSION)
    assert MemberRemoved("g", dead, "session timeout") in out
    assert of(out, RebalanceStarted)
    assert state_of(g) is GroupState.PREPARING_REBALANCE
    t = DELAY + SESSION + 100
    assert heartbeat(g, ids["a"], t) is ErrorCode.REBALANCE_IN_PROGRESS
    # Both survivors rejoin; the join completes as soon as the last known member is in.
    assert of(g.handle(join("a", ids["a"]), t), JoinGroupResponse) == []
    joins = {r.member_id: r for r in of(g.handle(join("b", ids["b"]), t), JoinGroupResponse)}
    assert set(joins) == {ids["a"], ids["b"]} and g.generation == 2
    new_plan = sync_all(g, joins, t)
    assert dead not in new_plan
    moved = set(plan[dead])
    assert moved <= {tp for tps in new_plan.values() for tp in tps}
    assert sorted(len(v) for v in new_plan.values()) == [3, 3]


def test_member_that_does_not_rejoin_within_rebalance_timeout_is_dropped() -> None:
    g = new_group()
    ids, _ = form_group(g, ["a", "b"], now=0)
    t = DELAY + 1_000
    g.handle(join("a", ids["a"]), t)  # the leader rejoins: a rebalance starts
    assert state_of(g) is GroupState.PREPARING_REBALANCE
    for step in range(1, 10):  # b still heartbeats (and is told to rejoin) but never does
        assert heartbeat(g, ids["b"], t + step * 3_000) is ErrorCode.REBALANCE_IN_PROGRESS
    out = g.tick(t + REBALANCE)
    assert any(isinstance(o, MemberRemoved) and o.member_id == ids["b"] for o in out)
    (resp,) = of(out, JoinGroupResponse)
    assert resp.member_id == ids["a"] and resp.generation == 2
    assert [m.member_id for m in resp.members] == [ids["a"]]


def test_leave_group_triggers_rebalance_and_last_leave_empties_the_group() -> None:
    g = new_group()
    ids, _ = form_group(g, ["a", "b"], now=0)
    out = g.handle(LeaveGroup(next(_req), (LeavingMember(ids["b"]),)), 5_000)
    (resp,) = of(out, LeaveGroupResponse)
    assert resp.member_errors == ((LeavingMember(ids["b"]), ErrorCode.NONE),)
    assert of(out, RebalanceStarted) and state_of(g) is GroupState.PREPARING_REBALANCE
    out = g.handle(LeaveGroup(next(_req), (LeavingMember(ids["a"]),)), 5_001)
    assert state_of(g) is GroupState.EMPTY and g.generation == 2
    unknown = g.handle(LeaveGroup(next(_req), (LeavingMember("nobody"),)), 5_002)
    (resp,) = of(unknown, LeaveGroupResponse)
    assert resp.member_errors[0][1] is ErrorCode.UNKNOWN_MEMBER_ID


def test_static_member_restart_keeps_assignment_without_rebalance() -> None:
    g = new_group()
    ids, plan = form_group(g, ["a", "b"], now=0, static=True)
    old_b = ids["b"]
    generation = g.generation
    # b restarts: it lost its member id, not its group.instance.id.
    out = g.handle(join("b", instance="b"), 6_000)
    assert not of(out, RebalanceStarted)
    (resp,) = of(out, JoinGroupResponse)
    assert resp.error is ErrorCode.NONE and resp.generation == generation
    assert resp.member_id != old_b and state_of(g) is GroupState.STABLE
    (sync,) = of(
        g.handle(SyncGroup(next(_req), resp.member_id, generation, "b"), 6_001), SyncGroupResponse
    )
    assert sync.error is ErrorCode.NONE and sync.assignment == plan[old_b]
    # The zombie with the old member id is fenced everywhere.
    assert heartbeat(g, old_b, 6_002, instance="b") is ErrorCode.FENCED_INSTANCE_ID
    assert g.validate_offset_commit(old_b, generation, "b") is ErrorCode.FENCED_INSTANCE_ID
    assert heartbeat(g, resp.member_id, 6_003, instance="b") is ErrorCode.NONE


def test_static_member_restart_with_new_subscription_rebalances() -> None:
    g = new_group()
    form_group(g, ["a", "b"], now=0, static=True)
    out = g.handle(join("b", instance="b", sub=Subscription(("t", "u"))), 6_000)
    assert of(out, RebalanceStarted)
    assert state_of(g) is GroupState.PREPARING_REBALANCE


def test_static_members_skip_member_id_required() -> None:
    g = new_group()
    assert of(g.handle(join("a", instance="a"), 0), JoinGroupResponse) == []
    assert "a" in g.static_members


def test_illegal_generation_and_unknown_member() -> None:
    g = new_group()
    ids, _ = form_group(g, ["a"], now=0)
    (hb,) = of(g.handle(Heartbeat(next(_req), ids["a"], 0), 4_000), HeartbeatResponse)
    assert hb.error is ErrorCode.ILLEGAL_GENERATION
    (hb,) = of(g.handle(Heartbeat(next(_req), "ghost", 1), 4_000), HeartbeatResponse)
    assert hb.error is ErrorCode.UNKNOWN_MEMBER_ID
    (sync,) = of(g.handle(SyncGroup(next(_req), ids["a"], 7), 4_000), SyncGroupResponse)
    assert sync.error is ErrorCode.ILLEGAL_GENERATION
    assert g.validate_offset_commit(ids["a"], 0) is ErrorCode.ILLEGAL_GENERATION
    assert g.validate_offset_commit("ghost", 1) is ErrorCode.UNKNOWN_MEMBER_ID
    assert g.validate_offset_commit(ids["a"], 1) is ErrorCode.NONE
    (rejoin,) = of(g.handle(join("x", "made-up-id"), 4_000), JoinGroupResponse)
    assert rejoin.error is ErrorCode.UNKNOWN_MEMBER_ID


def test_offset_commit_during_completing_rebalance_is_refused() -> None:
    g = new_group()
    (resp,) = of(g.handle(join("a"), 0), JoinGroupResponse)
    g.handle(join("a", resp.member_id), 0)
    g.tick(DELAY)
    assert state_of(g) is GroupState.COMPLETING_REBALANCE
    assert g.validate_offset_commit(resp.member_id, 1) is ErrorCode.REBALANCE_IN_PROGRESS


def test_standalone_commit_to_empty_group_is_accepted() -> None:
    assert new_group().validate_offset_commit("", -1) is ErrorCode.NONE


def test_invalid_session_timeout_is_rejected() -> None:
    g = new_group()
    ev = JoinGroup(next(_req), "", SUB, session_timeout_ms=10)
    (resp,) = of(g.handle(ev, 0), JoinGroupResponse)
    assert resp.error is ErrorCode.INVALID_SESSION_TIMEOUT


def test_partition_count_change_triggers_rebalance() -> None:
    g = new_group()
    g.handle(MetadataChanged({"t": 6, "other": 1}), 0)  # known before the group forms
    form_group(g, ["a"], now=0)
    assert g.handle(MetadataChanged({"t": 6, "other": 1}), 4_000) == []
    assert g.handle(MetadataChanged({"other": 9}), 4_001) == []  # not subscribed
    out = g.handle(MetadataChanged({"t": 8}), 4_002)
    assert of(out, RebalanceStarted) and state_of(g) is GroupState.PREPARING_REBALANCE


def test_first_metadata_after_forming_is_a_baseline_then_new_topic_rebalances() -> None:
    g = new_group()
    ids, _ = form_group(g, ["a"], now=0)
    assert g.handle(MetadataChanged({"t": 6}), 4_000) == []  # baseline only
    sub = Subscription(("t", "u"))
    (resp,) = of(g.handle(join("a", ids["a"], sub=sub), 4_100), JoinGroupResponse)
    g.handle(SyncGroup(next(_req), ids["a"], resp.generation, None, {}), 4_200)
    assert state_of(g) is GroupState.STABLE
    out = g.handle(MetadataChanged({"u": 3}), 4_300)  # subscribed topic u is created
    assert of(out, RebalanceStarted)


def test_follower_that_never_syncs_is_removed() -> None:
    g = new_group()
    ids: dict[str, str] = {}
    for name in ("a", "b"):
        (resp,) = of(g.handle(join(name), 0), JoinGroupResponse)
        ids[name] = resp.member_id
        g.handle(join(name, resp.member_id), 0)
    joins = {r.member_id: r for r in of(g.tick(DELAY), JoinGroupResponse)}
    leader = next(r for r in joins.values() if r.members)
    follower = next(m for m in ids.values() if m != leader.member_id)
    plan = assign_as_leader(leader)
    g.handle(SyncGroup(next(_req), leader.member_id, 1, None, plan), DELAY)
    for step in range(1, 12):  # both heartbeat; only the leader ever synced
        heartbeat(g, leader.member_id, DELAY + step * 3_000)
        heartbeat(g, follower, DELAY + step * 3_000)
        g.tick(DELAY + step * 3_000)
    assert follower not in g.members


def test_subscription_change_by_a_follower_rebalances() -> None:
    g = new_group()
    ids, _ = form_group(g, ["a", "b"], now=0)
    leader = g.leader_id
    follower = next(m for m in ids.values() if m != leader)
    name = next(n for n, m in ids.items() if m == follower)
    out = g.handle(join(name, follower, sub=Subscription(("t", "u"))), 5_000)
    assert of(out, RebalanceStarted)
    same = g.handle(join(name, follower, sub=Subscription(("t", "u"))), 5_001)
    assert not of(same, RebalanceStarted)


def test_unload_answers_parked_requests_and_goes_dead() -> None:
    g = new_group()
    (resp,) = of(g.handle(join("a"), 0), JoinGroupResponse)
    g.handle(join("a", resp.member_id), 0)
    (parked,) = of(g.unload(), JoinGroupResponse)
    assert parked.error is ErrorCode.NOT_COORDINATOR
    assert state_of(g) is GroupState.DEAD
    assert g.validate_offset_commit(resp.member_id, 0) is ErrorCode.COORDINATOR_NOT_AVAILABLE


def test_next_deadline_tracks_sessions() -> None:
    g = new_group()
    form_group(g, ["a"], now=0)
    deadline = g.next_deadline_ms()
    assert deadline is not None and deadline <= DELAY + SESSION
    assert new_group().next_deadline_ms() is None


def test_member_id_required_then_never_rejoining_does_not_block_the_group() -> None:
    g = new_group()
    ids, _ = form_group(g, ["a"], now=0)
    (resp,) = of(g.handle(join("late"), 4_000), JoinGroupResponse)
    assert resp.error is ErrorCode.MEMBER_ID_REQUIRED
    assert state_of(g) is GroupState.STABLE  # no rebalance until it comes back with its id
    g.handle(join("a", ids["a"]), 4_500)  # leader rejoins: rebalance, "late" still pending
    assert state_of(g) is GroupState.PREPARING_REBALANCE
    out = g.tick(4_000 + SESSION)  # the pending id expires; the join completes without it
    (done,) = of(out, JoinGroupResponse)
    assert done.member_id == ids["a"] and state_of(g) is GroupState.COMPLETING_REBALANCE


def test_group_max_size() -> None:
    counter = itertools.count(1)
    g = Group("g", GroupConfig(max_size=1), new_member_id=lambda c: f"{c}-{next(counter)}")
    (first,) = of(g.handle(join("a"), 0), JoinGroupResponse)
    (second,) = of(g.handle(join("b"), 0), JoinGroupResponse)
    assert first.error is ErrorCode.MEMBER_ID_REQUIRED
    assert second.error is ErrorCode.GROUP_MAX_SIZE_REACHED


def test_rejoin_with_same_metadata_while_completing_gets_current_generation() -> None:
    g = new_group()
    ids: dict[str, str] = {}
    for name in ("a", "b"):
        (resp,) = of(g.handle(join(name), 0), JoinGroupResponse)
        ids[name] = resp.member_id
        g.handle(join(name, resp.member_id), 0)
    g.tick(DELAY)
    out = g.handle(join("b", ids["b"]), DELAY + 10)  # b lost its response and retries
    (resp,) = of(out, JoinGroupResponse)
    assert resp.error is ErrorCode.NONE and resp.generation == 1
    assert state_of(g) is GroupState.COMPLETING_REBALANCE and not of(out, RebalanceStarted)


def test_cooperative_follow_up_rebalance_after_revocation() -> None:
    """A member that revoked partitions rejoins with its smaller owned set: a new generation."""
    g = new_group()
    ids, plan = form_group(g, ["a"], now=0)
    owned = plan[ids["a"]]
    sub = Subscription(("t",), owned_partitions=owned)
    # The sole member (the leader) rejoins: everyone is in, so generation 2 completes at once.
    (j,) = of(g.handle(join("a", ids["a"], sub=sub), 5_000), JoinGroupResponse)
    assert j.generation == 2
    g.handle(SyncGroup(next(_req), ids["a"], 2, None, {ids["a"]: owned[:3]}), 5_002)
    revoked_sub = Subscription(("t",), owned_partitions=owned[:3])
    out = g.handle(join("a", ids["a"], sub=revoked_sub), 5_003)
    assert of(out, RebalanceStarted)
