"""The consumer's group membership driver: the I/O around ``group_state.MembershipState``.

Kafka's ``ConsumerCoordinator``, on the consumer's event loop (the private loop thread of
``Consumer``, the caller's loop for ``AsyncConsumer``): both fronts drive this one class, so
join, sync, heartbeat, rebalance and commit behave the same in both. Every protocol rule (what
an answer means, what to revoke, which phase may follow which) is in the sans-I/O
``group_state``; this module finds the coordinator, sends the requests the state builds, feeds
it the answers and the clock, applies assignments to the fetcher and runs the heartbeat task.

The rebalance listener must run on the caller's thread inside ``poll()`` and may call
``commit()`` or ``seek()`` there, so the join is cut into *steps*: ``step()`` does network work
until the next point where the application must be told something, and returns that
(``RebalanceCallbacks``) -- the front runs the callbacks on its own thread, then asks for the
next step. Revocation therefore happens before the partitions leave the assignment, exactly
where Kafka invokes ``onPartitionsRevoked``:

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
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import grpc

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
from strom.client.consumer_settings import ConsumerSettings
from strom.client.fetcher import ConsumerCore
from strom.client.group_state import (
    AssignmentPlan,
    HeartbeatOutcome,
    MembershipState,
    RebalanceCallbacks,
)
from strom.client.models import TopicPartition
from strom.client.positions import NoOffsetForPartitionError
from strom.protocol.errors import ErrorCode, StromError, error_code_from_int
from strom.protocol.v1 import broker_pb2, group_pb2
from strom.transport.v1 import group_pb2_grpc

log = logging.getLogger("strom.client.group")

#: Join/sync rounds one step may take before it gives the caller's poll() control back.
_MAX_ROUNDS = 20

def _now_ms() -> float:
    return time.monotonic() * 1000.0


class GroupMember:
    """One consumer's membership of its group. Owned by the loop; the front only reads flags."""

    def __init__(self, settings: ConsumerSettings, core: ConsumerCore) -> None:
        assert settings.group_id is not None
        self.settings = settings
        self.group_id: str = settings.group_id
        self.core = core
        self.state = MembershipState(settings.group_id, settings, _now_ms())
        self._stepping = False
        self._coordinator: str | None = None
        self._stubs: dict[str, group_pb2_grpc.GroupStub] = {}
        self._heartbeat: asyncio.Task[None] | None = None
        self._commits: set[asyncio.Task[Any]] = set()

    # --- the front's view (any thread; plain attribute reads) -----------------------------
    @property
    def subscribed(self) -> bool:
        return self.state.subscribed

    @property
    def member_id(self) -> str:
        return self.state.member_id

    def subscribe(self, topics: frozenset[str], pattern: re.Pattern[str] | None) -> None:
        self.state.subscribe(topics, pattern)

    def unsubscribe(self) -> None:
        self.state.unsubscribe()

    def polled(self) -> None:
        """The application called poll(): it is alive (max_poll_interval_ms)."""
        self.state.polled(_now_ms())

    def needs_step(self, now_ms: float) -> bool:
        return self.state.needs_step(now_ms)

    # --- the join, one step at a time (on the loop) ---------------------------------------
    async def step(self) -> RebalanceCallbacks | None:
        """Advance the membership; callbacks for the caller's thread, or None when done."""
        self._stepping = True
        try:
            return await self._step()
        finally:
            self._stepping = False
            self.state.polled(_now_ms())  # a long join inside poll() is not a stalled app

    async def _step(self) -> RebalanceCallbacks | None:
        st = self.state
        st.take_fatal()
        if not st.subscribed or st.closed:
            return None
        if st.pending_apply is not None:
            await self.settle()
            return None
        try:
            if st.pattern_check_due(_now_ms()):
                await self._check_pattern()
            if not st.wants_join():
                return None
            lost = st.lost_before_join()
            if lost:
                self._drop(lost)
                return RebalanceCallbacks(lost=sorted(lost))
            revoke = st.revoke_before_join()
            if revoke:
                if self.settings.enable_auto_commit:
                    await self._commit_quietly(self._positions(revoke))
                return RebalanceCallbacks(revoked=sorted(revoke))
            return await self._join_and_sync()
        except StromError as exc:
            st.on_step_error(exc, _now_ms())
            return None

    async def settle(self) -> None:
        """Finish a revocation whose callbacks were delivered (before leaving or closing)."""
        gone = self.state.take_pending()
        if gone is not None:
            self._drop(gone)

    def _drop(self, gone: set[TopicPartition]) -> None:
        if not gone:
            return
        self.state.dropped(gone)
        subs = self.core.subs
        with subs.lock:
            subs.assign([tp for tp in subs.states if tp not in gone])
        self.core.cancel_fetches()

    async def _join_and_sync(self) -> RebalanceCallbacks | None:
        st = self.state
        timeout = (self.settings.max_poll_interval_ms + self.settings.request_timeout_ms) / 1000.0
        for _ in range(_MAX_ROUNDS):
            await self._ensure_coordinator()
            version = st.sub_version
            try:
                joined: group_pb2.JoinGroupResponse = await self._call(
                    "JoinGroup", st.join_request(), timeout)
                if not st.on_join(joined):
                    continue
                assignments: list[group_pb2.MemberAssignment] = []
                leader = st.leader_input(joined)
                if leader is not None:
                    counts = await self._partition_counts(set(leader.topics))
                    assignments = st.assign(leader, counts, _now_ms())
                synced: group_pb2.SyncGroupResponse = await self._call(
                    "SyncGroup", st.sync_request(assignments), timeout)
                plan = st.on_sync(synced)
                if plan is None:
                    continue
                st.synced(version)
                return await self._assigned(plan)
            finally:
                st.end_round()  # an error or a cancelled step ends the round too
        return None

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

    async def _assigned(self, plan: AssignmentPlan) -> RebalanceCallbacks:
        """Apply an assignment: auto-commit what moved away, read the committed offsets of
        what is new, hand the fetcher its partitions."""
        if plan.revoked and self.settings.enable_auto_commit:
            await self._commit_quietly(self._positions(set(plan.revoked)))
        committed = await self.fetch_committed(sorted(plan.added)) if plan.added else {}
        missing: list[TopicPartition] = []
        subs = self.core.subs
        with subs.lock:
            # revoked partitions stay readable until the listener has heard of them
            subs.assign(plan.readable)
            for tp in sorted(plan.added):
                off = committed.get(tp)
                if off is not None:
                    subs.seek(tp, off)
                elif subs.default_reset == "none":
                    missing.append(tp)
            if missing:
                subs.errors.append(NoOffsetForPartitionError(missing))
        self.core.cancel_fetches()
        callbacks = self.state.assigned(plan)
        self._start_heartbeat()
        return callbacks

    # --- pattern subscriptions -------------------------------------------------------------
    async def _check_pattern(self) -> None:
        """Ask a broker for the cluster's topics; the state matches the pattern."""
        self.state.pattern_checked(_now_ms())
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
            self.state.on_metadata(response)
            return
        raise last or StromError(ErrorCode.NETWORK_EXCEPTION, "no broker address to ask")

    # --- heartbeats ------------------------------------------------------------------------
    def _start_heartbeat(self) -> None:
        if self._heartbeat is None or self._heartbeat.done():
            self._heartbeat = asyncio.get_running_loop().create_task(
                self._heartbeat_loop(), name="strom-consumer-heartbeat")

    async def _heartbeat_loop(self) -> None:
        st = self.state
        interval = self.settings.heartbeat_interval_ms / 1000.0
        while st.heartbeating():
            await asyncio.sleep(interval)
            if not st.heartbeating():
                return
            if st.poll_expired(_now_ms(), self._stepping):
                log.warning(
                    "group %s: poll() not called for more than max_poll_interval_ms=%d; "
                    "leaving the group (increase max_poll_interval_ms or reduce "
                    "max_poll_records)", self.group_id, self.settings.max_poll_interval_ms)
                await self.leave("consumer poll timeout has expired")
                st.rejoin_needed = True
                return
            if st.heartbeat_paused():
                continue
            try:
                await self._check_partition_counts()
                await self._send_heartbeat()
            except StromError as exc:
                if exc.code is ErrorCode.FENCED_INSTANCE_ID:
                    st.on_fatal(exc)
                    self.core.on_data()
                    return
                log.debug("group %s: heartbeat failed: %s", self.group_id, exc)
            except Exception:
                log.exception("group %s: heartbeat failed", self.group_id)

    async def _send_heartbeat(self) -> None:
        await self._ensure_coordinator()
        response: group_pb2.HeartbeatResponse = await self._call(
            "Heartbeat", self.state.heartbeat_request(),
            self.settings.request_timeout_ms / 1000.0)
        if self.state.on_heartbeat(response) is not HeartbeatOutcome.OK:
            self.core.on_data()  # wake a waiting poll() so it rejoins now

    async def _check_partition_counts(self) -> None:
        topics = self.state.partition_check_due(_now_ms())
        if topics is None:
            return
        self.core.metadata.mark_stale()
        found = await self._partition_counts(topics)
        if self.state.on_partition_counts(topics, found):
            self.core.on_data()

    # --- leaving ---------------------------------------------------------------------------
    async def leave(self, reason: str) -> None:
        """LeaveGroup for dynamic members (static ones stay until their session ends, KIP-345);
        either way this consumer forgets its generation, so its partitions count as lost."""
        if self._heartbeat is not None and self._heartbeat is not asyncio.current_task():
            self._heartbeat.cancel()
        request = self.state.leave_request() if self._coordinator is not None else None
        if request is not None:
            log.info("group %s: member %s leaves (%s)", self.group_id, self.state.member_id,
                     reason)
            try:
                await self._call("LeaveGroup", request,
                                 self.settings.request_timeout_ms / 1000.0)
            except StromError as exc:
                log.debug("group %s: LeaveGroup failed: %s", self.group_id, exc)
        self.state.left(sent_leave=request is not None)

    async def close(self) -> None:
        self.state.closed = True
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
            generation, member_id = self.state.commit_identity()
            request = commit_request(self.group_id, generation, member_id,
                                     self.state.instance_id, wanted)
            try:
                response: group_pb2.OffsetCommitResponse = await self._call(
                    "OffsetCommit", request, self.settings.request_timeout_ms / 1000.0)
                err = commit_error(response)
            except StromError as exc:
                err = exc
            if err is None:
                return
            if isinstance(err, CommitFailedError):
                if self.state.on_commit_failed(err):
                    self.core.on_data()
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
