"""One consumer group as its coordinator sees it: Kafka's classic group protocol, sans-I/O.

The rules of JoinGroup / SyncGroup / Heartbeat / LeaveGroup are subtle (who waits for whom, which
error a late or fenced member gets, when a rebalance starts and ends), and they must be testable
without a broker, a socket or a clock. So, in the style of h11, ``Group`` is a plain state machine:
the driver hands it events (``handle(event, now_ms)``) and the passage of time (``tick(now_ms)``),
and it returns outputs -- responses to deliver, keyed by the request id the driver chose, and
actions for logs and metrics. It never blocks: a JoinGroup that must wait for the rest of the group
is parked and its response comes out of a later call. ``next_deadline_ms()`` says when to tick.

States (Kafka's): Empty -> PreparingRebalance -> CompletingRebalance -> Stable, and Dead once the
group is deleted or its coordinator unloads it. What follows Kafka:

- A new dynamic member joins with an empty member id and gets MEMBER_ID_REQUIRED plus its new id,
  then rejoins with it (KIP-394, Kafka >= 2.2). Static members (``group.instance.id``, KIP-345) skip
  that step.
- A static member rejoining with an empty member id replaces its old member id; in Stable with an
  unchanged subscription this costs no rebalance and it keeps its assignment. The old member id is
  fenced (FENCED_INSTANCE_ID) from then on.
- A rebalance waits up to the largest rebalance timeout (the consumer's ``max.poll.interval.ms``)
  for known members to rejoin; dynamic members that do not are dropped. The first rebalance of an
  empty group waits ``initial_rebalance_delay_ms`` so a starting fleet joins in one generation.
- Members whose session times out (no heartbeat, no parked request) are removed and the group
  rebalances; so do members that leave, members that change subscription, the leader rejoining,
  and a change in the partition count of a subscribed topic (``MetadataChanged``).
- After the join completes, members that never send SyncGroup within the rebalance timeout are
  removed (Kafka 3.x pending-sync expiry).

The coordinator does not run the assignor: the leader does, client-side, from the member list it
gets in its JoinGroup response, and hands the result back in SyncGroup. ``max.poll.interval.ms``
itself is enforced by the client (it leaves the group); here it only bounds the join phase.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from strom.protocol.errors import ErrorCode

TopicPartition = tuple[str, int]


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


#: The states each state may be entered from: Kafka's ``ClassicGroupState.validPreviousStates``.
#: Entering a state from any other is a bug in this module, so it raises instead of drifting.
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset({
        GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


class IllegalStateTransition(RuntimeError):
    """A group was moved between two states Kafka's group state machine does not connect."""


@dataclass(frozen=True)
class GroupConfig:
    """Broker-side group settings (Kafka's ``group.*`` configs, same defaults)."""

    min_session_timeout_ms: int = 6_000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3_000
    max_size: int | None = None


@dataclass(frozen=True)
class Subscription:
    """What a member asks for; the coordinator compares it, the leader's assignor reads it."""

    topics: tuple[str, ...]
    owned_partitions: tuple[TopicPartition, ...] = ()
    user_data: bytes = b""
    # Kafka-protocol members: each protocol's metadata as the member sent it, (name, bytes).
    # Kafka keeps it opaque, and so do we: Kafka Connect's ``connect`` protocol and Kafka
    # Streams' user data reach the leader unchanged. Empty for Strom (gRPC) members, whose
    # structured fields above are the whole subscription. Part of the comparison that decides
    # on a rebalance, as Kafka compares members' protocol metadata.
    protocol_metadata: tuple[tuple[str, bytes], ...] = ()

    def metadata_for(self, protocol: str | None) -> bytes | None:
        """The metadata the member sent for ``protocol``, or None (a Strom member)."""
        for name, data in self.protocol_metadata:
            if name == protocol:
                return data
        return None


# ---- events in ------------------------------------------------------------------------------


@dataclass(frozen=True)
class JoinGroup:
    request_id: object
    member_id: str
    subscription: Subscription
    protocols: tuple[str, ...] = ("range",)
    group_instance_id: str | None = None
    client_id: str = "strom"
    session_timeout_ms: int = 45_000
    rebalance_timeout_ms: int = 300_000
    protocol_type: str = "consumer"


