"""The consumer's group membership: find the coordinator, join, assign, sync, heartbeat, commit.

Kafka's ``ConsumerCoordinator``, on the consumer's event loop (the private loop thread of
``Consumer``, the caller's loop for ``AsyncConsumer``). The rebalance listener must run on the
caller's thread inside ``poll()`` and may call ``commit()`` or ``seek()`` there, so the join is cut
into *steps*: ``step()`` does network work until the next point where the application must be
told something, and returns that (``RebalanceCallbacks``) -- the front runs the callbacks on its
own thread, then asks for the next step. Revocation therefore happens before the partitions leave
the assignment, exactly where Kafka invokes ``onPartitionsRevoked``:

- eager protocols (range, roundrobin, sticky, or any list holding one of them): auto-commit, then
  revoke *everything*, then JoinGroup;
- cooperative (only cooperative-sticky configured, KIP-429): JoinGroup with the owned partitions;
  after SyncGroup, revoke only what moved away and, if anything did, rejoin at once so the
  partitions reach their new owner in a follow-up generation.

The leader runs the assignor (``strom.client.assignors``) over the members' subscriptions and the
partition counts from metadata. Heartbeats run as a task of their own every
``heartbeat_interval_ms``; they also enforce ``max_poll_interval_ms`` by leaving the group when
the application stops polling (Kafka does the same), the partitions then count as lost.

Wire details of our own (the protocol's ``Subscription`` is structured, not Kafka's blob): a
cooperative member sends the generation its ``owned_partitions`` belong to as 4 big-endian bytes
in ``user_data`` (Kafka's ConsumerProtocolSubscription v2 ``generationId``); eager members send
no owned partitions and no user data, so a restarted static member's subscription is unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import struct
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc

from strom.client.assignors import ASSIGNORS, MemberSubscription
from strom.client.commits import (
    COORDINATOR_ERRORS,
    CommitFailedError,
    commit_error,
    commit_request,
    fetch_request,
    fetch_result,
)
from strom.client.config import InvalidOption
from strom.client.connections import rpc_error
from strom.client.fetcher import ConsumerCore, ConsumerSettings
from strom.client.models import TopicPartition
from strom.client.positions import NoOffsetForPartitionError
from strom.protocol.errors import ErrorCode, Handling, StromError, codes_with, error_code_from_int
from strom.protocol.v1 import broker_pb2, common_pb2, group_pb2, group_pb2_grpc

log = logging.getLogger("strom.client.group")

T = TypeVar("T")

#: Errors after which the member is forgotten by the group: reset and rejoin (partitions lost).
_RESET_ERRORS = codes_with(Handling.RESET_MEMBER)
#: Join/sync rounds one step may take before it gives the caller's poll() control back.
_MAX_ROUNDS = 20
_GEN = struct.Struct(">i")


@dataclass
class RebalanceCallbacks:
    """What the front must tell the listener, in this order: lost or revoked, then assigned."""

    revoked: list[TopicPartition] = field(default_factory=list)
    lost: list[TopicPartition] = field(default_factory=list)
    assigned: list[TopicPartition] | None = None


def _now_ms() -> float:
    return time.monotonic() * 1000.0


class GroupMember:
    """One consumer's membership of its group. Owned by the loop; the front only reads flags."""

    def __init__(self, settings: ConsumerSettings, core: ConsumerCore) -> None:
        assert settings.group_id is not None
        self.settings = settings
        self.group_id: str = settings.group_id
        self.instance_id = settings.group_instance_id
        self.core = core
        self.cooperative = settings.cooperative
        # subscription (written by the front between polls)
        self.subscribed = False
        self.topics: frozenset[str] = frozenset()
        self.pattern: re.Pattern[str] | None = None
        self.sub_version = 0
        # membership
        self.member_id = ""
        self.generation = -1
        self.protocol: str | None = None
        self.owned: set[TopicPartition] = set()
        self.rejoin_needed = True
        self.fatal: StromError | None = None
        self.last_poll_ms = _now_ms()
        self.backoff_until_ms = 0.0
        self._failing_since_ms: float | None = None
        """When joining started failing with errors (None: the last attempt did not fail)."""
        self.next_pattern_check_ms = 0.0
        self._joined_version = -1
        self._joining = False
        self._stepping = False
        # the leader's partition counts when it assigned (a change calls for a rebalance)
        self._assigned_counts: dict[str, int] | None = None
        self._next_metadata_check_ms = 0.0
        self._pending_apply: set[TopicPartition] | None = None  # the partitions to keep
        self._coordinator: str | None = None
        self._stubs: dict[str, group_pb2_grpc.GroupStub] = {}
        self._heartbeat: asyncio.Task[None] | None = None
        self._commits: set[asyncio.Task[Any]] = set()
        self.closed = False

    # --- the front's view (any thread; plain attribute reads) -----------------------------
    def subscribe(self, topics: frozenset[str], pattern: re.Pattern[str] | None) -> None:
        self.subscribed = True
        self.pattern = pattern
        if pattern is None:
            self.topics = topics
        self.sub_version += 1
        self.rejoin_needed = True
        self.next_pattern_check_ms = 0.0

    def needs_step(self, now_ms: float) -> bool:
        if self.fatal is not None:
            return True
        if not self.subscribed or now_ms < self.backoff_until_ms:
            return False
        if self._pending_apply is not None:
            return True
        if self.pattern is not None and now_ms >= self.next_pattern_check_ms:
            return True
        return self.rejoin_needed or self.generation < 0

    @property
    def rebalance_timeout_ms(self) -> int:
        return self.settings.max_poll_interval_ms

    # --- the join, one step at a time (on the loop) ---------------------------------------
    async def step(self) -> RebalanceCallbacks | None:
        """Advance the membership; callbacks for the caller's thread, or None when done."""
        self._stepping = True
        try:
            return await self._step()
        finally:
            self._stepping = False
            self.last_poll_ms = _now_ms()  # a long join inside poll() is not a stalled app

    async def _step(self) -> RebalanceCallbacks | None:
        if self.fatal is not None:
            err, self.fatal = self.fatal, None
            raise err
        if not self.subscribed or self.closed:
            return None
        if self._pending_apply is not None:
            return await self._apply_pending()
        try:
            if self.pattern is not None and _now_ms() >= self.next_pattern_check_ms:
                await self._check_pattern()
            if not (self.rejoin_needed or self.generation < 0):
                return None
            if self.owned and self.generation < 0:
                # the group forgot us (session expired, left on poll timeout): the partitions
                # may already be someone else's, so they are lost, not revoked (KIP-429)
                lost = sorted(self.owned)
                self._drop(self.owned)
                return RebalanceCallbacks(lost=lost)
            revoke = self._to_revoke_before_join()
            if revoke:
                if self.settings.enable_auto_commit:
                    await self._commit_quietly(self._positions(revoke))
                self._pending_apply = self.owned - revoke
                return RebalanceCallbacks(revoked=sorted(revoke))
            return await self._join_and_sync()
        except StromError as exc:
            if exc.code is ErrorCode.FENCED_INSTANCE_ID or not (
                    exc.retriable or exc.code in _RESET_ERRORS):
                raise
            self._check_failing_too_long(exc)
            log.info("group %s: %s; retrying", self.group_id, exc)
            self.backoff_until_ms = _now_ms() + self.settings.retry_backoff_ms
            return None

    def _check_failing_too_long(self, exc: StromError) -> None:
        """Raise ``exc`` once joining has failed for ``default_api_timeout_ms`` on end.

        A coordinator that cannot store the group's metadata (its ``__consumer_offsets``
        partition below min.insync.replicas) answers every SyncGroup with
        COORDINATOR_NOT_AVAILABLE; retrying that forever left ``poll()`` silent. A coordinator
        failover takes seconds, far below the bound. The rebalance protocol's own errors
        (unknown member, illegal generation) are part of joining, not failures.
        """
        if exc.code in _RESET_ERRORS:
            return
        now = _now_ms()
        if self._failing_since_ms is None:
            self._failing_since_ms = now
            return
        failing_ms = now - self._failing_since_ms
        if failing_ms >= self.settings.default_api_timeout_ms:
            self._failing_since_ms = None
            raise StromError(exc.code, f"group {self.group_id!r}: joining has failed for "
                                       f"{failing_ms / 1000:.0f} s (default_api_timeout_ms="
                                       f"{self.settings.default_api_timeout_ms}); last error: "
                                       f"{exc.message}") from None

    def _to_revoke_before_join(self) -> set[TopicPartition]:
        if not self.owned:
            return set()
        if not self.cooperative:
            return set(self.owned)
        # cooperative: only what the new subscription no longer covers
        return {tp for tp in self.owned if tp.topic not in self.topics}

    async def _apply_pending(self) -> RebalanceCallbacks | None:
        """Second half of a revocation: the listener has run, now the partitions really go."""
        assert self._pending_apply is not None
        keep = self._pending_apply
        self._pending_apply = None
        self._drop(self.owned - keep)
        return None

    async def settle(self) -> None:
        """Finish a revocation whose callbacks were delivered (before leaving or closing)."""
        if self._pending_apply is not None:
            await self._apply_pending()

    def _drop(self, gone: set[TopicPartition]) -> None:
        if not gone:
            return
        self.owned -= gone
        subs = self.core.subs
        with subs.lock:
            subs.assign([tp for tp in subs.states if tp not in gone])
        self.core.cancel_fetches()

    async def _join_and_sync(self) -> RebalanceCallbacks | None:
        for _ in range(_MAX_ROUNDS):
            await self._ensure_coordinator()
            version = self.sub_version
            joined = await self._join(sorted(self.topics))
            if joined is None:
                continue
            assignment = await self._sync(joined)
            if assignment is None:
                continue
            self._joined_version = version
            self._failing_since_ms = None
            return await self._assigned(assignment)
        return None

    def _subscription(self, topics: list[str]) -> group_pb2.Subscription:
        if not self.cooperative:
            return group_pb2.Subscription(topics=topics)
        return group_pb2.Subscription(
            topics=topics, user_data=_GEN.pack(self.generation),
            owned_partitions=[common_pb2.TopicPartition(topic=tp.topic, partition=tp.partition)
                              for tp in sorted(self.owned)])

    async def _join(self, topics: list[str]) -> group_pb2.JoinGroupResponse | None:
        s = self.settings
        request = group_pb2.JoinGroupRequest(
            group_id=self.group_id, member_id=self.member_id,
            group_instance_id=self.instance_id or "", client_id=s.client_id,
            session_timeout_ms=s.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms, protocol_type="consumer",
            protocols=list(s.partition_assignment_strategy),
            subscription=self._subscription(topics))
        self._joining = True
        try:
            response: group_pb2.JoinGroupResponse = await self._call(
                "JoinGroup", request,
                (self.rebalance_timeout_ms + s.request_timeout_ms) / 1000.0)
        finally:
            self._joining = False
        code = error_code_from_int(response.error_code)
        if code is ErrorCode.NONE:
            self.member_id = response.member_id
            self.generation = response.generation
            self.protocol = response.protocol_name or None
            if response.leader_id != self.member_id:
                self._assigned_counts = None
            return response
        if code is ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = response.member_id
            return None
        if code is ErrorCode.UNKNOWN_MEMBER_ID:
            self.member_id = ""
            self.generation = -1
            return None
        if code in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION):
            return None
        raise self._error("JoinGroup", code, response.error_message)

    async def _sync(self, joined: group_pb2.JoinGroupResponse) -> list[TopicPartition] | None:
        assignments: list[group_pb2.MemberAssignment] = []
        if joined.leader_id == self.member_id and joined.members:
            assignments = await self._run_assignor(joined)
        request = group_pb2.SyncGroupRequest(
            group_id=self.group_id, member_id=self.member_id, generation=self.generation,
            group_instance_id=self.instance_id or "", assignments=assignments)
        response: group_pb2.SyncGroupResponse = await self._call(
            "SyncGroup", request,
            (self.rebalance_timeout_ms + self.settings.request_timeout_ms) / 1000.0)
        code = error_code_from_int(response.error_code)
        if code is ErrorCode.NONE:
            return [TopicPartition(p.topic, p.partition) for p in response.assignment]
        if code is ErrorCode.REBALANCE_IN_PROGRESS:
            return None
        if code in _RESET_ERRORS:
            if code is ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
            self.generation = -1
            return None
        raise self._error("SyncGroup", code, response.error_message)

    async def _run_assignor(self, joined: group_pb2.JoinGroupResponse
                            ) -> list[group_pb2.MemberAssignment]:
        name = joined.protocol_name
        assignor = ASSIGNORS.get(name)
        if assignor is None:
            raise StromError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                             f"group {self.group_id!r} chose assignor {name!r}, which this "
                             f"consumer does not implement")
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
        counts = await self._partition_counts(topics)
        self._assigned_counts = {t: counts.get(t, 0) for t in topics}
        self._next_metadata_check_ms = _now_ms() + self.settings.metadata_max_age_ms
        result = assignor(members, counts)
        log.info("group %s generation %d: %s assignment %s", self.group_id, self.generation,
                 name, result)
        return [group_pb2.MemberAssignment(
            member_id=member_id,
            partitions=[common_pb2.TopicPartition(topic=t, partition=p) for t, p in tps])
            for member_id, tps in result.items()]

    async def _partition_counts(self, topics: set[str]) -> dict[str, int]:
        conns = self.core.conns
        if conns.add_topics(topics):
            self.core.metadata.mark_stale()
        md = self.core.metadata
        if md.needs_refresh(_now_ms()) or any(md.partition_count(t) is None for t in topics):
            with contextlib.suppress(StromError):
                await conns.refresh_metadata()
        counts = {}
        for t in topics:
            n = md.partition_count(t)
            if n is not None:
                counts[t] = n
        return counts

    async def _assigned(self, assignment: list[TopicPartition]) -> RebalanceCallbacks:
        new = set(assignment)
        old = set(self.owned)
        revoked = old - new
        added = new - old
        if revoked and self.settings.enable_auto_commit:
            await self._commit_quietly(self._positions(revoked))
        committed = await self.fetch_committed(sorted(added)) if added else {}
        missing: list[TopicPartition] = []
        subs = self.core.subs
        with subs.lock:
            # revoked partitions stay readable until the listener has heard of them
            subs.assign(sorted(new | revoked))
            for tp in sorted(added):
                off = committed.get(tp)
                if off is not None:
                    subs.seek(tp, off)
                elif subs.default_reset == "none":
                    missing.append(tp)
            if missing:
                subs.errors.append(NoOffsetForPartitionError(missing))
        self.core.cancel_fetches()
        self.owned = new | revoked
        if revoked:
            self._pending_apply = new
        self.rejoin_needed = bool(revoked) or self._joined_version != self.sub_version
        self.backoff_until_ms = 0.0
        self._start_heartbeat()
        log.info("group %s generation %d: assigned %s (revoked %s)", self.group_id,
                 self.generation, sorted(new), sorted(revoked))
        return RebalanceCallbacks(revoked=sorted(revoked),
                                  assigned=sorted(added) if self.cooperative else sorted(new))

    # --- pattern subscriptions -------------------------------------------------------------
    async def _check_pattern(self) -> None:
        """Match the pattern against the cluster's topics; a change means rejoining."""
        assert self.pattern is not None
        self.next_pattern_check_ms = _now_ms() + self.settings.metadata_max_age_ms
        conns = self.core.conns
        last: StromError | None = None
        for address in conns.addresses():
            try:
                response: broker_pb2.MetadataResponse = await conns.broker_stub_at(
                    address).Metadata(broker_pb2.MetadataRequest(),
                                      timeout=self.settings.request_timeout_ms / 1000.0)
            except grpc.RpcError as exc:
                last = rpc_error(exc)
                continue
            matched = frozenset(
                t.name for t in response.topics
                if not t.error_code and self.pattern.fullmatch(t.name)
                and not (self.settings.exclude_internal_topics
                         and (t.internal or t.name.startswith("__"))))
            if matched != self.topics:
                log.info("group %s: pattern %s now matches %s", self.group_id,
                         self.pattern.pattern, sorted(matched))
                self.topics = matched
                self.sub_version += 1
                self.rejoin_needed = True
            return
        raise last or StromError(ErrorCode.NETWORK_EXCEPTION, "no broker address to ask")

    # --- heartbeats ------------------------------------------------------------------------
    def _start_heartbeat(self) -> None:
        if self._heartbeat is None or self._heartbeat.done():
            self._heartbeat = asyncio.get_running_loop().create_task(
                self._heartbeat_loop(), name="strom-consumer-heartbeat")

    async def _heartbeat_loop(self) -> None:
        interval = self.settings.heartbeat_interval_ms / 1000.0
        while not self.closed and self.generation >= 0:
            await asyncio.sleep(interval)
            if self.generation < 0 or self.closed:
                return
            if (not self._stepping
                    and _now_ms() - self.last_poll_ms > self.settings.max_poll_interval_ms):
                log.warning(
                    "group %s: poll() not called for more than max_poll_interval_ms=%d; "
                    "leaving the group (increase max_poll_interval_ms or reduce "
                    "max_poll_records)", self.group_id, self.settings.max_poll_interval_ms)
                await self.leave("consumer poll timeout has expired")
                self.rejoin_needed = True
                return
            if self._joining:
                continue
            try:
                await self._check_partition_counts()
                await self._send_heartbeat()
            except StromError as exc:
                if exc.code is ErrorCode.FENCED_INSTANCE_ID:
                    self.fatal = exc
                    self.core.on_data()
                    return
                log.debug("group %s: heartbeat failed: %s", self.group_id, exc)
            except Exception:
                log.exception("group %s: heartbeat failed", self.group_id)

    async def _send_heartbeat(self) -> None:
        await self._ensure_coordinator()
        request = group_pb2.HeartbeatRequest(
            group_id=self.group_id, member_id=self.member_id, generation=self.generation,
            group_instance_id=self.instance_id or "")
        response: group_pb2.HeartbeatResponse = await self._call(
            "Heartbeat", request, self.settings.request_timeout_ms / 1000.0)
        code = error_code_from_int(response.error_code)
        if code is ErrorCode.NONE:
            return
        if code is ErrorCode.REBALANCE_IN_PROGRESS:
            if not self.rejoin_needed:
                log.info("group %s: rebalance in progress; rejoining", self.group_id)
            self.rejoin_needed = True
            self.core.on_data()  # wake a waiting poll() so it rejoins now
        elif code in _RESET_ERRORS:
            self._reset(code)
        else:
            raise self._error("Heartbeat", code, response.error_message)

    async def _check_partition_counts(self) -> None:
        """The leader rejoins when a subscribed topic appears or grows (Kafka's metadata
        snapshot check), so new partitions get an owner without waiting for the broker."""
        counts = self._assigned_counts
        if counts is None or _now_ms() < self._next_metadata_check_ms or self.rejoin_needed:
            return
        self._next_metadata_check_ms = _now_ms() + self.settings.metadata_max_age_ms
        self.core.metadata.mark_stale()
        topics = set(self.topics) | set(counts)
        found = await self._partition_counts(topics)
        now = {t: found.get(t, 0) for t in topics}
        if now != counts:
            log.info("group %s: partition counts changed %s -> %s; rebalancing", self.group_id,
                     counts, now)
            self.rejoin_needed = True
            self.core.on_data()

    def _reset(self, code: ErrorCode) -> None:
        log.info("group %s: %s; the partitions are lost, rejoining", self.group_id, code.name)
        if code is ErrorCode.UNKNOWN_MEMBER_ID:
            self.member_id = ""
        self.generation = -1
        self.rejoin_needed = True
        self.core.on_data()

    # --- leaving ---------------------------------------------------------------------------
    async def leave(self, reason: str) -> None:
        """LeaveGroup for dynamic members (static ones stay until their session ends, KIP-345);
        either way this consumer forgets its generation, so its partitions count as lost."""
        if self._heartbeat is not None and self._heartbeat is not asyncio.current_task():
            self._heartbeat.cancel()
        if self.instance_id is None and self.member_id and self._coordinator is not None:
            request = group_pb2.LeaveGroupRequest(
                group_id=self.group_id,
                members=[group_pb2.LeavingMember(member_id=self.member_id)])
            log.info("group %s: member %s leaves (%s)", self.group_id, self.member_id, reason)
            try:
                await self._call("LeaveGroup", request,
                                 self.settings.request_timeout_ms / 1000.0)
            except StromError as exc:
                log.debug("group %s: LeaveGroup failed: %s", self.group_id, exc)
            self.member_id = ""
        self.generation = -1

    def unsubscribe(self) -> None:
        self.subscribed = False
        self.topics = frozenset()
        self.pattern = None
        self.owned = set()
        self._pending_apply = None
        self.rejoin_needed = True

    async def close(self) -> None:
        self.closed = True
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        for t in list(self._commits):
            with contextlib.suppress(asyncio.CancelledError, StromError):
                await asyncio.wait_for(asyncio.shield(t), 5)

    # --- commits ---------------------------------------------------------------------------
    def _positions(self, tps: set[TopicPartition] | None = None) -> dict[TopicPartition, int]:
        subs = self.core.subs
        with subs.lock:
            return {tp: st.position for tp, st in subs.states.items()
                    if st.position is not None and (tps is None or tp in tps)}

    async def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """OffsetCommit of ``offsets`` (default: every position), retried on coordinator errors."""
        wanted = dict(self._positions() if offsets is None else offsets)
        if not wanted:
            return
        deadline = _now_ms() + self.settings.request_timeout_ms
        while True:
            await self._ensure_coordinator()
            generation = self.generation if self.subscribed else -1
            member_id = self.member_id if self.subscribed else ""
            request = commit_request(self.group_id, generation, member_id, self.instance_id,
                                     wanted)
            try:
                response: group_pb2.OffsetCommitResponse = await self._call(
                    "OffsetCommit", request, self.settings.request_timeout_ms / 1000.0)
                err = commit_error(response)
            except StromError as exc:
                err = exc
            if err is None:
                return
            if isinstance(err, CommitFailedError):
                if err.code is ErrorCode.REBALANCE_IN_PROGRESS:
                    self.rejoin_needed = True
                elif err.code in _RESET_ERRORS:
                    self._reset(err.code)
                raise err
            if not err.retriable or _now_ms() >= deadline:
                raise err
            if err.code in COORDINATOR_ERRORS:
                self._coordinator = None
            await asyncio.sleep(self.settings.retry_backoff_ms / 1000.0)

    def commit_in_background(self, offsets: Mapping[TopicPartition, int] | None,
                             done: Callable[[dict[TopicPartition, int], BaseException | None],
                                            None] | None = None) -> None:
        """Start a commit task (auto-commit, ``commit_async``); ``done`` hears how it went."""
        wanted = dict(self._positions() if offsets is None else offsets)
        if not wanted:
            return

        async def _run() -> None:
            error: BaseException | None = None
            try:
                await self.commit(wanted)
            except StromError as exc:
                error = exc
                log.info("group %s: async commit failed: %s", self.group_id, exc)
            if done is not None:
                done(wanted, error)

        task = asyncio.get_running_loop().create_task(_run())
        self._commits.add(task)
        task.add_done_callback(self._commits.discard)

    async def _commit_quietly(self, offsets: dict[TopicPartition, int]) -> None:
        """Auto-commit before revocation: failures are logged, as Kafka does."""
        try:
            await self.commit(offsets)
        except StromError as exc:
            log.warning("group %s: auto-commit of %s before rebalance failed: %s",
                        self.group_id, sorted(offsets), exc)

    async def fetch_committed(self, partitions: list[TopicPartition]
                              ) -> dict[TopicPartition, int | None]:
        deadline = _now_ms() + self.settings.request_timeout_ms
        while True:
            await self._ensure_coordinator()
            try:
                response: group_pb2.OffsetFetchResponse = await self._call(
                    "OffsetFetch", fetch_request(self.group_id, partitions),
                    self.settings.request_timeout_ms / 1000.0)
                return fetch_result(response, partitions)
            except StromError as exc:
                if not exc.retriable or _now_ms() >= deadline:
                    raise
                if exc.code in COORDINATOR_ERRORS:
                    self._coordinator = None
                await asyncio.sleep(self.settings.retry_backoff_ms / 1000.0)

    # --- coordinator ----------------------------------------------------------------------
    def _stub(self, address: str) -> group_pb2_grpc.GroupStub:
        stub = self._stubs.get(address)
        if stub is None:
            stub = self._stubs[address] = group_pb2_grpc.GroupStub(  # type: ignore[no-untyped-call]
                self.core.conns.channel(address))
        return stub

    async def _ensure_coordinator(self) -> str:
        if self._coordinator is not None:
            return self._coordinator
        deadline = _now_ms() + self.settings.request_timeout_ms
        last: StromError | None = None
        attempt = 0
        while True:
            for address in self.core.conns.addresses():
                try:
                    response: group_pb2.FindCoordinatorResponse = await self._stub(
                        address).FindCoordinator(
                        group_pb2.FindCoordinatorRequest(group_id=self.group_id),
                        timeout=self.settings.request_timeout_ms / 1000.0)
                except grpc.RpcError as exc:
                    last = rpc_error(exc)
                    if not last.retriable:
                        raise last from None
                    continue
                code = error_code_from_int(response.error_code)
                if code is ErrorCode.NONE:
                    c = response.coordinator
                    self._coordinator = f"{c.host}:{c.port}"
                    log.debug("group %s: coordinator is broker %d at %s", self.group_id,
                              c.broker_id, self._coordinator)
                    return self._coordinator
                last = StromError(code, response.error_message
                                  or f"FindCoordinator for group {self.group_id!r}: {code.name}")
                if not last.retriable:
                    raise last
            attempt += 1
            if _now_ms() >= deadline:
                raise last or StromError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                         f"no coordinator for group {self.group_id!r}")
            await asyncio.sleep(self.core.retry.backoff(attempt) / 1000.0)

    async def _call(self, rpc: str, request: Any, timeout: float) -> Any:
        """One Group RPC to the coordinator; coordinator errors forget it (found again later)."""
        address = await self._ensure_coordinator()
        method: Callable[..., Awaitable[Any]] = getattr(self._stub(address), rpc)
        try:
            response = await method(request, timeout=timeout)
        except grpc.RpcError as exc:
            err = rpc_error(exc)
            if err.retriable:
                self._coordinator = None
            raise err from None
        code = error_code_from_int(getattr(response, "error_code", 0))
        if code in COORDINATOR_ERRORS:
            self._coordinator = None
            raise StromError(code, response.error_message or f"{rpc}: {code.name}")
        return response

    def _error(self, rpc: str, code: ErrorCode, message: str) -> StromError:
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


