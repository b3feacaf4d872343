"""Turn each applied metadata image into actions on this broker's partitions (KRaft's publisher).

Why it exists: the metadata log says which brokers host, lead and follow which partitions; this
module is where a broker acts on it. After every batch of applied entries it compares the image
with what it last published and, for each partition whose replica list includes this broker,
hands the new :class:`PartitionView` to the replica manager (become leader / follower, ISR and
epoch updates); partitions this broker no longer hosts (topic deleted, reassigned away) are
removed and their logs deleted; topic config changes reach the open logs.

Nothing is published before the broker has caught up with the log up to its own registration
(``ready()``): a broker replaying an old prefix of the log must not act on leadership that has long
moved on.

Each partition directory holds ``partition.metadata`` with its topic id (as in Kafka), so a log
left on disk from a deleted topic is never mistaken for a new topic of the same name: such
"stray" logs are renamed ``<dir>.<topic id>-stray`` (kept, not deleted, and logged) when found.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable

from strom.controller.metadata import MetadataImage, TopicState
from strom.replication.manager import ReplicaManager
from strom.replication.state import PartitionView
from strom.shutdown import cancel_and_wait
from strom.storage.config import LogConfig
from strom.storage.manager import LogManager
from strom.supervision import spawn

log = logging.getLogger("strom.broker.publisher")

THROTTLE_KEY = "replication.throttled.rate"
SLICE_S = 0.02
"""Longest stretch of publishing between two yields to the event loop."""

TopicPartition = tuple[str, int]
LeadershipListener = Callable[[str, int, int | None], None]


def view_of(name: str, index: int, topic: TopicState) -> PartitionView:
    p = topic.partitions[index]
    return PartitionView(name, index, p.leader, p.leader_epoch, p.partition_epoch,
                         tuple(p.replicas), tuple(p.isr), tuple(p.adding_replicas),
                         tuple(p.removing_replicas), tuple(p.offline_replicas))


def hosted(image: MetadataImage, broker_id: int) -> set[TopicPartition]:
    """Every partition whose replica list includes ``broker_id`` (pure; no view is built:
    this runs over every partition at a restart)."""
    return {(name, index) for name, topic in image.topics.items()
            for index, p in topic.partitions.items() if broker_id in p.replicas}


def throttle_of(image: MetadataImage) -> int:
    """The reassignment throttle in bytes/s from the cluster-wide broker config, -1 = none."""
    raw = image.broker_configs.get("", {}).get(THROTTLE_KEY, "")
    try:
        value = int(raw)
    except ValueError:
        return -1
    return value if value > 0 else -1


class PendingKeys:
    """Keys in the order first added, each once; ``pop`` takes the first. (A dict used this
    way costs O(n) per pop from the front, since CPython's dict iterates over the entries
    deleted before it: 41 ms for 10,000 partitions, 0.35 s for 30,000.)"""

    __slots__ = ("_members", "_order")

    def __init__(self) -> None:
        self._members: set[TopicPartition] = set()
        self._order: deque[TopicPartition] = deque()

    def add(self, tp: TopicPartition) -> None:
        if tp not in self._members:
            self._members.add(tp)
            self._order.append(tp)

    def pop(self) -> TopicPartition:
        tp = self._order.popleft()
        self._members.discard(tp)
        return tp

    def __bool__(self) -> bool:
        return bool(self._order)

    def __len__(self) -> int:
        return len(self._order)


class MetadataPublisher:
    """Applies image changes to the replica manager; call :meth:`publish` after each apply.

    Work is driven by the image's :class:`~strom.controller.metadata.MetadataDelta`: only the
    partitions an entry touched are visited (a full comparison only when the image is new or
    replaced by a snapshot). The keys wait in an ordered pending set and are published in
    slices of at most ``slice_s`` seconds; what one slice leaves is published by a background
    task that yields to the event loop between slices, so heartbeats, requests and the Raft
    driver keep running while a broker creates 10,000 partitions (issue 21: a broker that
    published synchronously went 11 s without a heartbeat and fenced itself). ``offset`` is
    the image offset everything has been published for: the cluster link waits for it before
    a proposal returns and reports it in heartbeats (Kafka's broker reports the offset its
    metadata publishers reached), so a broker is not unfenced before it has opened its logs.
    """

    def __init__(self, broker_id: int, logs: LogManager, replicas: ReplicaManager,
                 log_config: Callable[[str], LogConfig],
                 on_topic_deleted: Callable[[str], None] | None = None,
                 on_leadership: LeadershipListener | None = None,
                 slice_s: float = SLICE_S) -> None:
        self.broker_id = broker_id
        self.on_leadership = on_leadership
        """Told (topic, partition, leader epoch or None) when this broker starts or stops leading
        a partition, after the replica manager applied it (the group coordinator loads and
        unloads ``__consumer_offsets`` partitions on it)."""
        self.on_progress: Callable[[], None] | None = None
        """Told when ``offset`` advanced."""
        self.slice_s = slice_s
        self._logs = logs
        self._replicas = replicas
        self._log_config = log_config
        self._on_topic_deleted = on_topic_deleted
        self._published: dict[TopicPartition, PartitionView] = {}
        self._published_topic_ids: dict[TopicPartition, str] = {}
        self._published_by_topic: dict[str, set[int]] = {}
        self._applied_config: dict[TopicPartition, LogConfig] = {}
        self._configs: dict[str, LogConfig] = {}
        self._configs_at = -1
        self._pending = PendingKeys()
        """Keys to compare with the image, in order."""
        self._image: MetadataImage | None = None
        self._target = -1
        self._task: asyncio.Task[None] | None = None
        self._run_started = 0.0
        self._run_count = 0
        self._run_led: list[tuple[TopicPartition, int]] = []
        """Partitions this broker took the leadership of (with the epoch) in this run."""
        self._run_resigned = 0
        self._ready = False
        self._compare_all = True
        """Compare every partition on the next publish (the first one)."""
        self.offset = -1
        """The image offset last published completely."""
        self.partitions_visited = 0
        """Partitions compared with the image so far (a measure of publishing work)."""

    @property
    def busy(self) -> bool:
        """Partitions are waiting to be published."""
        return bool(self._pending)

    def ready(self, image: MetadataImage) -> None:
        """The broker has caught up: handle logs found on disk, then publish from now on."""
        self._ready = True
        self._sweep_strays(image)
        self.publish(image)

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait([self._task])
            self._task = None

    def publish(self, image: MetadataImage) -> None:
        delta = image.take_delta()
        if not self._ready:
            return  # ready() compares everything
        full, self._compare_all = delta.full or self._compare_all, False
        self._image = image
        self._target = image.offset
        if full or delta.broker_configs:
            self._replicas.throttle_bytes_per_sec = throttle_of(image)
        if not self._pending:
            self._run_started, self._run_count = time.monotonic(), 0
        pending = self._pending
        if full:
            for tp in sorted(hosted(image, self.broker_id)):
                pending.add(tp)
            for tp in self._published:
                pending.add(tp)
        else:
            for name in sorted(delta.topics):
                for index in sorted(self._published_by_topic.get(name, ())):
                    pending.add((name, index))
                topic = image.topics.get(name)
                if topic is not None:
                    for index, p in topic.partitions.items():
                        if self.broker_id in p.replicas:
                            pending.add((name, index))
            for tp in sorted(delta.partitions):
                pending.add(tp)
        self._publish_slice()
        if not self._pending:
            self._finished()
        elif self._task is None:
            self._task = spawn("metadata-publisher", self._drain, restartable=False)

    async def _drain(self) -> None:
        try:
            while self._pending:
                await asyncio.sleep(0)  # let heartbeats, requests and the Raft driver run
                self._publish_slice()
        finally:
            self._task = None
        self._finished()

    def _publish_slice(self) -> None:
        image = self._image
        if image is None:
            return
        deadline = time.monotonic() + self.slice_s
        pending = self._pending
        done = 0
        while pending:
            tp = pending.pop()
            self._publish_one(image, tp)
            done += 1
            if time.monotonic() >= deadline:
                break
        self._run_count += done
        self.partitions_visited += done

    def _finished(self) -> None:
        if self._run_led or self._run_resigned:  # one line, not one per partition
            led = self._run_led
            examples = ", ".join(f"{t}-{p} in epoch {e}" for (t, p), e in led[:3])
            log.info("leading %d partitions in a new epoch%s; stopped leading %d", len(led),
                     f" ({examples}{', ...' if len(led) > 3 else ''})" if led else "",
                     self._run_resigned)
            self._run_led, self._run_resigned = [], 0
        if self._target == self.offset:
            return
        self.offset = self._target
        spent = time.monotonic() - self._run_started
        if spent > 0.5:
            log.warning("publishing metadata offset %d took %.2fs (%d partitions compared, %d "
                        "hosted here)", self.offset, spent, self._run_count,
                        len(self._published))
        if self.on_progress is not None:
            self.on_progress()

    def _publish_one(self, image: MetadataImage, tp: TopicPartition) -> None:
        topic = image.topics.get(tp[0])
        p = topic.partitions.get(tp[1]) if topic is not None else None
        hosted = p is not None and self.broker_id in p.replicas
        old = self._published.get(tp)
        if old is not None and (not hosted or (
                topic is not None and topic.topic_id != self._published_topic_ids.get(tp))):
            self._unpublish(image, tp)
            old = None
        if not hosted or topic is None:
            return
        view = view_of(tp[0], tp[1], topic)
        config = self._config_of(image, tp[0])
        config_changed = old is not None and self._applied_config.get(tp) is not config
        if old == view and not config_changed:
            return
        existed = True
        if old is None:
            self._ensure_topic_id(tp, topic.topic_id)
            existed = self._logs.get(*tp) is not None
        self._replicas.apply_partition(view, config)
        self._maybe_leadership_changed(tp, old, view)
        plog = self._replicas.get(*tp)
        if old is None and plog is not None and not existed:  # an existing log's id file was
            plog.write_topic_id(topic.topic_id)  # an existing log's was checked just above
        self._published[tp] = view
        self._published_topic_ids[tp] = topic.topic_id
        self._published_by_topic.setdefault(tp[0], set()).add(tp[1])
        self._applied_config[tp] = config

    def _config_of(self, image: MetadataImage, topic: str) -> LogConfig:
        """The topic's LogConfig, looked up once per topic and image offset (a topic's
        10,000 partitions asked the topic manager 10,000 times, ~8 us each)."""
        if self._configs_at != image.offset:
            self._configs.clear()
            self._configs_at = image.offset
        config = self._configs.get(topic)
        if config is None:
            config = self._configs[topic] = self._log_config(topic)
        return config

    def _unpublish(self, image: MetadataImage, tp: TopicPartition) -> None:
        topic = image.topics.get(tp[0])
        deleted = topic is None or topic.topic_id != self._published_topic_ids.get(tp)
        self._replicas.remove_partition(tp[0], tp[1], delete=True)
        dropped = self._published.pop(tp, None)
        if dropped is not None and dropped.leader == self.broker_id:
            self._leadership_changed(tp, None)
        self._published_topic_ids.pop(tp, None)
        self._applied_config.pop(tp, None)
        indexes = self._published_by_topic.get(tp[0])
        if indexes is not None:
            indexes.discard(tp[1])
            if not indexes:
                del self._published_by_topic[tp[0]]
        log.info("%s-%d: %s; its log is deleted", tp[0], tp[1],
                 "topic deleted" if deleted else "no longer a replica here")
        if deleted and self._on_topic_deleted is not None:
            self._on_topic_deleted(tp[0])

    def _maybe_leadership_changed(self, tp: TopicPartition, old: PartitionView | None,
                                  new: PartitionView) -> None:
        was = old is not None and old.leader == self.broker_id
        now = new.leader == self.broker_id
        if was != now or (now and old is not None and old.leader_epoch != new.leader_epoch):
            self._leadership_changed(tp, new.leader_epoch if now else None)

    def _leadership_changed(self, tp: TopicPartition, leader_epoch: int | None) -> None:
        if leader_epoch is None:
            self._run_resigned += 1
        else:
            self._run_led.append((tp, leader_epoch))
        if self.on_leadership is None:
            return
        try:
            self.on_leadership(tp[0], tp[1], leader_epoch)
        except Exception:
            log.exception("%s-%d: leadership listener failed", *tp)

    # -- topic ids on disk ----------------------------------------------------------------------

    def _ensure_topic_id(self, tp: TopicPartition, topic_id: str) -> None:
        """Before a log is (re)used for a partition: its directory must belong to this topic id."""
        plog = self._logs.get(*tp)
        if plog is None:
            return
        stored = plog.topic_id  # read when the log opened
        if stored is None:
            plog.write_topic_id(topic_id)
        elif stored != topic_id:
            self._set_aside(tp, stored)

    def _set_aside(self, tp: TopicPartition, stored: str) -> None:
        plog = self._logs.get(*tp)
        if plog is None:
            return
        directory = plog.directory
        self._replicas.remove_partition(tp[0], tp[1], delete=False)
        self._logs.forget(tp[0], tp[1])
        target = directory.with_name(f"{directory.name}.{stored}-stray")
        directory.rename(target)
        log.warning("%s-%d: the log on disk belongs to an older topic with the same name (topic id "
                    "%s); kept as %s", tp[0], tp[1], stored, target)

    def _sweep_strays(self, image: MetadataImage) -> None:
        """Logs on disk that the caught-up image does not place here."""
        wanted = hosted(image, self.broker_id)
        for tp in list(self._logs.partitions()):
            if tp in wanted:
                continue
            plog = self._logs.get(*tp)
            if plog is None:
                continue
            stored = plog.topic_id
            topic = image.topics.get(tp[0])
            if topic is not None and stored == topic.topic_id:
                log.info("%s-%d is no longer assigned to this broker; deleting its log", *tp)
                self._logs.delete_partition(*tp)
            else:
                self._set_aside(tp, stored or "unknown")