@dataclass(frozen=True)
class SyncGroup:
    request_id: object
    member_id: str
    generation: int
    group_instance_id: str | None = None
    # Only the leader sends assignments; members it leaves out get an empty list.
    assignments: Mapping[str, tuple[TopicPartition, ...]] | None = None
    # A Kafka-protocol leader's assignment bytes per member, relayed unchanged (Kafka's are
    # opaque: a Connect assignment or Streams' task user data); ``assignments`` holds what
    # could be read from them for Strom members.
    assignment_data: Mapping[str, bytes] | None = None


@dataclass(frozen=True)
class Heartbeat:
    request_id: object
    member_id: str
    generation: int
    group_instance_id: str | None = None


@dataclass(frozen=True)
class LeavingMember:
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True)
class LeaveGroup:
    request_id: object
    members: tuple[LeavingMember, ...]


@dataclass(frozen=True)
class MetadataChanged:
    """The cluster's partition counts (at least for the topics the group subscribes to)."""

    partition_counts: Mapping[str, int]


Event = JoinGroup | SyncGroup | Heartbeat | LeaveGroup | MetadataChanged


# ---- outputs --------------------------------------------------------------------------------


@dataclass(frozen=True)
class JoinedMember:
    member_id: str
    group_instance_id: str | None
    subscription: Subscription


@dataclass(frozen=True)
class JoinGroupResponse:
    request_id: object
    error: ErrorCode
    member_id: str = ""
    generation: int = -1
    protocol_name: str | None = None
    leader_id: str = ""
    # Filled for the leader only: the input to its assignor.
    members: tuple[JoinedMember, ...] = ()


@dataclass(frozen=True)
class SyncGroupResponse:
    request_id: object
    error: ErrorCode
    assignment: tuple[TopicPartition, ...] = ()
    assignment_data: bytes = b""


@dataclass(frozen=True)
class HeartbeatResponse:
    request_id: object
    error: ErrorCode


@dataclass(frozen=True)
class LeaveGroupResponse:
    request_id: object
    error: ErrorCode
    member_errors: tuple[tuple[LeavingMember, ErrorCode], ...] = ()


@dataclass(frozen=True)
class RebalanceStarted:
    """For logs and the rebalance counter; ``generation`` is the one being left."""

    group_id: str
    generation: int
    reason: str


@dataclass(frozen=True)
class RebalanceCompleted:
    """The leader's assignment is in: ``duration_ms`` runs from the first RebalanceStarted."""

    group_id: str
    generation: int
    duration_ms: int


@dataclass(frozen=True)
class MemberRemoved:
    group_id: str
    member_id: str
    reason: str


@dataclass(frozen=True)
class StateChanged:
    """The driver persists group metadata (``offsets.group_record``) on entering Stable or Empty."""

    group_id: str
    old: GroupState
    new: GroupState


Response = JoinGroupResponse | SyncGroupResponse | HeartbeatResponse | LeaveGroupResponse
Action = RebalanceStarted | RebalanceCompleted | MemberRemoved | StateChanged
Output = Response | Action