# --- the front's helpers, shared by Consumer and AsyncConsumer ------------------------------


class ConsumerRebalanceListener:
    """Kafka's ConsumerRebalanceListener; subclass it or pass any object with these methods.

    Called on the thread (or, for ``AsyncConsumer``, in the task) that calls ``poll()``, never on
    the client's loop thread, so they may call ``commit()``, ``seek()`` and ``position()``.
    ``AsyncConsumer`` also accepts coroutine methods.
    """

    def on_partitions_revoked(self, partitions: list[TopicPartition]) -> Any:
        """Before partitions go to another member: commit what was processed of them."""

    def on_partitions_assigned(self, partitions: list[TopicPartition]) -> Any:
        """After a rebalance (eager: every partition now owned; cooperative: only new ones)."""

    def on_partitions_lost(self, partitions: list[TopicPartition]) -> Any:
        """The group dropped this member: the partitions may already be someone else's, so do
        not commit them. Kafka's default calls ``on_partitions_revoked``; so does ours."""
        return self.on_partitions_revoked(partitions)


def listener_calls(listener: object | None, cb: RebalanceCallbacks
                   ) -> list[tuple[Callable[[list[TopicPartition]], Any], list[TopicPartition]]]:
    """The listener methods to call for ``cb``, in Kafka's order (lost/revoked, then assigned)."""
    if listener is None:
        return []
    calls: list[tuple[Callable[[list[TopicPartition]], Any], list[TopicPartition]]] = []
    if cb.lost:
        fn = getattr(listener, "on_partitions_lost", None) or listener.on_partitions_revoked  # type: ignore[attr-defined]
        calls.append((fn, list(cb.lost)))
    if cb.revoked:
        calls.append((listener.on_partitions_revoked, list(cb.revoked)))  # type: ignore[attr-defined]
    if cb.assigned is not None:
        calls.append((listener.on_partitions_assigned, list(cb.assigned)))  # type: ignore[attr-defined]
    return calls


