"""The consumer's group membership rules, driven by hand: no broker, no socket, no event loop.

``MembershipState`` is fed the answers a coordinator would give and the clock; the tests check
the requests it builds, the callbacks it owes the listener and that the join protocol's phases
only move along the table.
"""

from __future__ import annotations

import re

import pytest

from strom.client.commits import CommitFailedError
from strom.client.consumer_settings import ConsumerSettings
from strom.client.group_state import (
    AssignmentPlan,
    HeartbeatOutcome,
    IllegalTransition,
    MembershipState,
    Phase,
)
from strom.client.models import TopicPartition
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.v1 import broker_pb2, common_pb2, group_pb2

T0 = 1_000_000.0


def _state(strategy: str = "range", **options: object) -> MembershipState:
    settings = ConsumerSettings.build("127.0.0.1:1", group_id="g",
                                      partition_assignment_strategy=strategy,
                                      **options)  # type: ignore[arg-type]
    return MembershipState("g", settings, T0)


def _tps(*parts: int, topic: str = "t") -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in parts]


def _joined(member: str, generation: int, leader: str, protocol: str = "range",
            members: dict[str, list[str]] | None = None) -> group_pb2.JoinGroupResponse:
    return group_pb2.JoinGroupResponse(
        generation=generation, protocol_name=protocol, leader_id=leader, member_id=member,
        members=[group_pb2.JoinedMember(member_id=m, subscription=group_pb2.Subscription(
            topics=topics)) for m, topics in (members or {}).items()])


def _synced(tps: list[TopicPartition]) -> group_pb2.SyncGroupResponse:
    return group_pb2.SyncGroupResponse(assignment=[
        common_pb2.TopicPartition(topic=tp.topic, partition=tp.partition) for tp in tps])


def _join_as_leader(st: MembershipState, counts: dict[str, int], generation: int = 1
                    ) -> AssignmentPlan:
    """One whole round of a one-member group: join, assign, sync."""
    st.join_request()
    assert st.on_join(_joined("m1", generation, "m1", members={"m1": sorted(st.topics)}))
    leader = st.leader_input(_joined("m1", generation, "m1", members={"m1": sorted(st.topics)}))
    assert leader is not None
    assignments = st.assign(leader, counts, T0)
    mine = [TopicPartition(p.topic, p.partition) for a in assignments for p in a.partitions]
    plan = st.on_sync(_synced(mine))
    assert plan is not None
    st.synced(st.sub_version)
    return plan


def test_a_first_join_goes_unjoined_joining_syncing_stable() -> None:
    st = _state()
    assert not st.needs_step(T0)
    st.subscribe(frozenset({"t"}), None)
    assert st.needs_step(T0) and st.phase is Phase.UNJOINED
    request = st.join_request()
    assert st.phase is Phase.JOINING
    assert (request.group_id, request.member_id, list(request.protocols),
            list(request.subscription.topics)) == ("g", "", ["range"], ["t"])
    assert st.heartbeat_paused()
    # the broker asks for a member id first (KIP-394): the round ends, the id is kept
    assert not st.on_join(group_pb2.JoinGroupResponse(
        error_code=ErrorCode.MEMBER_ID_REQUIRED.value, member_id="m1"))
    assert st.phase is Phase.UNJOINED and st.member_id == "m1"
    plan = _join_as_leader(st, {"t": 3})
    assert plan.new == frozenset(_tps(0, 1, 2)) and not plan.revoked
    cb = st.assigned(plan)
    assert st.phase is Phase.STABLE and st.generation == 1
    assert cb.assigned == _tps(0, 1, 2) and cb.revoked == [] and cb.lost == []
    assert not st.needs_step(T0) and st.heartbeating() and not st.heartbeat_paused()
    assert st.assigned_counts == {"t": 3}


def test_illegal_moves_raise() -> None:
    st = _state()
    st.subscribe(frozenset({"t"}), None)
    with pytest.raises(IllegalTransition, match="JoinGroup answer in phase UNJOINED"):
        st.on_join(_joined("m1", 1, "m1"))
    with pytest.raises(IllegalTransition, match="SyncGroup request in phase UNJOINED"):
        st.sync_request([])
    st.join_request()
    with pytest.raises(IllegalTransition, match="from JOINING to JOINING"):
        st.join_request()
    with pytest.raises(IllegalTransition, match="SyncGroup answer in phase JOINING"):
        st.on_sync(_synced([]))
    assert st.on_join(_joined("m1", 1, "m2"))
    with pytest.raises(IllegalTransition, match="from SYNCING to JOINING"):
        st.join_request()


