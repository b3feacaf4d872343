"""The group coordinator of one broker: which ``__consumer_offsets`` partitions it serves.

Why it exists: a group's coordinator is the leader of partition ``hash(group) % N`` of the
internal compacted topic ``__consumer_offsets`` (Kafka's design), so coordination moves with
partition leadership and committed offsets are replicated like any record. This class

- creates ``__consumer_offsets`` on the first FindCoordinator (``offsets.topic.num.partitions``
  partitions, ``offsets.topic.replication.factor`` capped at the live brokers, compacted);
  creation races between brokers are settled by the metadata log (TOPIC_ALREADY_EXISTS is fine);
- on becoming leader of one of its partitions, replays that partition into a
  :class:`CoordinatorPartition` (COORDINATOR_LOAD_IN_PROGRESS meanwhile) and serves it; on losing
  leadership unloads it (parked requests get NOT_COORDINATOR). The publisher's leadership
  callback triggers this at once; a housekeeping loop reconciles every second as well, so a
  missed callback only delays it;
- feeds partition-count changes of topics to the groups (they rebalance when a subscribed topic
  grows), deletes the committed offsets of deleted topics (as Kafka does) and expires offsets
  every ``offsets.retention.check.interval.ms``;
- answers the metrics collector (groups per state, committed offsets and lag).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from typing import Any

from strom.broker.coordinator.loader import read_chunks
from strom.broker.coordinator.partition import CoordinatorPartition, LoadState
from strom.broker.coordinator.settings import GroupSettings
from strom.broker.metadata import BrokerInfo, ClusterMetadata
from strom.broker.metrics import BrokerMetrics
from strom.broker.topics import TopicManager
from strom.groups.offsets import OFFSETS_TOPIC, Record, partition_for_group
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.records import encode_batch
from strom.replication.manager import ReplicaManager
from strom.shutdown import cancel_and_wait
from strom.supervision import failed, spawn

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
# Kafka's: compacted, and 100 MiB segments (offsets.topic.segment.bytes) so that compaction, which
# never touches the active segment, keeps the replay on failover short.
OFFSETS_TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)}


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class GroupCoordinator:
    def __init__(self, settings: GroupSettings, broker_id: int, metadata: ClusterMetadata,
                 replicas: ReplicaManager, topics: TopicManager,
                 metrics: BrokerMetrics | None = None,
                 clock_ms: Callable[[], int] = _wall_ms) -> None:
        self.settings = settings
        self.broker_id = broker_id
        self._metadata = metadata
        self._replicas = replicas
        self._topics = topics
        self._metrics = metrics
        self._clock = clock_ms
        self.partitions: dict[int, CoordinatorPartition] = {}
        self._started = False
        self._loop_task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._creating: asyncio.Task[None] | None = None
        self._counts: dict[str, int] = {}
        self._counts_offset = -2
        self._next_expiry_ms = 0

    @property
    def metadata(self) -> ClusterMetadata:
        return self._metadata

    def now_ms(self) -> int:
        return self._clock()

    @property
    def started(self) -> bool:
        return self._started

    # ---- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Serve the ``__consumer_offsets`` partitions this broker leads now and from now on."""
        self._started = True
        self._refresh_counts()
        self._next_expiry_ms = self._clock() + self.settings.retention_check_interval_ms
        self._reconcile_all()
        if self._metrics is not None:
            self._metrics.watch_groups(self)
        self._loop_task = spawn("group-coordinator", self._housekeeping, restartable=True)

    async def stop(self) -> None:
        self._started = False
        await cancel_and_wait(
            t for t in (self._loop_task, self._creating, *self._tasks) if t is not None)
        for part in list(self.partitions.values()):
            await part.close()
        self.partitions.clear()

    def on_leadership(self, topic: str, partition: int, leader_epoch: int | None) -> None:
        """The publisher's callback: this broker started or stopped leading a partition."""
        if topic == OFFSETS_TOPIC and self._started:
            self._reconcile(partition)

    def _reconcile_all(self) -> None:
        topic = self._metadata.topic(OFFSETS_TOPIC)
        count = topic.partitions if topic is not None else 0
        for p in set(range(count)) | set(self.partitions):
            self._reconcile(p)

    def _reconcile(self, partition: int) -> None:
        view = self._replicas.view(OFFSETS_TOPIC, partition)
        leading = view is not None and self._replicas.is_leader(OFFSETS_TOPIC, partition)
        current = self.partitions.get(partition)
        if leading and current is not None and view is not None \
                and current.leader_epoch == view.leader_epoch:
            return
        if current is not None:
            log.info("%s-%d: no longer coordinator (leader epoch %d); unloading its %d groups",
                     OFFSETS_TOPIC, partition, current.leader_epoch, len(current.groups))
            current.unload()
            del self.partitions[partition]
        if leading and view is not None:
            part = CoordinatorPartition(partition, view.leader_epoch, self.settings,
                                        self._appender(partition), self._clock,
                                        self.current_counts, self._metrics)
            self.partitions[partition] = part
            self._spawn(self._load(part))

    async def _load(self, part: CoordinatorPartition) -> None:
        started = time.monotonic()
        try:
            plog = self._replicas.get(OFFSETS_TOPIC, part.partition)
            if plog is None:
                raise StromError(ErrorCode.NOT_COORDINATOR, "the partition log is gone")
            for chunk in read_chunks(plog):
                if part.state is not LoadState.LOADING:
                    return
                for record in chunk:
                    part.apply_loaded(record)
                await asyncio.sleep(0)
            if part.state is not LoadState.LOADING:
                return
            part.finish_load()
            self._forget_deleted_topics(part)
        except Exception as exc:
            # Dropped here; housekeeping loads it again (after the supervisor's backoff), and
            # a partition that keeps failing to load stops the broker rather than leaving its
            # groups without a coordinator.
            part.unload()
            if self.partitions.get(part.partition) is part:
                del self.partitions[part.partition]
            if isinstance(exc, StromError):
                log.warning("%s-%d: loading groups failed: %s", OFFSETS_TOPIC, part.partition,
                            exc)
                return
            await failed(f"group-loader-{part.partition}", exc)
            return
        log.info("%s-%d: coordinator loaded %d records, %d groups in %.2fs (leader epoch %d)",
                 OFFSETS_TOPIC, part.partition, part.loaded_records, len(part.groups),
                 time.monotonic() - started, part.leader_epoch)

    def _appender(self, partition: int) -> Callable[[Sequence[Record]], Awaitable[None]]:
        async def append(records: Sequence[Record]) -> None:
            # No suspension before the leader's synchronous write: log order is call order.
            config = self._topics.log_config(OFFSETS_TOPIC)
            data = encode_batch([(r.key, r.value) for r in records], timestamp_ms=self._clock())
            await self._replicas.append(OFFSETS_TOPIC, partition, data, -1, config,
                                        self.settings.commit_timeout_ms)

        return append

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _housekeeping(self) -> None:
        while True:
            await asyncio.sleep(self.settings.metadata_poll_ms / 1000)
            try:
                self._reconcile_all()
                self._publish_counts()
                now = self._clock()
                if now >= self._next_expiry_ms:
                    self._next_expiry_ms = now + self.settings.retention_check_interval_ms
                    for part in list(self.partitions.values()):
                        self._spawn(part.expire(now))
            except Exception as exc:
                await failed("group-coordinator", exc)

    def _forget_deleted_topics(self, part: CoordinatorPartition) -> None:
        existing = self._metadata.image.topics
        gone = {topic for offsets in part.store.offsets.values() for topic, _ in offsets
                if topic not in existing}
        if gone:
            log.info("%s-%d: deleting committed offsets of deleted topics %s", OFFSETS_TOPIC,
                     part.partition, sorted(gone))
            self._spawn(part.forget_topics(gone))

    def current_counts(self) -> Mapping[str, int]:
        """Every topic's partition count in the metadata image now, for the partitions' groups.

        A change since the last look is handed to every partition's groups first (a group
        whose subscribed topic changed since its generation formed rebalances), exactly as the
        housekeeping pass would. The partitions ask before each group request and timer tick,
        so a generation is formed against the topics that exist when it forms: with only the
        once-a-second pass, a group formed right after its topic was created took the topic
        as missing and was rebalanced again at the next pass, a round Kafka never starts."""
        self._publish_counts()
        return self._counts

    def _publish_counts(self) -> None:
        if self._refresh_counts():
            for part in list(self.partitions.values()):
                part.metadata_changed(self._counts)
                self._forget_deleted_topics(part)

    def _refresh_counts(self) -> bool:
        """Reread partition counts when the image moved; True when one changed."""
        image = self._metadata.image
        if image.offset == self._counts_offset:
            return False
        self._counts_offset = image.offset
        counts = {name: len(t.partitions) for name, t in image.topics.items()}
        if counts == self._counts:
            return False
        self._counts = counts
        return True

    # ---- routing --------------------------------------------------------------------------

    def partition_of(self, group_id: str) -> int:
        if not group_id:
            raise StromError(ErrorCode.INVALID_GROUP_ID, "group_id is empty; name the group")
        topic = self._metadata.topic(OFFSETS_TOPIC)
        if topic is None:
            raise StromError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                             f"{OFFSETS_TOPIC} does not exist yet; call FindCoordinator first")
        return partition_for_group(group_id, topic.partitions)

    def coordinator_for(self, group_id: str) -> CoordinatorPartition:
        """The loaded partition coordinating ``group_id`` here, or the error to answer."""
        partition = self.partition_of(group_id)
        part = self.partitions.get(partition)
        if part is None:
            raise StromError(ErrorCode.NOT_COORDINATOR,
                             f"broker {self.broker_id} is not the coordinator of group "
                             f"{group_id!r} (it does not lead {OFFSETS_TOPIC}-{partition}); "
                             f"call FindCoordinator again")
        part.check_active()
        return part

    async def find_coordinator(self, group_id: str) -> tuple[BrokerInfo, int]:
        """The broker leading the group's partition (creating ``__consumer_offsets`` if
        needed), and that partition."""
        if not group_id:
            raise StromError(ErrorCode.INVALID_GROUP_ID, "group_id is empty; name the group")
        if self._metadata.topic(OFFSETS_TOPIC) is None:
            await self._ensure_topic()
        partition = self.partition_of(group_id)
        state = self._metadata.partition_state(OFFSETS_TOPIC, partition)
        if state is None or state.leader < 0:
            raise StromError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                             f"{OFFSETS_TOPIC}-{partition} has no leader right now; retry")
        for broker in self._metadata.brokers():
            if broker.broker_id == state.leader and not broker.fenced:
                return broker, partition
        raise StromError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                         f"the leader of {OFFSETS_TOPIC}-{partition}, broker {state.leader}, is "
                         f"not available; retry")

    async def _ensure_topic(self) -> None:
        if self._creating is None or self._creating.done():
            self._creating = asyncio.create_task(self._create_topic())
        try:
            await asyncio.shield(self._creating)
        except StromError as err:
            raise StromError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                             f"creating {OFFSETS_TOPIC} failed ({err}); retry") from err

    async def _create_topic(self) -> None:
        live = len(self._metadata.live_brokers())
        rf = max(1, min(self.settings.replication_factor, live))
        try:
            plan = self._topics.plan_topic(OFFSETS_TOPIC, self.settings.num_partitions, rf,
                                           OFFSETS_TOPIC_CONFIGS)
            await self._topics.create(plan)
        except StromError as err:
            if err.code is not ErrorCode.TOPIC_ALREADY_EXISTS:
                raise
        else:
            log.info("created %s with %d partitions, replication factor %d", OFFSETS_TOPIC,
                     self.settings.num_partitions, rf)
        self._reconcile_all()

    # ---- metrics source -------------------------------------------------------------------

    def group_states(self) -> Mapping[str, int]:
        counts: dict[str, int] = {}
        for part in self.partitions.values():
            if part.state is not LoadState.ACTIVE:
                continue
            for listing in part.listings():
                counts[listing.state.value] = counts.get(listing.state.value, 0) + 1
        return counts

    def committed_offsets(self) -> Iterator[tuple[str, str, int, int, int | None]]:
        """(group, topic, partition, committed offset, high watermark if hosted here)."""
        for part in list(self.partitions.values()):
            for group_id, (topic, partition), offset in part.committed():
                plog = self._replicas.get(topic, partition)
                yield group_id, topic, partition, offset, (
                    plog.high_watermark if plog is not None else None)