def check_listener(listener: object | None) -> None:
    if listener is None:
        return
    for name in ("on_partitions_revoked", "on_partitions_assigned"):
        if not callable(getattr(listener, name, None)):
            raise StromError(ErrorCode.INVALID_REQUEST,
                             f"subscribe(listener=...): the listener has no {name}() method; "
                             f"subclass strom.client.ConsumerRebalanceListener")


def compile_subscription(topics: list[str] | None, pattern: str | re.Pattern[str] | None
                         ) -> tuple[frozenset[str], re.Pattern[str] | None]:
    """Validate ``subscribe()``'s arguments: a topic list or a pattern, not both."""
    if (topics is None) == (pattern is None):
        raise StromError(ErrorCode.INVALID_REQUEST,
                         "subscribe() takes either topics=[...] or pattern=..., exactly one")
    if pattern is not None:
        try:
            return frozenset(), re.compile(pattern) if isinstance(pattern, str) else pattern
        except re.error as exc:
            raise StromError(ErrorCode.INVALID_REQUEST,
                             f"subscribe(pattern={pattern!r}) is not a valid regular "
                             f"expression: {exc}") from None
    assert topics is not None
    if isinstance(topics, str):
        raise StromError(ErrorCode.INVALID_REQUEST,
                         f"subscribe(topics={topics!r}) takes a list of topic names, "
                         f"e.g. [{topics!r}]")
    names = frozenset(topics)
    for t in names:
        if not t or not isinstance(t, str):
            raise StromError(ErrorCode.INVALID_REQUEST,
                             f"subscribe(): topic name {t!r} is empty or not a string")
    return names, None


def no_group_error(what: str) -> StromError:
    return InvalidOption(f"{what} needs a consumer group: pass group_id='...' to the consumer")


def mixed_error() -> StromError:
    return StromError(ErrorCode.INVALID_REQUEST,
                      "subscribe() and assign() cannot be mixed on one consumer; call "
                      "unsubscribe() first (Kafka's rule)")


def validate_offsets(offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    out: dict[TopicPartition, int] = {}
    for tp, off in offsets.items():
        if not isinstance(off, int) or off < 0:
            raise StromError(ErrorCode.INVALID_REQUEST,
                             f"commit offset {off!r} for {tp} must be an int >= 0 (the offset "
                             f"of the next record to read)")
        out[TopicPartition(*tp)] = off
    return out