def test_a_failed_round_rests_where_the_generation_says() -> None:
    st = _state()
    st.subscribe(frozenset({"t"}), None)
    st.assigned(_join_as_leader(st, {"t": 2}))
    st.rejoin_needed = True
    st.join_request()
    # REBALANCE_IN_PROGRESS: the member keeps generation 1 and its partitions
    assert not st.on_join(group_pb2.JoinGroupResponse(
        error_code=ErrorCode.REBALANCE_IN_PROGRESS.value))
    assert st.phase is Phase.STABLE and st.generation == 1
    st.join_request()
    st.end_round()  # a cancelled step or a network error
    assert st.phase is Phase.STABLE
    st.join_request()
    assert not st.on_join(group_pb2.JoinGroupResponse(
        error_code=ErrorCode.UNKNOWN_MEMBER_ID.value))
    assert st.phase is Phase.UNJOINED and st.member_id == "" and st.generation == -1
    # the group forgot us while we own partitions: they are lost, not revoked
    assert st.lost_before_join() == set(_tps(0, 1))


def test_sync_errors_end_the_round_or_raise() -> None:
    st = _state()
    st.subscribe(frozenset({"t"}), None)
    st.join_request()
    st.on_join(_joined("m1", 4, "m0"))
    assert st.on_sync(group_pb2.SyncGroupResponse(
        error_code=ErrorCode.ILLEGAL_GENERATION.value)) is None
    assert st.phase is Phase.UNJOINED and st.generation == -1 and st.member_id == "m1"
    st.join_request()
    st.on_join(_joined("m1", 5, "m0"))
    with pytest.raises(StromError, match="SyncGroup for group 'g': INCONSISTENT_GROUP_PROTOCOL"):
        st.on_sync(group_pb2.SyncGroupResponse(
            error_code=ErrorCode.INCONSISTENT_GROUP_PROTOCOL.value))


def test_eager_members_revoke_everything_before_joining() -> None:
    st = _state("range")
    st.subscribe(frozenset({"t"}), None)
    st.assigned(_join_as_leader(st, {"t": 2}))
    st.rejoin_needed = True
    assert st.revoke_before_join() == set(_tps(0, 1))
    assert st.pending_apply == set() and st.needs_step(T0)
    assert st.take_pending() == set(_tps(0, 1))
    assert st.take_pending() is None


def test_cooperative_members_give_away_only_what_moved_and_rejoin() -> None:
    st = _state("cooperative-sticky")
    st.subscribe(frozenset({"t"}), None)
    st.assigned(_join_as_leader(st, {"t": 4}))
    assert st.owned == set(_tps(0, 1, 2, 3))
    st.rejoin_needed = True
    assert st.revoke_before_join() == set()  # the subscription still covers every partition
    request = st.join_request()
    assert sorted((p.topic, p.partition) for p in request.subscription.owned_partitions) == [
        ("t", 0), ("t", 1), ("t", 2), ("t", 3)]
    assert request.subscription.user_data == (1).to_bytes(4, "big")
    st.on_join(_joined("m1", 2, "m0"))
    plan = st.on_sync(_synced(_tps(0, 1)))
    assert plan is not None and plan.revoked == frozenset(_tps(2, 3)) and not plan.added
    assert plan.readable == _tps(0, 1, 2, 3)
    st.synced(st.sub_version)
    cb = st.assigned(plan)
    assert cb.revoked == _tps(2, 3) and cb.assigned == []
    assert st.rejoin_needed and st.pending_apply == set(_tps(0, 1))
    assert st.take_pending() == set(_tps(2, 3))


def test_heartbeat_answers() -> None:
    st = _state()
    st.subscribe(frozenset({"t"}), None)
    st.assigned(_join_as_leader(st, {"t": 1}))
    assert st.on_heartbeat(group_pb2.HeartbeatResponse()) is HeartbeatOutcome.OK
    assert not st.rejoin_needed
    assert st.on_heartbeat(group_pb2.HeartbeatResponse(
        error_code=ErrorCode.REBALANCE_IN_PROGRESS.value)) is HeartbeatOutcome.REJOIN
    assert st.rejoin_needed and st.generation == 1
    assert st.on_heartbeat(group_pb2.HeartbeatResponse(
        error_code=ErrorCode.UNKNOWN_MEMBER_ID.value)) is HeartbeatOutcome.RESET
    assert st.phase is Phase.UNJOINED and st.member_id == "" and not st.heartbeating()
    with pytest.raises(StromError, match="group_instance_id=None is in use"):
        st.on_heartbeat(group_pb2.HeartbeatResponse(
            error_code=ErrorCode.FENCED_INSTANCE_ID.value))


