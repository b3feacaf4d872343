"""The coordinator of one ``__consumer_offsets`` partition: its groups, offsets and timer.

Why it exists: the pure ``Group`` state machine and ``OffsetStore`` decide everything but do no
I/O; this class is their driver. It parks each request as a future keyed by a request id until
the group's outputs answer it, ticks groups at their next deadline (one timer task per
partition), and writes group metadata and offset commits to the partition through an injected
``append`` (the replica manager with acks=-1 in the broker; a fake in tests). Nothing is applied
to the in-memory store before its append is acknowledged by the in-sync replicas, exactly as a
replay of the log would apply it, so a coordinator that takes over after a failover knows every
commit a client was told succeeded.

Everything runs on the event loop's thread; no locks. Appends are issued in call order (the
leader writes synchronously before the first suspension), and an acknowledged append also proves
every earlier one durable (the high watermark only moves forward), so applying in log order is a
matter of applying every earlier pending write first.

Responses in the same batch of outputs as a transition to Stable or Empty are held until that
transition's group record is durable (Kafka's storeGroup before the SyncGroup answers); if the
write fails, SyncGroup answers carry the error and the members rejoin.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
import itertools
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from strom.broker.coordinator.settings import GroupSettings
from strom.groups.membership import (
    Group,
    GroupSnapshot,
    GroupState,
    Heartbeat,
    HeartbeatResponse,
    JoinGroup,
    JoinGroupResponse,
    LeaveGroup,
    LeaveGroupResponse,
    MemberRemoved,
    MetadataChanged,
    Output,
    RebalanceCompleted,
    RebalanceStarted,
    StateChanged,
    SyncGroup,
    SyncGroupResponse,
)
from strom.groups.offsets import (
    OFFSETS_TOPIC,
    GroupKey,
    OffsetAndMetadata,
    OffsetStore,
    Record,
    decode_key,
    group_metadata_from_snapshot,
    group_record,
    offset_record,
    snapshot_from_group_metadata,
)
from strom.protocol.errors import ErrorCode, StromError
from strom.supervision import failed

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
Appender = Callable[[Sequence[Record]], Awaitable[None]]
Request = JoinGroup | SyncGroup | Heartbeat | LeaveGroup
Response = JoinGroupResponse | SyncGroupResponse | HeartbeatResponse | LeaveGroupResponse


class LoadState(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"
    UNLOADED = "unloaded"


class GroupObserver(Protocol):
    """Where rebalances are reported (the broker's metrics)."""

    def rebalance_started(self, group_id: str) -> None: ...

    def rebalance_completed(self, group_id: str, duration_ms: int) -> None: ...

    def group_removed(self, group_id: str) -> None: ...


class _NoObserver:
    def rebalance_started(self, group_id: str) -> None:
        pass

    def rebalance_completed(self, group_id: str, duration_ms: int) -> None:
        pass

    def group_removed(self, group_id: str) -> None:
        pass


def append_error(code: ErrorCode) -> ErrorCode:
    """What a client is told when writing to ``__consumer_offsets`` failed (Kafka's mapping in
    ``GroupMetadataManager``): retriable coordinator errors, so clients find the coordinator
    again or retry."""
    if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR,
                ErrorCode.NOT_COORDINATOR, ErrorCode.FENCED_LEADER_EPOCH):
        return ErrorCode.NOT_COORDINATOR
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE,
                ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    if code is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
        return code
    return ErrorCode.UNKNOWN_SERVER_ERROR


def error_response(request: Request, request_id: object, code: ErrorCode) -> Response:
    if isinstance(request, JoinGroup):
        return JoinGroupResponse(request_id, code, member_id=request.member_id)
    if isinstance(request, SyncGroup):
        return SyncGroupResponse(request_id, code)
    if isinstance(request, Heartbeat):
        return HeartbeatResponse(request_id, code)
    return LeaveGroupResponse(request_id, code)


@dataclass
class _Write:
    records: Sequence[Record]


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    state: GroupState
    protocol_type: str


