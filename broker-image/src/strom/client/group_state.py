"""A consumer's group membership as a state machine, without I/O (h11's ``_state.py`` style).

Every rule of Kafka's ``ConsumerCoordinator`` that does not wait lives here: what to revoke
before joining, what a JoinGroup/SyncGroup/Heartbeat answer means, what an assignment changes,
when a commit failure costs the generation, when joining has failed for too long, when the
application stopped polling. Inputs are responses, the clock (``now_ms`` arguments) and the
user's calls; outputs are the requests to send and the ``RebalanceCallbacks`` the listener must
hear. The driver (``group_member.GroupMember``) owns the sockets, the timers and the fetcher's
subscription state, and is the only caller; these rules are tested without a broker.

The join protocol's phase is explicit and moves only along ``MOVES`` (an illegal move raises
``IllegalTransition``, a bug in the driver, never a network condition):

    UNJOINED --begin_join--> JOINING --join ok--> SYNCING --sync ok--> STABLE
        ^                       |                    |                   |
        +--- round ended without an assignment ------+     begin_join ---+--> JOINING
        +--- reset / leave (the generation is gone) -------------------------+

A round that ends without an assignment (a retriable answer, an error, a cancelled step) goes
back to STABLE when the member still holds a generation (it keeps its partitions and
heartbeats, as Kafka's member does during a rebalance) and to UNJOINED otherwise. A reset
(UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION from a heartbeat or commit) that arrives while a round is
in flight clears the generation only: the round's own answer decides where it ends.
"""

from __future__ import annotations

import enum
import logging
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field

from strom.client.assignors import ASSIGNORS, Assignor, MemberSubscription
from strom.client.commits import CommitFailedError
from strom.client.consumer_settings import ConsumerSettings
from strom.client.models import TopicPartition
from strom.protocol.errors import ErrorCode, Handling, StromError, codes_with, error_code_from_int
from strom.protocol.v1 import broker_pb2, common_pb2, group_pb2

log = logging.getLogger("strom.client.group")

#: Errors after which the member is forgotten by the group: reset and rejoin (partitions lost).
RESET_ERRORS = codes_with(Handling.RESET_MEMBER)
_GEN = struct.Struct(">i")


@dataclass
class RebalanceCallbacks:
    """What the front must tell the listener, in this order: lost or revoked, then assigned."""

    revoked: list[TopicPartition] = field(default_factory=list)
    lost: list[TopicPartition] = field(default_factory=list)
    assigned: list[TopicPartition] | None = None


class Phase(enum.Enum):
    UNJOINED = "unjoined"   #: no generation: the member must join
    JOINING = "joining"     #: a JoinGroup is in flight
    SYNCING = "syncing"     #: joined a generation, SyncGroup in flight
    STABLE = "stable"       #: holds a generation (and its assignment): heartbeats


MOVES: Mapping[Phase, frozenset[Phase]] = {
    Phase.UNJOINED: frozenset({Phase.JOINING}),
    Phase.JOINING: frozenset({Phase.SYNCING, Phase.UNJOINED, Phase.STABLE}),
    Phase.SYNCING: frozenset({Phase.STABLE, Phase.UNJOINED}),
    Phase.STABLE: frozenset({Phase.JOINING, Phase.UNJOINED}),
}


class IllegalTransition(RuntimeError):
    """The driver asked for a move the join protocol does not have (a bug, not a network
    condition)."""


@dataclass(frozen=True)
class AssignmentPlan:
    """What a SyncGroup assignment changes: ``new`` owned from now on, ``revoked`` moved away
    (readable until the listener heard of them), ``added`` newly owned (need their committed
    offsets)."""

    new: frozenset[TopicPartition]
    revoked: frozenset[TopicPartition]
    added: frozenset[TopicPartition]

    @property
    def readable(self) -> list[TopicPartition]:
        """The partitions the fetcher keeps until the revocation is applied."""
        return sorted(self.new | self.revoked)


@dataclass(frozen=True)
class LeaderInput:
    """The leader's view of a generation: the chosen assignor and the members' subscriptions."""

    name: str
    assignor: Assignor
    members: list[MemberSubscription]
    topics: frozenset[str]


class HeartbeatOutcome(enum.Enum):
    OK = "ok"
    REJOIN = "rejoin"   #: the group is rebalancing: wake poll() so it rejoins now
    RESET = "reset"     #: the member was forgotten: partitions lost, wake poll()