def test_a_reset_during_a_round_leaves_the_phase_to_the_round() -> None:
    st = _state()
    st.subscribe(frozenset({"t"}), None)
    st.join_request()
    st.reset(ErrorCode.ILLEGAL_GENERATION)  # a commit refused meanwhile
    assert st.phase is Phase.JOINING
    assert st.on_join(_joined("m1", 3, "m0")) and st.phase is Phase.SYNCING
    st.reset(ErrorCode.UNKNOWN_MEMBER_ID)
    plan = st.on_sync(_synced(_tps(0)))
    assert plan is not None
    st.synced(st.sub_version)
    st.assigned(plan)
    assert st.phase is Phase.UNJOINED and st.wants_join()


def test_joining_that_keeps_failing_raises_after_default_api_timeout() -> None:
    st = _state(default_api_timeout_ms=10_000, retry_backoff_ms=100)
    unavailable = StromError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "no store")
    st.on_step_error(unavailable, T0)
    assert st.backoff_until_ms == T0 + 100 and not st.needs_step(T0 + 50)
    st.on_step_error(StromError(ErrorCode.UNKNOWN_MEMBER_ID, "x"), T0 + 9_000)  # not a failure
    st.on_step_error(unavailable, T0 + 9_999)
    with pytest.raises(StromError, match=r"joining has failed for 10 s \(default_api_timeout_ms"
                                         r"=10000\); last error: no store"):
        st.on_step_error(unavailable, T0 + 10_000)
    with pytest.raises(StromError, match="bad"):
        st.on_step_error(StromError(ErrorCode.INVALID_REQUEST, "bad"), T0)


def test_poll_timeout_and_partition_growth() -> None:
    st = _state(max_poll_interval_ms=1000, metadata_max_age_ms=500)
    st.subscribe(frozenset({"t"}), None)
    st.assigned(_join_as_leader(st, {"t": 2}))
    assert not st.poll_expired(T0 + 1000, stepping=False)
    assert st.poll_expired(T0 + 1001, stepping=False)
    assert not st.poll_expired(T0 + 1001, stepping=True)  # a join inside poll() is not a stall
    st.polled(T0 + 1001)
    assert not st.poll_expired(T0 + 2000, stepping=False)
    assert st.partition_check_due(T0 + 499) is None
    topics = st.partition_check_due(T0 + 500)
    assert topics == {"t"} and st.partition_check_due(T0 + 600) is None
    assert not st.on_partition_counts(topics, {"t": 2})
    assert st.on_partition_counts(topics, {"t": 3}) and st.rejoin_needed


def test_pattern_matches_cluster_topics_without_internal_ones() -> None:
    st = _state()
    st.subscribe(frozenset(), re.compile("or.*"))
    assert st.pattern_check_due(T0)
    st.pattern_checked(T0)
    version = st.sub_version
    st.on_metadata(broker_pb2.MetadataResponse(topics=[
        broker_pb2.TopicMetadata(name="orders"), broker_pb2.TopicMetadata(name="orbit"),
        broker_pb2.TopicMetadata(name="orphan", error_code=3),
        broker_pb2.TopicMetadata(name="or-internal", internal=True),
        broker_pb2.TopicMetadata(name="x-orders")]))
    assert st.topics == {"orders", "orbit"} and st.sub_version == version + 1
    assert not st.pattern_check_due(T0 + 1)


def test_commit_failures_and_leaving() -> None:
    st = _state()
    assert st.commit_identity() == (-1, "")
    st.subscribe(frozenset({"t"}), None)
    st.assigned(_join_as_leader(st, {"t": 1}))
    assert st.commit_identity() == (1, "m1")
    st.rejoin_needed = False
    assert not st.on_commit_failed(CommitFailedError(ErrorCode.REBALANCE_IN_PROGRESS))
    assert st.rejoin_needed and st.generation == 1
    request = st.leave_request()
    assert request is not None and [m.member_id for m in request.members] == ["m1"]
    st.left(sent_leave=True)
    assert st.phase is Phase.UNJOINED and st.member_id == "" and st.generation == -1
    assert _state(group_instance_id="i1").leave_request() is None  # static: stays (KIP-345)


def test_invalid_session_timeout_names_the_setting() -> None:
    st = _state(session_timeout_ms=45000)
    st.subscribe(frozenset({"t"}), None)
    st.join_request()
    with pytest.raises(StromError, match=r"session_timeout_ms=45000 is outside the broker's "
                                         r"group.min.session.timeout.ms"):
        st.on_join(group_pb2.JoinGroupResponse(
            error_code=ErrorCode.INVALID_SESSION_TIMEOUT.value))