class CoordinatorPartition:
    def __init__(self, partition: int, leader_epoch: int, settings: GroupSettings,
                 append: Appender, clock_ms: Callable[[], int],
                 partition_counts: Callable[[], Mapping[str, int]] = dict,
                 observer: GroupObserver | None = None) -> None:
        self.partition = partition
        self.leader_epoch = leader_epoch
        self.settings = settings
        self.state = LoadState.LOADING
        self.store = OffsetStore()
        self.groups: dict[str, Group] = {}
        self._append = append
        self._clock = clock_ms
        # The topics' partition counts now. The coordinator's (``current_counts``) first hands
        # a change since its last look to every partition's groups (``metadata_changed``), so
        # calling it before a group request or tick means a generation that forms then is
        # compared against the topics as they are, not as the last once-a-second pass saw them.
        self._partition_counts = partition_counts
        self._observer: GroupObserver = observer or _NoObserver()
        self._ids = itertools.count()
        self._waiting: dict[object, tuple[asyncio.Future[Response], Request]] = {}
        self._writes: collections.deque[_Write] = collections.deque()
        self._tasks: set[asyncio.Task[None]] = set()
        self._timer: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self.loaded_records = 0

    # ---- lifecycle ------------------------------------------------------------------------

    def apply_loaded(self, record: Record) -> None:
        """One record replayed from the partition while loading."""
        self.store.apply(record)
        self.loaded_records += 1

    def finish_load(self, *, timer: bool = True) -> None:
        """The replay reached the log end: rebuild groups and serve."""
        if self.state is not LoadState.LOADING:
            return
        now = self._clock()
        for group_id, metadata in self.store.groups.items():
            group = Group.restore(snapshot_from_group_metadata(group_id, metadata), now,
                                  self.settings.group)
            self._feed_counts(group)
            self.groups[group_id] = group
        self.state = LoadState.ACTIVE
        if timer:
            self._timer = asyncio.create_task(self._timer_loop(),
                                              name=f"group-timer-{self.partition}")

    def unload(self) -> None:
        """Leadership is gone: answer everything parked with NOT_COORDINATOR, stop the timer."""
        if self.state is LoadState.UNLOADED:
            return
        self.state = LoadState.UNLOADED
        for task in [*self._tasks, *([self._timer] if self._timer else [])]:
            task.cancel()
        self._timer = None
        for group in self.groups.values():
            self._deliver([o for o in group.unload(ErrorCode.NOT_COORDINATOR)
                           if isinstance(o, _RESPONSES)])
        for request_id, (future, request) in list(self._waiting.items()):
            if not future.done():
                future.set_result(error_response(request, request_id,
                                                 ErrorCode.NOT_COORDINATOR))
        self.groups.clear()
        self._writes.clear()

    async def close(self) -> None:
        tasks = [*self._tasks, *([self._timer] if self._timer else [])]
        self.unload()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def check_active(self) -> None:
        if self.state is LoadState.LOADING:
            raise StromError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                             f"partition {self.partition} of {OFFSETS_TOPIC} is still being "
                             f"loaded after a leadership change; retry shortly")
        if self.state is LoadState.UNLOADED:
            raise StromError(ErrorCode.NOT_COORDINATOR,
                             f"this broker no longer leads partition {self.partition} of "
                             f"{OFFSETS_TOPIC}; find the coordinator again")

    # ---- membership -----------------------------------------------------------------------

    async def handle(self, group_id: str, request: Request) -> Response:
        """Join, Sync, Heartbeat or Leave; waits until the group answers (or unload)."""
        self.check_active()
        self._partition_counts()  # a topic change first reaches the groups (see __init__)
        request_id = next(self._ids)
        group = self.groups.get(group_id)
        created = group is None
        if group is None:
            if not isinstance(request, JoinGroup):
                return error_response(request, request_id, ErrorCode.UNKNOWN_MEMBER_ID)
            group = self.groups[group_id] = Group(group_id, self.settings.group)
            self._feed_counts(group)
        event = replace(request, request_id=request_id)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("group %s (%s, generation %d): request %s %s", group_id,
                      group.state.value, group.generation, request_id, _brief(event))
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = (future, request)
        try:
            self._process(group, group.handle(event, self._clock()))
            if created and group.is_unused():
                # The JoinGroup that would have created it was refused (a session timeout out
                # of bounds, no protocols): as in Kafka, no group is left behind to be listed.
                del self.groups[group_id]
            self._wake.set()
            return await future
        finally:
            self._waiting.pop(request_id, None)

    def tick(self, now_ms: int | None = None) -> None:
        """Give every group whose deadline passed its tick (the timer calls this)."""
        if self.state is not LoadState.ACTIVE:
            return
        now = self._clock() if now_ms is None else now_ms
        self._partition_counts()  # a topic change first reaches the groups (see __init__)
        for group in list(self.groups.values()):
            deadline = group.next_deadline_ms()
            if deadline is not None and deadline <= now:
                self._process(group, group.tick(now))

    def next_deadline_ms(self) -> int | None:
        deadlines = [d for g in self.groups.values() if (d := g.next_deadline_ms()) is not None]
        return min(deadlines, default=None)

    def metadata_changed(self, counts: Mapping[str, int]) -> None:
        """Partition counts changed: groups subscribed to a changed topic rebalance."""
        if self.state is not LoadState.ACTIVE:
            return
        now = self._clock()
        for group in list(self.groups.values()):
            if group.state is not GroupState.DEAD:
                self._process(group, group.handle(MetadataChanged(dict(counts)), now))
        self._wake.set()

    def _feed_counts(self, group: Group) -> None:
        counts = self._partition_counts()
        if counts:
            group.handle(MetadataChanged(dict(counts)), self._clock())

    def _process(self, group: Group, outputs: Iterable[Output]) -> None:
        responses: list[Response] = []
        persist = removed = False
        for out in outputs:
            if isinstance(out, RebalanceStarted):
                log.info("group %s: rebalance from generation %d: %s", out.group_id,
                         out.generation, out.reason)
                self._observer.rebalance_started(out.group_id)
            elif isinstance(out, RebalanceCompleted):
                log.info("group %s: generation %d formed in %d ms", out.group_id,
                         out.generation, out.duration_ms)
                self._observer.rebalance_completed(out.group_id, out.duration_ms)
            elif isinstance(out, StateChanged):
                log.debug("group %s: %s -> %s (generation %d)", out.group_id, out.old.value,
                          out.new.value, group.generation)
                persist |= out.new in (GroupState.STABLE, GroupState.EMPTY)
            elif isinstance(out, MemberRemoved):
                removed = True
                log.info("group %s: member %s removed (%s)", out.group_id, out.member_id,
                         out.reason)
            else:
                responses.append(out)
        # A static member replaced without a rebalance (KIP-345) changes the stored member list.
        persist |= removed and group.state is GroupState.STABLE
        if not persist:
            self._deliver(responses)
            return
        metadata = group_metadata_from_snapshot(group.snapshot(), self._clock())
        self._spawn(self._persist_then_deliver(group_record(group.group_id, metadata),
                                               responses))

    async def _persist_then_deliver(self, record: Record, responses: list[Response]) -> None:
        try:
            await self.write([record])
        except StromError as err:
            code = append_error(err.code)
            log.warning("partition %d: storing group metadata failed (%s); members will "
                        "rejoin", self.partition, err)
            responses = [replace(r, error=code)
                         if isinstance(r, SyncGroupResponse) and r.error is ErrorCode.NONE else r
                         for r in responses]
        self._deliver(responses)

    def _deliver(self, responses: Iterable[Response]) -> None:
        for response in responses:
            if log.isEnabledFor(logging.DEBUG):
                log.debug("answer %s %s", response.request_id, _brief(response))
            waiting = self._waiting.get(response.request_id)
            if waiting is not None and not waiting[0].done():
                waiting[0].set_result(response)

    def _spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _timer_loop(self) -> None:
        while self.state is LoadState.ACTIVE:
            self._wake.clear()
            deadline = self.next_deadline_ms()
            timeout = None if deadline is None else max(deadline - self._clock(), 0) / 1000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)
            try:
                self.tick()
            except Exception as exc:  # supervised: backs off, stops the broker if it persists
                await failed(f"group-timer-{self.partition}", exc)

    # ---- writes ---------------------------------------------------------------------------

    async def write(self, records: Sequence[Record]) -> None:
        """Append and wait for the in-sync replicas; then apply (with every earlier write)."""
        entry = _Write(records)
        self._writes.append(entry)
        try:
            await self._append(records)
        except BaseException:
            with contextlib.suppress(ValueError):
                self._writes.remove(entry)
            raise
        if entry not in self._writes:
            return  # a later write's acknowledgement already applied it
        while self._writes:
            done = self._writes.popleft()
            if self.state is not LoadState.UNLOADED:
                for record in done.records:
                    self.store.apply(record)
            if done is entry:
                break

    # ---- offsets --------------------------------------------------------------------------

    async def commit(self, group_id: str, member_id: str, generation: int,
                     group_instance_id: str | None,
                     offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> ErrorCode:
        """OffsetCommit: validated by the group, acknowledged once durable."""
        self.check_active()
        group = self.groups.get(group_id)
        if group is None:
            if generation >= 0:  # a member of a group this coordinator does not know
                return ErrorCode.ILLEGAL_GENERATION
        else:
            error = group.validate_offset_commit(member_id, generation, group_instance_id,
                                                 self._clock())
            if error is not ErrorCode.NONE:
                return error
        if not offsets:
            return ErrorCode.NONE
        try:
            await self.write(self.store.commit(group_id, offsets))
        except StromError as err:
            log.warning("group %s: offset commit failed: %s", group_id, err)
            return append_error(err.code)
        return ErrorCode.NONE

    def fetch(self, group_id: str, partitions: Iterable[TopicPartition] | None
              ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        self.check_active()
        return self.store.fetch(group_id, partitions)

    async def expire(self, now_ms: int | None = None) -> int:
        """Tombstone offsets (and groups) of empty groups past retention; returns the count."""
        if self.state is not LoadState.ACTIVE:
            return 0
        now = self._clock() if now_ms is None else now_ms
        records = []
        gone_groups = set()
        for r in self.store.expire(now, self.settings.retention_ms):
            key = decode_key(r.key)
            if self._expirable(key.group_id):
                records.append(r)
                if isinstance(key, GroupKey):
                    gone_groups.add(key.group_id)
        for group_id, group in list(self.groups.items()):
            # Groups that never got stored (e.g. a join that never completed) and are idle.
            if (group.state is GroupState.EMPTY and group.next_deadline_ms() is None
                    and group_id not in self.store.groups and group_id not in self.store.offsets):
                del self.groups[group_id]
        if not records:
            return 0
        try:
            await self.write(records)
        except StromError as err:
            log.warning("partition %d: expiring offsets failed: %s", self.partition, err)
            return 0
        for group_id in gone_groups:
            gone = self.groups.get(group_id)
            if gone is not None and gone.state is GroupState.EMPTY:
                del self.groups[group_id]
            self._observer.group_removed(group_id)
        log.info("partition %d: expired %d offsets/groups", self.partition, len(records))
        return len(records)

    async def forget_topics(self, topics: Iterable[str]) -> int:
        """Tombstone every group's offsets of deleted topics (Kafka's onPartitionsDeleted), so
        a topic created again under the name does not start from stale positions."""
        if self.state is not LoadState.ACTIVE:
            return 0
        gone = set(topics)
        records = [offset_record(group_id, tp, None)
                   for group_id, offsets in sorted(self.store.offsets.items())
                   for tp in sorted(offsets) if tp[0] in gone]
        if not records:
            return 0
        try:
            await self.write(records)
        except StromError as err:
            log.warning("partition %d: deleting offsets of deleted topics failed: %s",
                        self.partition, err)
            return 0
        return len(records)

    def _expirable(self, group_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is None or group.state is GroupState.EMPTY

    # ---- admin ----------------------------------------------------------------------------

    def listings(self) -> list[GroupListing]:
        self.check_active()
        out = [GroupListing(g.group_id, g.state, g.protocol_type or "")
               for g in self.groups.values() if g.state is not GroupState.DEAD]
        out += [GroupListing(group_id, GroupState.EMPTY, "")
                for group_id in self.store.offsets if group_id not in self.groups]
        return out

    def describe(self, group_id: str) -> GroupSnapshot:
        """Kafka describes an unknown group as Dead (no error)."""
        self.check_active()
        group = self.groups.get(group_id)
        if group is not None:
            return group.snapshot()
        state = GroupState.EMPTY if group_id in self.store.offsets else GroupState.DEAD
        return GroupSnapshot(group_id, state, 0, None, None, None, ())

    async def delete(self, group_id: str) -> ErrorCode:
        """Admin DeleteGroups: only an empty group; tombstones for its offsets and metadata."""
        self.check_active()
        group = self.groups.get(group_id)
        if group is not None:
            error = group.delete()  # Dead from here: joins meanwhile are refused
            if error is not ErrorCode.NONE:
                return error
        elif group_id not in self.store.offsets and group_id not in self.store.groups:
            return ErrorCode.GROUP_ID_NOT_FOUND
        records = self.store.delete_group(group_id)
        try:
            if records:
                await self.write(records)
        except StromError as err:
            self.groups.pop(group_id, None)
            stored = self.store.groups.get(group_id)
            if stored is not None:
                self.groups[group_id] = Group.restore(
                    snapshot_from_group_metadata(group_id, stored), self._clock(),
                    self.settings.group)
            return append_error(err.code)
        self.groups.pop(group_id, None)
        self._observer.group_removed(group_id)
        log.info("group %s deleted (%d records tombstoned)", group_id, len(records))
        return ErrorCode.NONE

    async def delete_offsets(self, group_id: str, partitions: Iterable[TopicPartition]
                             ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """Admin OffsetDelete, as Kafka: any partition of an empty group; of a consumer group
        with members, those of topics no member subscribes to (GROUP_SUBSCRIBED_TO_TOPIC for
        the others); a non-empty group of another protocol type is NON_EMPTY_GROUP."""
        self.check_active()
        group = self.groups.get(group_id)
        if group is None and group_id not in self.store.offsets:
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        if group is not None and group.state is GroupState.DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        subscribed: frozenset[str] = frozenset()
        if group is not None and group.state is not GroupState.EMPTY:
            if group.protocol_type != "consumer":
                return ErrorCode.NON_EMPTY_GROUP, {}
            subscribed = group.subscribed_topics()
        wanted = list(dict.fromkeys(partitions))
        errors = {tp: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC if tp[0] in subscribed
                  else ErrorCode.NONE for tp in wanted}
        records = self.store.delete_offsets(
            group_id, [tp for tp, e in errors.items() if e is ErrorCode.NONE])
        if records:
            try:
                await self.write(records)
            except StromError as err:
                failed = append_error(err.code)
                return ErrorCode.NONE, {tp: failed if e is ErrorCode.NONE else e
                                        for tp, e in errors.items()}
            log.info("group %s: deleted the committed offsets of %d partitions", group_id,
                     len(records))
        return ErrorCode.NONE, errors

    # ---- metrics --------------------------------------------------------------------------

    def committed(self) -> Iterator[tuple[str, TopicPartition, int]]:
        if self.state is not LoadState.ACTIVE:
            return
        for group_id, offsets in self.store.offsets.items():
            for tp, value in offsets.items():
                yield group_id, tp, value.offset


def _brief(message: Request | Response) -> str:
    """One debug line for a request or a response: its type and the fields that tell a group's
    story (member, generation, error, leader, members, assignment), without metadata bytes."""
    fields = [type(message).__name__]
    for name in ("member_id", "generation", "error", "leader_id", "protocol_name"):
        value = getattr(message, name, None)
        if value is not None and value != "":
            fields.append(f"{name}={getattr(value, 'name', value)}")
    if isinstance(message, JoinGroup):
        fields.append(f"topics={list(message.subscription.topics)}")
    elif isinstance(message, JoinGroupResponse) and message.members:
        fields.append(f"members={[m.member_id for m in message.members]}")
    elif isinstance(message, SyncGroup) and message.assignments is not None:
        fields.append(f"assignments={dict(message.assignments)}")
    elif isinstance(message, SyncGroupResponse):
        fields.append(f"assignment={list(message.assignment)}")
    elif isinstance(message, LeaveGroup):
        fields.append(f"members={[m.member_id for m in message.members]}")
    return " ".join(fields)


_RESPONSES = (JoinGroupResponse, SyncGroupResponse, HeartbeatResponse, LeaveGroupResponse)