# ---- the state machine ----------------------------------------------------------------------


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    subscription: Subscription
    protocols: tuple[str, ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    deadline_ms: int
    assignment: tuple[TopicPartition, ...] = ()
    assignment_data: bytes = b""
    join_request: object | None = None
    awaiting_join: bool = False
    sync_request: object | None = None
    awaiting_sync: bool = False
    synced: bool = False  # sent SyncGroup in this generation (pending-sync expiry spares it)


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    subscription: Subscription
    assignment: tuple[TopicPartition, ...]
    session_timeout_ms: int = 45_000
    rebalance_timeout_ms: int = 300_000
    assignment_data: bytes = b""


@dataclass(frozen=True)
class GroupSnapshot:
    """What admin DescribeGroups and the ``__consumer_offsets`` group record need."""

    group_id: str
    state: GroupState
    generation: int
    protocol_type: str | None
    protocol_name: str | None
    leader_id: str | None
    members: tuple[MemberDescription, ...]


def _default_member_id(client_id: str) -> str:
    return f"{client_id}-{uuid.uuid4()}"


@dataclass
class _Pending:
    deadline_ms: int


class Group:
    """The coordinator's view of one group. Not thread-safe: one driver task owns it."""

    def __init__(
        self,
        group_id: str,
        config: GroupConfig | None = None,
        new_member_id: Callable[[str], str] = _default_member_id,
    ) -> None:
        self.group_id = group_id
        self.config = config or GroupConfig()
        self._new_member_id = new_member_id
        self.state = GroupState.EMPTY
        self.generation = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        self._pending: dict[str, _Pending] = {}  # ids handed out with MEMBER_ID_REQUIRED
        self._join_deadline_ms: int | None = None
        self._initial_join_start_ms: int | None = None
        self._sync_deadline_ms: int | None = None
        self._rebalance_start_ms: int | None = None
        self._partition_counts: dict[str, int] = {}
        # Subscribed topics' partition counts when the current generation formed (None: unknown).
        self._generation_counts: dict[str, int] | None = None
        self._out: list[Output] = []

    # ---- public front ---------------------------------------------------------------------

    def handle(self, event: Event, now_ms: int) -> list[Output]:
        if isinstance(event, JoinGroup):
            self._join(event, now_ms)
        elif isinstance(event, SyncGroup):
            self._sync(event, now_ms)
        elif isinstance(event, Heartbeat):
            self._heartbeat(event, now_ms)
        elif isinstance(event, LeaveGroup):
            self._leave(event, now_ms)
        else:
            self._metadata_changed(event, now_ms)
        return self._drain()

    def tick(self, now_ms: int) -> list[Output]:
        """Expire sessions, pending members, the join phase and pending syncs due by ``now_ms``."""
        for member_id, pending in list(self._pending.items()):
            if pending.deadline_ms <= now_ms:
                del self._pending[member_id]
                self._maybe_complete_join(now_ms)
        for member in list(self.members.values()):
            if member.member_id not in self.members:
                continue
            keep_alive = member.awaiting_join or member.awaiting_sync
            if not keep_alive and member.deadline_ms <= now_ms:
                self._remove_member(member, "session timeout", now_ms)
        if (
            self.state is GroupState.PREPARING_REBALANCE
            and self._join_deadline_ms is not None
            and self._join_deadline_ms <= now_ms
        ):
            self._complete_join(now_ms)
        if self._sync_deadline_ms is not None and self._sync_deadline_ms <= now_ms:
            self._expire_pending_sync(now_ms)
        return self._drain()

    def next_deadline_ms(self) -> int | None:
        """The earliest time at which ``tick`` has something to do (None: nothing scheduled)."""
        times = [m.deadline_ms for m in self.members.values()]
        times += [p.deadline_ms for p in self._pending.values()]
        if self.state is GroupState.PREPARING_REBALANCE and self._join_deadline_ms is not None:
            times.append(self._join_deadline_ms)
        if self._sync_deadline_ms is not None:
            times.append(self._sync_deadline_ms)
        return min(times) if times else None

    def is_unused(self) -> bool:
        """No member, no member id handed out and no generation yet: what a group is after
        the JoinGroup that created it was refused."""
        return not self.members and not self._pending and self.generation == 0 \
            and self.state is GroupState.EMPTY

    def validate_offset_commit(
        self,
        member_id: str,
        generation: int,
        group_instance_id: str | None = None,
        now_ms: int | None = None,
    ) -> ErrorCode:
        """May this commit be written? A valid member's commit also counts as a heartbeat."""
        if self.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation < 0 and self.state is GroupState.EMPTY:
            return ErrorCode.NONE  # a standalone (assign(), admin) commit
        error = self._validate_member(member_id, group_instance_id, generation)
        if error is not ErrorCode.NONE:
            return error
        if self.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        if now_ms is not None:
            self._touch(self.members[member_id], now_ms)
        return ErrorCode.NONE

    def delete(self) -> ErrorCode:
        """Admin DeleteGroups: only an empty group may go."""
        if self.state is GroupState.DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if self.state is not GroupState.EMPTY:
            return ErrorCode.NON_EMPTY_GROUP
        self._set_state(GroupState.DEAD)
        self._out.clear()
        return ErrorCode.NONE

    def unload(self, error: ErrorCode = ErrorCode.NOT_COORDINATOR) -> list[Output]:
        """The coordinator lost the group's partition: answer everything parked, go Dead."""
        for member in self.members.values():
            if member.awaiting_join:
                self._respond_join(member, JoinGroupResponse(member.join_request, error))
            if member.awaiting_sync:
                self._respond_sync(member, SyncGroupResponse(member.sync_request, error))
        self._set_state(GroupState.DEAD)
        return self._drain()

    def snapshot(self) -> GroupSnapshot:
        return GroupSnapshot(
            group_id=self.group_id,
            state=self.state,
            generation=self.generation,
            protocol_type=self.protocol_type,
            protocol_name=self.protocol_name,
            leader_id=self.leader_id,
            members=tuple(
                MemberDescription(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.subscription,
                    m.assignment,
                    m.session_timeout_ms,
                    m.rebalance_timeout_ms,
                    m.assignment_data,
                )
                for m in self.members.values()
            ),
        )

    @classmethod
    def restore(
        cls,
        snapshot: GroupSnapshot,
        now_ms: int,
        config: GroupConfig | None = None,
        new_member_id: Callable[[str], str] = _default_member_id,
    ) -> Group:
        """Rebuild a group a new coordinator loaded from ``__consumer_offsets`` (Kafka does the
        same): members keep their ids and assignment and get a fresh session, so consumers that
        keep heartbeating see no rebalance, and those that died expire as usual."""
        group = cls(snapshot.group_id, config, new_member_id)
        group.generation = snapshot.generation
        group.protocol_type = snapshot.protocol_type
        group.protocol_name = snapshot.protocol_name
        group.leader_id = snapshot.leader_id
        for d in snapshot.members:
            group.members[d.member_id] = Member(
                member_id=d.member_id,
                group_instance_id=d.group_instance_id,
                client_id=d.client_id,
                subscription=d.subscription,
                protocols=(snapshot.protocol_name,) if snapshot.protocol_name else (),
                session_timeout_ms=d.session_timeout_ms,
                rebalance_timeout_ms=d.rebalance_timeout_ms,
                deadline_ms=now_ms + d.session_timeout_ms,
                assignment=d.assignment,
                assignment_data=d.assignment_data,
                synced=True,
            )
            if d.group_instance_id is not None:
                group.static_members[d.group_instance_id] = d.member_id
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        return group

    def subscribed_topics(self) -> frozenset[str]:
        return frozenset(t for m in self.members.values() for t in m.subscription.topics)

    # ---- JoinGroup ------------------------------------------------------------------------

    def _join(self, ev: JoinGroup, now: int) -> None:
        def reject(error: ErrorCode) -> None:
            self._out.append(JoinGroupResponse(ev.request_id, error, member_id=ev.member_id))

        if not (
            self.config.min_session_timeout_ms
            <= ev.session_timeout_ms
            <= self.config.max_session_timeout_ms
        ):
            return reject(ErrorCode.INVALID_SESSION_TIMEOUT)
        if self.state is GroupState.DEAD:
            return reject(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if not self._supports(ev):
            return reject(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if ev.member_id == "":
            if ev.group_instance_id is not None:
                old_id = self.static_members.get(ev.group_instance_id)
                if old_id is not None and old_id in self.members:
                    return self._replace_static_member(ev, old_id, now)
                return self._add_member_and_rebalance(ev, self._new_member_id(ev.client_id), now)
            if self._full():
                return reject(ErrorCode.GROUP_MAX_SIZE_REACHED)
            new_id = self._new_member_id(ev.client_id)
            self._pending[new_id] = _Pending(now + ev.session_timeout_ms)
            self._out.append(
                JoinGroupResponse(ev.request_id, ErrorCode.MEMBER_ID_REQUIRED, member_id=new_id)
            )
            return None
        if ev.member_id in self._pending:
            del self._pending[ev.member_id]
            return self._add_member_and_rebalance(ev, ev.member_id, now)
        error = self._validate_member(ev.member_id, ev.group_instance_id, None)
        if error is not ErrorCode.NONE:
            return reject(error)
        member = self.members[ev.member_id]
        changed = member.subscription != ev.subscription or member.protocols != ev.protocols
        if self.state is GroupState.PREPARING_REBALANCE:
            self._update_member(member, ev, now)
            self._maybe_complete_join(now)
        elif self.state is GroupState.COMPLETING_REBALANCE:
            if changed:
                self._update_member(member, ev, now)
                self._prepare_rebalance(now, f"member {member.member_id} changed subscription")
            else:
                self._out.append(self._join_response(ev.request_id, member))
        elif self.state is GroupState.STABLE:
            if changed or member.member_id == self.leader_id:
                self._update_member(member, ev, now)
                reason = "leader rejoined" if not changed else "subscription changed"
                self._prepare_rebalance(now, f"member {member.member_id}: {reason}")
            else:
                self._touch(member, now)
                self._out.append(self._join_response(ev.request_id, member))
        else:
            reject(ErrorCode.UNKNOWN_MEMBER_ID)
        return None

    def _supports(self, ev: JoinGroup) -> bool:
        if not ev.protocols:
            return False
        if not self.members:
            return True
        if ev.protocol_type != self.protocol_type:
            return False
        common = set(ev.protocols)
        for m in self.members.values():
            if m.member_id != ev.member_id:
                common &= set(m.protocols)
        return bool(common)

    def _full(self) -> bool:
        limit = self.config.max_size
        return limit is not None and len(self.members) + len(self._pending) >= limit

    def _add_member_and_rebalance(self, ev: JoinGroup, member_id: str, now: int) -> None:
        if self._full():
            self._out.append(
                JoinGroupResponse(ev.request_id, ErrorCode.GROUP_MAX_SIZE_REACHED, member_id)
            )
            return
        member = Member(
            member_id=member_id,
            group_instance_id=ev.group_instance_id,
            client_id=ev.client_id,
            subscription=ev.subscription,
            protocols=ev.protocols,
            session_timeout_ms=ev.session_timeout_ms,
            rebalance_timeout_ms=ev.rebalance_timeout_ms,
            deadline_ms=now + ev.session_timeout_ms,
            join_request=ev.request_id,
            awaiting_join=True,
        )
        if not self.members:
            self.protocol_type = ev.protocol_type
        self.members[member_id] = member
        if ev.group_instance_id is not None:
            self.static_members[ev.group_instance_id] = member_id
        if self.leader_id is None:
            self.leader_id = member_id
        if self.state is GroupState.PREPARING_REBALANCE:
            if self._initial_join_start_ms is not None and self._join_deadline_ms is not None:
                # Kafka's InitialDelayedJoin: each newcomer extends the wait, within the bound.
                bound = self._initial_join_start_ms + self._rebalance_timeout()
                self._join_deadline_ms = min(
                    max(self._join_deadline_ms, now + self.config.initial_rebalance_delay_ms),
                    bound,
                )
            self._maybe_complete_join(now)
        else:
            self._prepare_rebalance(now, f"member {member_id} joined")

    def _replace_static_member(self, ev: JoinGroup, old_id: str, now: int) -> None:
        old = self.members.pop(old_id)
        new_id = self._new_member_id(ev.client_id)
        if old.awaiting_join:
            self._out.append(
                JoinGroupResponse(old.join_request, ErrorCode.FENCED_INSTANCE_ID, old_id)
            )
        if old.awaiting_sync:
            self._out.append(SyncGroupResponse(old.sync_request, ErrorCode.FENCED_INSTANCE_ID))
        changed = old.subscription != ev.subscription or old.protocols != ev.protocols
        member = Member(
            member_id=new_id,
            group_instance_id=ev.group_instance_id,
            client_id=ev.client_id,
            subscription=ev.subscription,
            protocols=ev.protocols,
            session_timeout_ms=ev.session_timeout_ms,
            rebalance_timeout_ms=ev.rebalance_timeout_ms,
            deadline_ms=now + ev.session_timeout_ms,
            assignment=old.assignment,
            assignment_data=old.assignment_data,
        )
        self.members[new_id] = member
        assert ev.group_instance_id is not None
        self.static_members[ev.group_instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        self._out.append(MemberRemoved(self.group_id, old_id, "replaced by static member restart"))
        if self.state is GroupState.STABLE and not changed:
            # KIP-345: same instance, same subscription: keep the generation and assignment.
            self._out.append(self._join_response(ev.request_id, member, include_members=False))
            return
        member.join_request, member.awaiting_join = ev.request_id, True
        if self.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(now)
        else:
            self._prepare_rebalance(now, f"static member {ev.group_instance_id} rejoined")

    def _update_member(self, member: Member, ev: JoinGroup, now: int) -> None:
        member.subscription = ev.subscription
        member.protocols = ev.protocols
        member.client_id = ev.client_id
        member.session_timeout_ms = ev.session_timeout_ms
        member.rebalance_timeout_ms = ev.rebalance_timeout_ms
        if member.awaiting_join and member.join_request != ev.request_id:
            # A retried join replaces the parked one; the old request gets nothing useful.
            self._out.append(
                JoinGroupResponse(member.join_request, ErrorCode.REBALANCE_IN_PROGRESS)
            )
        member.join_request, member.awaiting_join = ev.request_id, True
        self._touch(member, now)

    def _join_response(
        self, request_id: object, member: Member, include_members: bool = True
    ) -> JoinGroupResponse:
        members: tuple[JoinedMember, ...] = ()
        if include_members and member.member_id == self.leader_id:
            members = tuple(
                JoinedMember(m.member_id, m.group_instance_id, m.subscription)
                for m in self.members.values()
            )
        return JoinGroupResponse(
            request_id,
            ErrorCode.NONE,
            member_id=member.member_id,
            generation=self.generation,
            protocol_name=self.protocol_name,
            leader_id=self.leader_id or "",
            members=members,
        )

    # ---- rebalance ------------------------------------------------------------------------

    def _rebalance_timeout(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def _prepare_rebalance(self, now: int, reason: str) -> None:
        if self.state is GroupState.COMPLETING_REBALANCE:
            for member in self.members.values():
                if member.awaiting_sync:
                    self._respond_sync(
                        member,
                        SyncGroupResponse(member.sync_request, ErrorCode.REBALANCE_IN_PROGRESS),
                    )
        self._sync_deadline_ms = None
        if self.state is GroupState.EMPTY:
            self._initial_join_start_ms = now
            self._join_deadline_ms = now + min(
                self.config.initial_rebalance_delay_ms, self._rebalance_timeout()
            )
        else:
            self._initial_join_start_ms = None
            self._join_deadline_ms = now + self._rebalance_timeout()
        if self._rebalance_start_ms is None:
            self._rebalance_start_ms = now
        self._set_state(GroupState.PREPARING_REBALANCE)
        self._out.append(RebalanceStarted(self.group_id, self.generation, reason))
        self._maybe_complete_join(now)

    def _maybe_complete_join(self, now: int) -> None:
        if self.state is not GroupState.PREPARING_REBALANCE:
            return
        if self._initial_join_start_ms is not None and self.members:
            # The initial delay runs its course (Kafka's InitialDelayedJoin).
            if self._join_deadline_ms is not None and self._join_deadline_ms <= now:
                self._complete_join(now)
            return
        all_joined = all(m.awaiting_join for m in self.members.values())
        if all_joined and not self._pending:
            self._complete_join(now)

    def _complete_join(self, now: int) -> None:
        for member in list(self.members.values()):
            if not member.awaiting_join and member.group_instance_id is None:
                self._remove_member(member, "did not rejoin within the rebalance timeout", now)
        if self.state is not GroupState.PREPARING_REBALANCE:
            return
        self._join_deadline_ms = None
        self._initial_join_start_ms = None
        self.generation += 1
        if not self.members:
            # The protocol type stays (as in Kafka): an empty *consumer* group's offsets expire
            # from the time it became empty (KIP-211), which needs to know it was one.
            self.protocol_name = None
            self.leader_id = None
            self._rebalance_start_ms = None
            self._set_state(GroupState.EMPTY)
            return
        if self.leader_id not in self.members or not self.members[self.leader_id].awaiting_join:
            joined = [m.member_id for m in self.members.values() if m.awaiting_join]
            self.leader_id = joined[0] if joined else next(iter(self.members))
        self.protocol_name = self._select_protocol()
        self._generation_counts = self._subscribed_counts() if self._partition_counts else None
        self._set_state(GroupState.COMPLETING_REBALANCE)
        self._sync_deadline_ms = now + self._rebalance_timeout()
        for member in self.members.values():
            member.awaiting_sync = False
            member.sync_request = None
            self._touch(member, now)
            if member.awaiting_join:
                self._respond_join(member, self._join_response(member.join_request, member))

    def _select_protocol(self) -> str:
        """Kafka's vote: common protocols only, each member votes its first choice, most wins."""
        members = list(self.members.values())
        common = set(members[0].protocols)
        for m in members[1:]:
            common &= set(m.protocols)
        votes: dict[str, int] = {}
        for m in members:
            choice = next(p for p in m.protocols if p in common)
            votes[choice] = votes.get(choice, 0) + 1
        first_seen = {p: i for i, p in enumerate(members[0].protocols)}
        return max(votes, key=lambda p: (votes[p], -first_seen[p]))

    # ---- SyncGroup ------------------------------------------------------------------------

    def _sync(self, ev: SyncGroup, now: int) -> None:
        def reply(error: ErrorCode, member: Member | None = None) -> None:
            self._out.append(SyncGroupResponse(
                ev.request_id, error, member.assignment if member else (),
                member.assignment_data if member else b""))

        if self.state is GroupState.DEAD:
            return reply(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        error = self._validate_member(ev.member_id, ev.group_instance_id, ev.generation)
        if error is not ErrorCode.NONE:
            return reply(error)
        member = self.members[ev.member_id]
        if self.state is GroupState.PREPARING_REBALANCE:
            return reply(ErrorCode.REBALANCE_IN_PROGRESS)
        if self.state is GroupState.EMPTY:
            return reply(ErrorCode.UNKNOWN_MEMBER_ID)
        self._touch(member, now)
        if self.state is GroupState.STABLE:
            self._mark_synced(member)
            return reply(ErrorCode.NONE, member)
        member.sync_request, member.awaiting_sync = ev.request_id, True
        if ev.member_id == self.leader_id:
            given = ev.assignments or {}
            data = ev.assignment_data or {}
            for m in self.members.values():
                m.assignment = tuple(given.get(m.member_id, ()))
                m.assignment_data = data.get(m.member_id, b"")
            self._set_state(GroupState.STABLE)
            started = self._rebalance_start_ms if self._rebalance_start_ms is not None else now
            self._rebalance_start_ms = None
            self._out.append(RebalanceCompleted(self.group_id, self.generation, now - started))
            for m in self.members.values():
                if m.awaiting_sync:
                    self._respond_sync(
                        m,
                        SyncGroupResponse(
                            m.sync_request, ErrorCode.NONE, m.assignment, m.assignment_data
                        ),
                    )
                    self._mark_synced(m)
        return None

    def _mark_synced(self, member: Member) -> None:
        member.sync_request = None
        member.awaiting_sync = False
        member.synced = True
        if all(m.synced for m in self.members.values()):
            self._sync_deadline_ms = None

    def _expire_pending_sync(self, now: int) -> None:
        self._sync_deadline_ms = None
        if self.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        laggards = [m for m in self.members.values() if not m.synced]
        for member in laggards:
            if member.awaiting_sync:
                self._respond_sync(
                    member,
                    SyncGroupResponse(member.sync_request, ErrorCode.REBALANCE_IN_PROGRESS),
                )
        for member in laggards:
            self._remove_member(member, "did not sync within the rebalance timeout", now)

    # ---- Heartbeat, LeaveGroup, metadata --------------------------------------------------

    def _heartbeat(self, ev: Heartbeat, now: int) -> None:
        def reply(error: ErrorCode) -> None:
            self._out.append(HeartbeatResponse(ev.request_id, error))

        if self.state is GroupState.DEAD:
            return reply(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        error = self._validate_member(ev.member_id, ev.group_instance_id, ev.generation)
        if error is not ErrorCode.NONE:
            return reply(error)
        if self.state is GroupState.EMPTY:
            return reply(ErrorCode.UNKNOWN_MEMBER_ID)
        self._touch(self.members[ev.member_id], now)
        if self.state is GroupState.PREPARING_REBALANCE:
            return reply(ErrorCode.REBALANCE_IN_PROGRESS)
        return reply(ErrorCode.NONE)

    def _leave(self, ev: LeaveGroup, now: int) -> None:
        if self.state is GroupState.DEAD:
            self._out.append(LeaveGroupResponse(ev.request_id, ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        results: list[tuple[LeavingMember, ErrorCode]] = []
        for leaving in ev.members:
            member_id = leaving.member_id
            error = ErrorCode.NONE
            if leaving.group_instance_id is not None:
                static_id = self.static_members.get(leaving.group_instance_id)
                if static_id is None or static_id not in self.members:
                    error = ErrorCode.UNKNOWN_MEMBER_ID
                elif member_id and member_id != static_id:
                    error = ErrorCode.FENCED_INSTANCE_ID
                else:
                    member_id = static_id
            elif member_id in self._pending:
                del self._pending[member_id]
                self._maybe_complete_join(now)
                results.append((leaving, error))
                continue
            elif member_id not in self.members:
                error = ErrorCode.UNKNOWN_MEMBER_ID
            if error is ErrorCode.NONE:
                self._remove_member(self.members[member_id], "left the group", now)
            results.append((leaving, error))
        self._out.append(LeaveGroupResponse(ev.request_id, ErrorCode.NONE, tuple(results)))

    def _metadata_changed(self, ev: MetadataChanged, now: int) -> None:
        """Rebalance when a subscribed topic's partition count differs from the one the current
        generation was formed with (a topic appearing counts). Feed the driver's metadata when
        the group is created and on every change; the first feed after a generation without
        any is only a baseline."""
        self._partition_counts.update(ev.partition_counts)
        if self.state not in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            return
        if self._generation_counts is None:
            self._generation_counts = self._subscribed_counts()
            return
        if self._subscribed_counts() != self._generation_counts:
            self._prepare_rebalance(now, "partition count of a subscribed topic changed")

    def _subscribed_counts(self) -> dict[str, int]:
        topics = self.subscribed_topics()
        return {t: n for t, n in self._partition_counts.items() if t in topics}

    # ---- helpers --------------------------------------------------------------------------

    def _validate_member(
        self, member_id: str, group_instance_id: str | None, generation: int | None
    ) -> ErrorCode:
        if group_instance_id is not None:
            static_id = self.static_members.get(group_instance_id)
            if static_id is not None and static_id != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation is not None and generation != self.generation:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    def _touch(self, member: Member, now: int) -> None:
        member.deadline_ms = now + member.session_timeout_ms

    def _remove_member(self, member: Member, reason: str, now: int) -> None:
        self.members.pop(member.member_id, None)
        if (
            member.group_instance_id is not None
            and self.static_members.get(member.group_instance_id) == member.member_id
        ):
            del self.static_members[member.group_instance_id]
        if member.awaiting_join:
            self._out.append(
                JoinGroupResponse(
                    member.join_request, ErrorCode.UNKNOWN_MEMBER_ID, member.member_id
                )
            )
        if member.awaiting_sync:
            self._out.append(SyncGroupResponse(member.sync_request, ErrorCode.UNKNOWN_MEMBER_ID))
        self._out.append(MemberRemoved(self.group_id, member.member_id, reason))
        if self.leader_id == member.member_id:
            self.leader_id = next(iter(self.members), None)
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(now, f"member {member.member_id} removed: {reason}")
        elif self.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(now)

    def _respond_join(self, member: Member, response: JoinGroupResponse) -> None:
        member.join_request, member.awaiting_join = None, False
        self._out.append(response)

    def _respond_sync(self, member: Member, response: SyncGroupResponse) -> None:
        member.sync_request, member.awaiting_sync = None, False
        self._out.append(response)

    def _set_state(self, new: GroupState) -> None:
        if new is not self.state:
            if self.state not in VALID_PREVIOUS_STATES[new]:
                raise IllegalStateTransition(
                    f"group {self.group_id!r}: {self.state.value} -> {new.value} is not a "
                    f"transition of the group state machine")
            self._out.append(StateChanged(self.group_id, self.state, new))
            self.state = new
        if new is GroupState.COMPLETING_REBALANCE:
            for m in self.members.values():
                m.synced = False

    def _drain(self) -> list[Output]:
        out, self._out = self._out, []
        return out


__all__ = [
    "Event",
    "Group",
    "GroupConfig",
    "GroupSnapshot",
    "GroupState",
    "Heartbeat",
    "JoinGroup",
    "JoinGroupResponse",
    "JoinedMember",
    "LeaveGroup",
    "LeaveGroupResponse",
    "LeavingMember",
    "MemberDescription",
    "MemberRemoved",
    "MetadataChanged",
    "Output",
    "RebalanceCompleted",
    "RebalanceStarted",
    "StateChanged",
    "Subscription",
    "SyncGroup",
    "SyncGroupResponse",
]