class MembershipState:
    """The protocol state of one consumer's membership. Plain attribute reads are safe from
    the front's thread; every change happens on the driver's loop."""

    def __init__(self, group_id: str, settings: ConsumerSettings, now_ms: float) -> None:
        self.group_id = group_id
        self.settings = settings
        self.instance_id = settings.group_instance_id
        self.cooperative = settings.cooperative
        # subscription (written by the front between polls)
        self.subscribed = False
        self.topics: frozenset[str] = frozenset()
        self.pattern: re.Pattern[str] | None = None
        self.sub_version = 0
        # membership
        self.phase = Phase.UNJOINED
        self.member_id = ""
        self.generation = -1
        self.protocol: str | None = None
        self.owned: set[TopicPartition] = set()
        self.rejoin_needed = True
        self.fatal: StromError | None = None
        self.closed = False
        self.pending_apply: set[TopicPartition] | None = None
        """After revoked callbacks: the partitions to keep once the listener has run."""
        # clocks
        self.last_poll_ms = now_ms
        self.backoff_until_ms = 0.0
        self.failing_since_ms: float | None = None
        """When joining started failing with errors (None: the last attempt did not fail)."""
        self.next_pattern_check_ms = 0.0
        self.joined_version = -1
        #: the leader's partition counts when it assigned (a change calls for a rebalance)
        self.assigned_counts: dict[str, int] | None = None
        self.next_metadata_check_ms = 0.0

    # --- phase --------------------------------------------------------------------------
    def _move(self, to: Phase) -> None:
        if to not in MOVES[self.phase]:
            raise IllegalTransition(f"group {self.group_id!r}: no move from {self.phase.name} "
                                    f"to {to.name}")
        self.phase = to

    def _resting_phase(self) -> Phase:
        return Phase.STABLE if self.generation >= 0 else Phase.UNJOINED

    def end_round(self) -> None:
        """A join round ended without an assignment (retriable answer, error, cancellation)."""
        if self.phase in (Phase.JOINING, Phase.SYNCING):
            self._move(self._resting_phase())

    # --- the user's calls ---------------------------------------------------------------
    def subscribe(self, topics: frozenset[str], pattern: re.Pattern[str] | None) -> None:
        self.subscribed = True
        self.pattern = pattern
        if pattern is None:
            self.topics = topics
        self.sub_version += 1
        self.rejoin_needed = True
        self.next_pattern_check_ms = 0.0

    def unsubscribe(self) -> None:
        self.subscribed = False
        self.topics = frozenset()
        self.pattern = None
        self.owned = set()
        self.pending_apply = None
        self.rejoin_needed = True

    def polled(self, now_ms: float) -> None:
        self.last_poll_ms = now_ms

    # --- what the next step has to do ---------------------------------------------------
    def needs_step(self, now_ms: float) -> bool:
        if self.fatal is not None:
            return True
        if not self.subscribed or now_ms < self.backoff_until_ms:
            return False
        if self.pending_apply is not None:
            return True
        if self.pattern is not None and now_ms >= self.next_pattern_check_ms:
            return True
        return self.rejoin_needed or self.generation < 0

    def take_fatal(self) -> None:
        """Raise (once) the error a heartbeat found fatal (e.g. a fenced static member)."""
        if self.fatal is not None:
            err, self.fatal = self.fatal, None
            raise err

    def pattern_check_due(self, now_ms: float) -> bool:
        return self.pattern is not None and now_ms >= self.next_pattern_check_ms

    def pattern_checked(self, now_ms: float) -> None:
        self.next_pattern_check_ms = now_ms + self.settings.metadata_max_age_ms

    def on_metadata(self, response: broker_pb2.MetadataResponse) -> None:
        """The pattern matched against the cluster's topics; a change means rejoining."""
        assert self.pattern is not None
        internal = self.settings.exclude_internal_topics
        matched = frozenset(
            t.name for t in response.topics
            if not t.error_code and self.pattern.fullmatch(t.name)
            and not (internal and (t.internal or t.name.startswith("__"))))
        if matched != self.topics:
            log.info("group %s: pattern %s now matches %s", self.group_id,
                     self.pattern.pattern, sorted(matched))
            self.topics = matched
            self.sub_version += 1
            self.rejoin_needed = True

    def wants_join(self) -> bool:
        return self.rejoin_needed or self.generation < 0

    def lost_before_join(self) -> set[TopicPartition]:
        """The group forgot us (session expired, left on poll timeout) while we own
        partitions: they may already be someone else's, so they are lost, not revoked
        (KIP-429)."""
        return set(self.owned) if self.owned and self.generation < 0 else set()

    def revoke_before_join(self) -> set[TopicPartition]:
        """Eager: revoke everything before joining; cooperative: only what the subscription no
        longer covers. What is kept is applied once the listener has run (``pending_apply``)."""
        if not self.owned:
            return set()
        revoke = (set(self.owned) if not self.cooperative
                  else {tp for tp in self.owned if tp.topic not in self.topics})
        if revoke:
            self.pending_apply = self.owned - revoke
        return revoke

    def take_pending(self) -> set[TopicPartition] | None:
        """The partitions to drop now that the listener heard of their revocation."""
        if self.pending_apply is None:
            return None
        keep, self.pending_apply = self.pending_apply, None
        return self.owned - keep

    def dropped(self, gone: set[TopicPartition]) -> None:
        self.owned -= gone

    # --- JoinGroup ----------------------------------------------------------------------
    def join_request(self) -> group_pb2.JoinGroupRequest:
        """Start a round: the JoinGroup to send (moves to JOINING)."""
        self._move(Phase.JOINING)
        s = self.settings
        return group_pb2.JoinGroupRequest(
            group_id=self.group_id, member_id=self.member_id,
            group_instance_id=self.instance_id or "", client_id=s.client_id,
            session_timeout_ms=s.session_timeout_ms,
            rebalance_timeout_ms=s.max_poll_interval_ms, protocol_type="consumer",
            protocols=list(s.partition_assignment_strategy),
            subscription=self._subscription(sorted(self.topics)))

    def _subscription(self, topics: list[str]) -> group_pb2.Subscription:
        if not self.cooperative:
            return group_pb2.Subscription(topics=topics)
        return group_pb2.Subscription(
            topics=topics, user_data=_GEN.pack(self.generation),
            owned_partitions=[common_pb2.TopicPartition(topic=tp.topic, partition=tp.partition)
                              for tp in sorted(self.owned)])

    def on_join(self, response: group_pb2.JoinGroupResponse) -> bool:
        """True: joined a generation, send SyncGroup; False: the round ends, join again."""
        self._expect(Phase.JOINING, "a JoinGroup answer")
        code = error_code_from_int(response.error_code)
        if code is ErrorCode.NONE:
            self.member_id = response.member_id
            self.generation = response.generation
            self.protocol = response.protocol_name or None
            if response.leader_id != self.member_id:
                self.assigned_counts = None
            self._move(Phase.SYNCING)
            return True
        if code is ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = response.member_id
        elif code is ErrorCode.UNKNOWN_MEMBER_ID:
            self.member_id = ""
            self.generation = -1
        elif code not in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION):
            raise self.error("JoinGroup", code, response.error_message)
        self.end_round()
        return False

    def _expect(self, phase: Phase, what: str) -> None:
        if self.phase is not phase:
            raise IllegalTransition(f"group {self.group_id!r}: {what} in phase "
                                    f"{self.phase.name} (expected {phase.name})")

    # --- the leader's assignment --------------------------------------------------------
    def is_leader(self, joined: group_pb2.JoinGroupResponse) -> bool:
        return joined.leader_id == self.member_id and bool(joined.members)

    def leader_input(self, joined: group_pb2.JoinGroupResponse) -> LeaderInput | None:
        """What the leader assigns from (None: this member is not the leader). The partition
        counts of ``topics`` are the driver's to look up."""
        if joined.leader_id != self.member_id or not joined.members:
            return None
        assignor = ASSIGNORS.get(joined.protocol_name)
        if assignor is None:
            raise StromError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                             f"group {self.group_id!r} chose assignor "
                             f"{joined.protocol_name!r}, which this consumer does not implement")
        members = []
        topics: set[str] = set()
        for m in joined.members:
            sub = m.subscription
            gen = _GEN.unpack(sub.user_data)[0] if len(sub.user_data) == _GEN.size else -1
            members.append(MemberSubscription(
                member_id=m.member_id, topics=tuple(sub.topics),
                group_instance_id=m.group_instance_id or None,
                owned_partitions=tuple((p.topic, p.partition) for p in sub.owned_partitions),
                generation=gen))
            topics.update(sub.topics)
        return LeaderInput(joined.protocol_name, assignor, members, frozenset(topics))

    def assign(self, leader: LeaderInput, counts: Mapping[str, int], now_ms: float
               ) -> list[group_pb2.MemberAssignment]:
        """The leader's assignment: the chosen assignor over the partition counts."""
        self.assigned_counts = {t: counts.get(t, 0) for t in leader.topics}
        self.next_metadata_check_ms = now_ms + self.settings.metadata_max_age_ms
        result = leader.assignor(leader.members, counts)
        log.info("group %s generation %d: %s assignment %s", self.group_id, self.generation,
                 leader.name, result)
        return [group_pb2.MemberAssignment(
            member_id=member_id,
            partitions=[common_pb2.TopicPartition(topic=t, partition=p) for t, p in tps])
            for member_id, tps in result.items()]

    # --- SyncGroup ----------------------------------------------------------------------
    def sync_request(self, assignments: list[group_pb2.MemberAssignment]
                     ) -> group_pb2.SyncGroupRequest:
        self._expect(Phase.SYNCING, "a SyncGroup request")
        return group_pb2.SyncGroupRequest(
            group_id=self.group_id, member_id=self.member_id, generation=self.generation,
            group_instance_id=self.instance_id or "", assignments=assignments)

    def on_sync(self, response: group_pb2.SyncGroupResponse) -> AssignmentPlan | None:
        """The assignment's effect (apply it, then ``assigned``), or None: join again."""
        self._expect(Phase.SYNCING, "a SyncGroup answer")
        code = error_code_from_int(response.error_code)
        if code is ErrorCode.NONE:
            new = frozenset(TopicPartition(p.topic, p.partition) for p in response.assignment)
            old = frozenset(self.owned)
            return AssignmentPlan(new=new, revoked=old - new, added=new - old)
        if code in RESET_ERRORS:
            if code is ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
            self.generation = -1
        elif code is not ErrorCode.REBALANCE_IN_PROGRESS:
            raise self.error("SyncGroup", code, response.error_message)
        self.end_round()
        return None

    def synced(self, joined_version: int) -> None:
        """SyncGroup answered with an assignment for the subscription of ``joined_version``:
        joining no longer fails (applying the assignment may still)."""
        self._expect(Phase.SYNCING, "an assignment")
        self.joined_version = joined_version
        self.failing_since_ms = None

    def assigned(self, plan: AssignmentPlan) -> RebalanceCallbacks:
        """The assignment is applied to the fetcher: the member is STABLE. A cooperative
        member that gave partitions away rejoins at once so they reach their new owner. (A
        heartbeat or commit may have reset the generation meanwhile: then it is UNJOINED.)"""
        self._move(self._resting_phase())
        self.owned = set(plan.new | plan.revoked)
        if plan.revoked:
            self.pending_apply = set(plan.new)
        self.rejoin_needed = bool(plan.revoked) or self.joined_version != self.sub_version
        self.backoff_until_ms = 0.0
        log.info("group %s generation %d: assigned %s (revoked %s)", self.group_id,
                 self.generation, sorted(plan.new), sorted(plan.revoked))
        return RebalanceCallbacks(
            revoked=sorted(plan.revoked),
            assigned=sorted(plan.added) if self.cooperative else sorted(plan.new))

    # --- failures while joining ---------------------------------------------------------
    def on_step_error(self, exc: StromError, now_ms: float) -> None:
        """A step failed: raise what the application must see, else back off and retry.

        A coordinator that cannot store the group's metadata (its ``__consumer_offsets``
        partition below min.insync.replicas) answers every SyncGroup with
        COORDINATOR_NOT_AVAILABLE; retrying that forever left ``poll()`` silent, so joining
        that has failed for ``default_api_timeout_ms`` raises the last error. A coordinator
        failover takes seconds, far below the bound. The rebalance protocol's own errors
        (unknown member, illegal generation) are part of joining, not failures.
        """
        if exc.code is ErrorCode.FENCED_INSTANCE_ID or not (
                exc.retriable or exc.code in RESET_ERRORS):
            raise exc
        if exc.code not in RESET_ERRORS:
            if self.failing_since_ms is None:
                self.failing_since_ms = now_ms
            else:
                failing_ms = now_ms - self.failing_since_ms
                limit = self.settings.default_api_timeout_ms
                if failing_ms >= limit:
                    self.failing_since_ms = None
                    raise StromError(exc.code, f"group {self.group_id!r}: joining has failed "
                                               f"for {failing_ms / 1000:.0f} s "
                                               f"(default_api_timeout_ms={limit}); last error: "
                                               f"{exc.message}") from None
        log.info("group %s: %s; retrying", self.group_id, exc)
        self.backoff_until_ms = now_ms + self.settings.retry_backoff_ms

    # --- heartbeats ---------------------------------------------------------------------
    def heartbeating(self) -> bool:
        return not self.closed and self.generation >= 0

    def heartbeat_paused(self) -> bool:
        """No heartbeat while JoinGroup waits (the join itself keeps the member alive)."""
        return self.phase is Phase.JOINING

    def poll_expired(self, now_ms: float, stepping: bool) -> bool:
        """The application stopped calling poll() for max_poll_interval_ms (a long join inside
        poll() does not count): the member must leave, as Kafka's does."""
        return not stepping and now_ms - self.last_poll_ms > self.settings.max_poll_interval_ms

    def heartbeat_request(self) -> group_pb2.HeartbeatRequest:
        return group_pb2.HeartbeatRequest(
            group_id=self.group_id, member_id=self.member_id, generation=self.generation,
            group_instance_id=self.instance_id or "")

    def on_heartbeat(self, response: group_pb2.HeartbeatResponse) -> HeartbeatOutcome:
        code = error_code_from_int(response.error_code)
        if code is ErrorCode.NONE:
            return HeartbeatOutcome.OK
        if code is ErrorCode.REBALANCE_IN_PROGRESS:
            if not self.rejoin_needed:
                log.info("group %s: rebalance in progress; rejoining", self.group_id)
            self.rejoin_needed = True
            return HeartbeatOutcome.REJOIN
        if code in RESET_ERRORS:
            self.reset(code)
            return HeartbeatOutcome.RESET
        raise self.error("Heartbeat", code, response.error_message)

    def on_fatal(self, exc: StromError) -> None:
        """A heartbeat found an error poll() must raise (a fenced static member)."""
        self.fatal = exc

    def partition_check_due(self, now_ms: float) -> set[str] | None:
        """The leader rejoins when a subscribed topic appears or grows (Kafka's metadata
        snapshot check): the topics whose counts to look up now, or None."""
        counts = self.assigned_counts
        if counts is None or now_ms < self.next_metadata_check_ms or self.rejoin_needed:
            return None
        self.next_metadata_check_ms = now_ms + self.settings.metadata_max_age_ms
        return set(self.topics) | set(counts)

    def on_partition_counts(self, topics: set[str], found: Mapping[str, int]) -> bool:
        """True when the counts changed since the assignment: rebalance (wake poll())."""
        now = {t: found.get(t, 0) for t in topics}
        if now == self.assigned_counts:
            return False
        log.info("group %s: partition counts changed %s -> %s; rebalancing", self.group_id,
                 self.assigned_counts, now)
        self.rejoin_needed = True
        return True

    def reset(self, code: ErrorCode) -> None:
        """The group forgot this member (or its generation): the partitions are lost."""
        log.info("group %s: %s; the partitions are lost, rejoining", self.group_id, code.name)
        if code is ErrorCode.UNKNOWN_MEMBER_ID:
            self.member_id = ""
        self.generation = -1
        self.rejoin_needed = True
        if self.phase is Phase.STABLE:
            self._move(Phase.UNJOINED)

    # --- commits and leaving ------------------------------------------------------------
    def commit_identity(self) -> tuple[int, str]:
        """The generation and member id an OffsetCommit carries (none when not subscribed:
        a manually assigned consumer commits as a simple group member)."""
        if not self.subscribed:
            return -1, ""
        return self.generation, self.member_id

    def on_commit_failed(self, err: CommitFailedError) -> bool:
        """A refused commit; True when the member was reset (wake poll())."""
        if err.code is ErrorCode.REBALANCE_IN_PROGRESS:
            self.rejoin_needed = True
        elif err.code in RESET_ERRORS:
            self.reset(err.code)
            return True
        return False

    def leave_request(self) -> group_pb2.LeaveGroupRequest | None:
        """LeaveGroup for a dynamic member with an id (static members stay until their
        session ends, KIP-345)."""
        if self.instance_id is not None or not self.member_id:
            return None
        return group_pb2.LeaveGroupRequest(
            group_id=self.group_id, members=[group_pb2.LeavingMember(member_id=self.member_id)])

    def left(self, sent_leave: bool) -> None:
        """Either way this member forgets its generation, so its partitions count as lost."""
        if sent_leave:
            self.member_id = ""
        self.generation = -1
        if self.phase is Phase.STABLE:
            self._move(Phase.UNJOINED)

    def error(self, rpc: str, code: ErrorCode, message: str) -> StromError:
        """The error an answer's code means, naming the setting to change where there is one."""
        if code is ErrorCode.INVALID_SESSION_TIMEOUT:
            detail = f" ({message})" if message else ""
            return StromError(code, f"{rpc}: session_timeout_ms={self.settings.session_timeout_ms}"
                                    f" is outside the broker's group.min.session.timeout.ms .. "
                                    f"group.max.session.timeout.ms; choose a value inside{detail}")
        if code is ErrorCode.FENCED_INSTANCE_ID:
            return StromError(code, f"{rpc}: group_instance_id={self.instance_id!r} is in use "
                                    f"by another consumer of group {self.group_id!r}; give "
                                    f"each consumer instance its own group_instance_id")
        return StromError(code, message or f"{rpc} for group {self.group_id!r}: {code.name}")
