"""The coordinator runtime of one __consumer_offsets partition, with a fake log and a fake clock.

The fake append records what would be written and can be held open, so the tests see exactly
when the in-memory state changes relative to the write (only after it is acknowledged).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace

import pytest

from strom.broker.coordinator.partition import CoordinatorPartition, LoadState
from strom.broker.coordinator.settings import GroupSettings
from strom.groups.membership import (
    GroupConfig,
    GroupState,
    Heartbeat,
    HeartbeatResponse,
    JoinGroup,
    JoinGroupResponse,
    LeaveGroup,
    LeavingMember,
    Subscription,
    SyncGroup,
    SyncGroupResponse,
)
from strom.groups.offsets import (
    GroupKey,
    OffsetAndMetadata,
    OffsetKey,
    Record,
    decode_group_value,
    decode_key,
)
from strom.protocol.errors import ErrorCode, StromError
from strom.testing.waits import async_wait_until

SESSION = 10_000


class FakeLog:
    def __init__(self) -> None:
        self.records: list[Record] = []
        self.hold: asyncio.Event | None = None
        self.fail: ErrorCode | None = None

    async def append(self, records: Sequence[Record]) -> None:
        if self.fail is not None:
            raise StromError(self.fail, "fake append failure")
        self.records.extend(records)
        if self.hold is not None:
            await self.hold.wait()


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def make(log: FakeLog, clock: Clock, delay_ms: int = 0, **kw: int) -> CoordinatorPartition:
    settings = GroupSettings(group=GroupConfig(initial_rebalance_delay_ms=delay_ms), **kw)
    part = CoordinatorPartition(0, 1, settings, log.append, clock, lambda: {"t": 4})
    part.finish_load(timer=False)
    return part


def _stored_empty(part: CoordinatorPartition, group: str = "g") -> bool:
    """The group is Empty in memory and its stored record says so (the write is done)."""
    stored = part.store.groups.get(group)
    return part.describe(group).state is GroupState.EMPTY and stored is not None \
        and stored.is_empty


def join(member_id: str = "", topics: tuple[str, ...] = ("t",)) -> JoinGroup:
    return JoinGroup(None, member_id, Subscription(topics), ("range",), None, "c", SESSION,
                     SESSION)


async def join_new(part: CoordinatorPartition, group: str = "g") -> JoinGroupResponse:
    first = await part.handle(group, join())
    assert isinstance(first, JoinGroupResponse)
    assert first.error is ErrorCode.MEMBER_ID_REQUIRED
    second = await part.handle(group, join(first.member_id))
    assert isinstance(second, JoinGroupResponse)
    return second


async def stable_group(part: CoordinatorPartition) -> JoinGroupResponse:
    joined = await join_new(part)
    assert joined.error is ErrorCode.NONE and joined.generation == 1
    synced = await part.handle("g", SyncGroup(None, joined.member_id, 1, None,
                                              {joined.member_id: (("t", 0), ("t", 1))}))
    assert isinstance(synced, SyncGroupResponse)
    assert synced.error is ErrorCode.NONE and synced.assignment == (("t", 0), ("t", 1))
    return joined


async def test_join_sync_persists_the_group_before_answering_sync() -> None:
    log, clock = FakeLog(), Clock()
    part = make(log, clock)
    joined = await join_new(part)
    assert joined.leader_id == joined.member_id and len(joined.members) == 1
    log.hold = asyncio.Event()
    sync = asyncio.ensure_future(part.handle("g", SyncGroup(
        None, joined.member_id, 1, None, {joined.member_id: (("t", 0),)})))
    await async_wait_until(lambda: log.records, 5, what="the group record written (held)")
    assert not sync.done(), "SyncGroup answered before its group record was written"
    assert [type(decode_key(r.key)) for r in log.records] == [GroupKey]
    stored = decode_group_value(log.records[0].value or b"")
    assert stored.generation == 1 and stored.members[0].assignment == (("t", 0),)
    assert "g" not in part.store.groups  # not applied before acknowledged
    log.hold.set()
    response = await asyncio.wait_for(sync, 1)
    assert isinstance(response, SyncGroupResponse) and response.error is ErrorCode.NONE
    assert part.store.groups["g"].generation == 1


async def test_failed_group_write_answers_sync_with_a_coordinator_error() -> None:
    log, clock = FakeLog(), Clock()
    part = make(log, clock)
    joined = await join_new(part)
    log.fail = ErrorCode.NOT_LEADER_OR_FOLLOWER
    response = await part.handle("g", SyncGroup(None, joined.member_id, 1, None, {}))
    assert isinstance(response, SyncGroupResponse)
    assert response.error is ErrorCode.NOT_COORDINATOR


async def test_commit_is_visible_only_once_durable() -> None:
    log, clock = FakeLog(), Clock()
    part = make(log, clock)
    log.hold = asyncio.Event()
    commit = asyncio.ensure_future(part.commit("g", "", -1, None, {
        ("t", 0): OffsetAndMetadata(5, clock.now)}))
    await async_wait_until(lambda: log.records, 5, what="the commit record written (held)")
    assert part.fetch("g", [("t", 0)]) == {("t", 0): None}
    log.hold.set()
    assert await commit is ErrorCode.NONE
    fetched = part.fetch("g", None)
    assert fetched[("t", 0)] is not None and fetched[("t", 0)].offset == 5
    assert isinstance(decode_key(log.records[0].key), OffsetKey)


async def test_commit_failure_maps_to_coordinator_errors_and_changes_nothing() -> None:
    log, clock = FakeLog(), Clock()
    part = make(log, clock)
    for raised, answered in [(ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_COORDINATOR),
                             (ErrorCode.REQUEST_TIMED_OUT, ErrorCode.COORDINATOR_NOT_AVAILABLE),
                             (ErrorCode.NOT_ENOUGH_REPLICAS,
                              ErrorCode.COORDINATOR_NOT_AVAILABLE)]:
        log.fail = raised
        code = await part.commit("g", "", -1, None, {("t", 0): OffsetAndMetadata(1, 0)})
        assert code is answered
    assert part.fetch("g", None) == {}


async def test_a_later_acknowledgement_applies_earlier_writes_in_log_order() -> None:
    log, clock = FakeLog(), Clock()
    part = make(log, clock)
    gates = [asyncio.Event(), asyncio.Event()]
    calls = 0

    async def append(records: Sequence[Record]) -> None:
        nonlocal calls
        gate = gates[calls]
        calls += 1
        await gate.wait()

    part._append = append
    first = asyncio.ensure_future(part.commit("g", "", -1, None,
                                              {("t", 0): OffsetAndMetadata(1, 0)}))
    await asyncio.sleep(0)
    second = asyncio.ensure_future(part.commit("g", "", -1, None,
                                               {("t", 0): OffsetAndMetadata(2, 0)}))
    await asyncio.sleep(0)
    gates[1].set()
    assert await second is ErrorCode.NONE
    assert part.store.offsets["g"][("t", 0)].offset == 2  # first applied, then second
    gates[0].set()
    assert await first is ErrorCode.NONE
    assert part.store.offsets["g"][("t", 0)].offset == 2


async def test_commit_validation() -> None:
    log, clock = FakeLog(), Clock()
    part = make(log, clock)
    offsets = {("t", 0): OffsetAndMetadata(3, 0)}
    assert await part.commit("unknown", "m", 1, None, offsets) is ErrorCode.ILLEGAL_GENERATION
    joined = await stable_group(part)
    assert await part.commit("g", joined.member_id, 0, None, offsets) is \
        ErrorCode.ILLEGAL_GENERATION
    assert await part.commit("g", "stranger", 1, None, offsets) is ErrorCode.UNKNOWN_MEMBER_ID
    assert await part.commit("g", "", -1, None, offsets) is ErrorCode.UNKNOWN_MEMBER_ID
    assert await part.commit("g", joined.member_id, 1, None, offsets) is ErrorCode.NONE


async def test_a_refused_first_join_leaves_no_group_behind() -> None:
    """Kafka creates no group for a JoinGroup it refuses (found by the aiokafka compat suite:
    Strom listed an Empty group, and a later commit got UNKNOWN_MEMBER_ID, not Kafka's
    ILLEGAL_GENERATION); a refused join of an existing group keeps that group."""
    log, clock = FakeLog(), Clock()
    part = make(log, clock)
    short = replace(join(), session_timeout_ms=1)
    refused = await part.handle("new", short)
    assert isinstance(refused, JoinGroupResponse)
    assert refused.error is ErrorCode.INVALID_SESSION_TIMEOUT
    assert "new" not in part.groups
    assert [g.group_id for g in part.listings()] == []
    assert part.describe("new").state is GroupState.DEAD
    offsets = {("t", 0): OffsetAndMetadata(3, 0)}
    assert await part.commit("new", "m", 1, None, offsets) is ErrorCode.ILLEGAL_GENERATION
    await stable_group(part)
    again = await part.handle("g", short)
    assert isinstance(again, JoinGroupResponse)
    assert again.error is ErrorCode.INVALID_SESSION_TIMEOUT
    assert part.describe("g").state is GroupState.STABLE
    pending = await part.handle("other", join())  # MEMBER_ID_REQUIRED: the group stays
    assert isinstance(pending, JoinGroupResponse)
    assert pending.error is ErrorCode.MEMBER_ID_REQUIRED and "other" in part.groups


async def test_reload_restores_offsets_and_the_generation() -> None:
    log, clock = FakeLog(), Clock()
    part = make(log, clock)
    joined = await stable_group(part)
    assert await part.commit("g", joined.member_id, 1, None,
                             {("t", 1): OffsetAndMetadata(7, clock.now)}) is ErrorCode.NONE
    part.unload()
    again = CoordinatorPartition(0, 2, part.settings, log.append, clock, lambda: {"t": 4})
    with pytest.raises(StromError) as err:
        again.fetch("g", None)
    assert err.value.code is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    for record in log.records:
        again.apply_loaded(record)
    again.finish_load(timer=False)
    snap = again.describe("g")
    assert snap.state is GroupState.STABLE and snap.generation == 1
    assert snap.members[0].member_id == joined.member_id
    assert again.fetch("g", [("t", 1)])[("t", 1)] == OffsetAndMetadata(7, clock.now)
    beat = await again.handle("g", Heartbeat(None, joined.member_id, 1))
    assert isinstance(beat, HeartbeatResponse) and beat.error is ErrorCode.NONE


async def test_unload_answers_parked_requests_not_coordinator() -> None:
    log, clock = FakeLog(), Clock()
    part = make(log, clock, delay_ms=5_000)
    first = await part.handle("g", join())
    assert isinstance(first, JoinGroupResponse)
    parked = asyncio.ensure_future(part.handle("g", join(first.member_id)))
    await async_wait_until(lambda: part._waiting, 5, what="the JoinGroup parked")
    assert not parked.done()
    part.unload()
    response = await asyncio.wait_for(parked, 1)
    assert response.error is ErrorCode.NOT_COORDINATOR
    assert part.state is LoadState.UNLOADED
    with pytest.raises(StromError) as err:
        await part.handle("g", join())
    assert err.value.code is ErrorCode.NOT_COORDINATOR


async def test_session_expiry_on_tick_empties_the_group_and_persists_it() -> None:
    log, clock = FakeLog(), Clock()
    part = make(log, clock)
    await stable_group(part)
    assert part.next_deadline_ms() == clock.now + SESSION
    clock.now += SESSION
    part.tick()
    # rebalance (member gone) -> join completes with nobody -> Empty, generation 2, stored
    await async_wait_until(lambda: _stored_empty(part), 5, what="the empty group stored")
    assert part.describe("g").state is GroupState.EMPTY
    assert part.store.groups["g"].generation == 2 and part.store.groups["g"].is_empty
    assert part.store.groups["g"].protocol_type == "consumer"


async def test_expiry_of_an_empty_groups_offsets() -> None:
    log, clock = FakeLog(), Clock()
    part = make(log, clock, retention_ms=60_000)
    joined = await stable_group(part)
    await part.commit("g", joined.member_id, 1, None, {("t", 0): OffsetAndMetadata(1, clock.now)})
    await part.commit("solo", "", -1, None, {("t", 0): OffsetAndMetadata(1, clock.now)})
    clock.now += 120_000  # the member's session also ran out; it is still counted until tick
    assert await part.expire() == 1  # only "solo": g has a member
    assert "solo" not in part.store.offsets and "g" in part.store.offsets
    part.tick()
    await async_wait_until(lambda: _stored_empty(part), 5, what="the empty group stored")
    assert part.describe("g").state is GroupState.EMPTY
    assert await part.expire(clock.now + 59_000) == 0  # empty for < retention
    assert await part.expire(clock.now + 60_000) == 2  # offset + group tombstones
    assert "g" not in part.store.offsets and "g" not in part.store.groups
    assert part.describe("g").state is GroupState.DEAD
    assert log.records[-1].value is None


async def test_delete_rules() -> None:
    log, clock = FakeLog(), Clock()
    part = make(log, clock)
    assert await part.delete("nobody") is ErrorCode.GROUP_ID_NOT_FOUND
    joined = await stable_group(part)
    await part.commit("g", joined.member_id, 1, None, {("t", 0): OffsetAndMetadata(4, 0)})
    assert await part.delete("g") is ErrorCode.NON_EMPTY_GROUP
    left = await part.handle("g", LeaveGroup(None, (LeavingMember(joined.member_id),)))
    assert left.error is ErrorCode.NONE
    await async_wait_until(lambda: _stored_empty(part), 5, what="the empty group stored")
    assert part.describe("g").state is GroupState.EMPTY
    assert await part.delete("g") is ErrorCode.NONE
    assert part.fetch("g", None) == {}
    assert part.describe("g").state is GroupState.DEAD
    assert [r.value for r in log.records[-2:]] == [None, None]
    # a group known only by its offsets (simple commits) may be deleted too
    await part.commit("simple", "", -1, None, {("t", 2): OffsetAndMetadata(9, 0)})
    assert [g.group_id for g in part.listings()] == ["simple"]
    assert await part.delete("simple") is ErrorCode.NONE
    assert part.listings() == []


async def test_partition_growth_of_a_subscribed_topic_rebalances() -> None:
    log, clock = FakeLog(), Clock()
    part = make(log, clock)
    joined = await stable_group(part)
    part.metadata_changed({"t": 4, "other": 9})
    beat = await part.handle("g", Heartbeat(None, joined.member_id, 1))
    assert beat.error is ErrorCode.NONE
    part.metadata_changed({"t": 8, "other": 9})
    beat = await part.handle("g", Heartbeat(None, joined.member_id, 1))
    assert beat.error is ErrorCode.REBALANCE_IN_PROGRESS


async def test_a_static_member_replaced_without_rebalance_is_stored() -> None:
    log, clock = FakeLog(), Clock()
    part = make(log, clock)
    static = replace(join(), group_instance_id="i1")
    first = await part.handle("g", static)
    assert isinstance(first, JoinGroupResponse) and first.error is ErrorCode.NONE
    await part.handle("g", SyncGroup(None, first.member_id, 1, "i1",
                                     {first.member_id: (("t", 0),)}))
    assert part.store.groups["g"].members[0].member_id == first.member_id
    again = await part.handle("g", static)  # the same instance restarts
    assert isinstance(again, JoinGroupResponse) and again.error is ErrorCode.NONE
    assert again.member_id != first.member_id and again.generation == 1
    await async_wait_until(
        lambda: [m.member_id for m in part.store.groups["g"].members] == [again.member_id], 5,
        what="the replacing static member stored")
    stored = part.store.groups["g"]
    assert [m.member_id for m in stored.members] == [again.member_id]
    assert stored.members[0].assignment == (("t", 0),)


async def test_forget_topics_tombstones_every_groups_offsets_of_those_topics() -> None:
    log, clock = FakeLog(), Clock()
    part = make(log, clock)
    await part.commit("a", "", -1, None, {("t", 0): OffsetAndMetadata(1, 0),
                                          ("gone", 0): OffsetAndMetadata(2, 0)})
    await part.commit("b", "", -1, None, {("gone", 3): OffsetAndMetadata(3, 0)})
    assert await part.forget_topics({"gone"}) == 2
    assert part.fetch("a", None) == {("t", 0): OffsetAndMetadata(1, 0)}
    assert part.fetch("b", None) == {}
    assert await part.forget_topics({"gone"}) == 0


async def test_a_group_timer_that_keeps_failing_is_escalated_not_looped() -> None:
    """Issue 13 item 2: the timer logged a traceback every 0.1 s forever; now the supervisor
    backs it off and stops the broker (exit 1, /readyz 503) when it keeps failing."""
    from strom.supervision import RestartPolicy, Supervisor

    fatal: list[str] = []
    Supervisor(lambda name, exc: fatal.append(name),
               RestartPolicy(max_failures=3, window_s=60, initial_backoff_s=0.01,
                             max_backoff_s=0.01)).install()
    settings = GroupSettings(group=GroupConfig(initial_rebalance_delay_ms=0))
    part = CoordinatorPartition(0, 1, settings, FakeLog().append, Clock(), lambda: {"t": 4})
    ticks: list[int] = []

    def broken_tick() -> None:
        ticks.append(1)
        raise RuntimeError("a bug in a group state machine")

    part.tick = broken_tick  # type: ignore[method-assign]
    part.next_deadline_ms = lambda: 0  # type: ignore[method-assign]
    part.finish_load(timer=True)
    timer = part._timer
    assert timer is not None
    with pytest.raises(RuntimeError):
        await asyncio.wait_for(timer, 5)
    assert fatal == ["group-timer-0"] and len(ticks) == 3
