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

import logging
import time
from collections.abc import Callable
from pathlib import Path

from strom.controller.metadata import MetadataImage, TopicState
from strom.replication.manager import ReplicaManager
from strom.replication.state import PartitionView
from strom.storage.config import LogConfig
from strom.storage.manager import LogManager

log = logging.getLogger("strom.broker.publisher")

PARTITION_METADATA = "partition.metadata"
THROTTLE_KEY = "replication.throttled.rate"

TopicPartition = tuple[str, int]
LeadershipListener = Callable[[str, int, int | None], None]


def view_of(name: str, index: int, topic: TopicState) -> PartitionView:
    p = topic.partitions[index]
    return PartitionView(name, index, p.leader, p.leader_epoch, p.partition_epoch,
                         tuple(p.replicas), tuple(p.isr), tuple(p.adding_replicas),
                         tuple(p.removing_replicas), tuple(p.offline_replicas))


def hosted_views(image: MetadataImage, broker_id: int) -> dict[TopicPartition, PartitionView]:
    """Every partition whose replica list includes ``broker_id`` (pure)."""
    out: dict[TopicPartition, PartitionView] = {}
    for name, topic in image.topics.items():
        for index, p in topic.partitions.items():
            if broker_id in p.replicas:
                out[(name, index)] = view_of(name, index, topic)
    return out


def throttle_of(image: MetadataImage) -> int:
    """The reassignment throttle in bytes/s from the cluster-wide broker config, -1 = none."""
    raw = image.broker_configs.get("", {}).get(THROTTLE_KEY, "")
    try:
        value = int(raw)
    except ValueError:
        return -1
    return value if value > 0 else -1


class MetadataPublisher:
    """Applies image changes to the replica manager; call :meth:`publish` after each apply."""

    def __init__(self, broker_id: int, logs: LogManager, replicas: ReplicaManager,
                 log_config: Callable[[str], LogConfig],
                 on_topic_deleted: Callable[[str], None] | None = None,
                 on_leadership: LeadershipListener | None = None) -> None:
        self.broker_id = broker_id
        self.on_leadership = on_leadership
        """Told (topic, partition, leader epoch or None) when this broker starts or stops leading
        a partition, after the replica manager applied it (the group coordinator loads and
        unloads ``__consumer_offsets`` partitions on it)."""
        self._logs = logs
        self._replicas = replicas
        self._log_config = log_config
        self._on_topic_deleted = on_topic_deleted
        self._published: dict[TopicPartition, PartitionView] = {}
        self._published_topic_ids: dict[TopicPartition, str] = {}
        self._applied_config: dict[TopicPartition, LogConfig] = {}
        self._ready = False
        self.offset = -1
        """The image offset last published."""

    def ready(self, image: MetadataImage) -> None:
        """The broker has caught up: handle logs found on disk, then publish from now on."""
        self._ready = True
        self._sweep_strays(image)
        self.publish(image)

    def publish(self, image: MetadataImage) -> None:
        if not self._ready:
            return
        started = time.monotonic()
        self.offset = image.offset
        self._replicas.throttle_bytes_per_sec = throttle_of(image)
        wanted = hosted_views(image, self.broker_id)
        for tp in [tp for tp in self._published if tp not in wanted]:
            topic = image.topics.get(tp[0])
            deleted = topic is None or topic.topic_id != self._published_topic_ids.get(tp)
            self._replicas.remove_partition(tp[0], tp[1], delete=True)
            dropped = self._published.pop(tp, None)
            if dropped is not None and dropped.leader == self.broker_id:
                self._leadership_changed(tp, None)
            self._published_topic_ids.pop(tp, None)
            log.info("%s-%d: %s; its log is deleted", tp[0], tp[1],
                     "topic deleted" if deleted else "no longer a replica here")
            if deleted and self._on_topic_deleted is not None:
                self._on_topic_deleted(tp[0])
        for tp, view in wanted.items():
            topic = image.topics[tp[0]]
            config = self._log_config(tp[0])
            old = self._published.get(tp)
            config_changed = old is not None and self._applied_config.get(tp) is not config
            if old == view and not config_changed:
                continue
            if old is None:
                self._ensure_topic_id(tp, topic.topic_id)
            self._replicas.apply_partition(view, config)
            self._maybe_leadership_changed(tp, old, view)
            plog = self._replicas.get(*tp)
            if old is None and plog is not None and read_topic_id(plog.directory) is None:
                write_topic_id(plog.directory, topic.topic_id)
            self._published[tp] = view
            self._published_topic_ids[tp] = topic.topic_id
            self._applied_config[tp] = config
        spent = time.monotonic() - started
        if spent > 0.5:
            log.warning("publishing metadata offset %d took %.2fs (%d partitions here)",
                        image.offset, spent, len(wanted))

    def _maybe_leadership_changed(self, tp: TopicPartition, old: PartitionView | None,
                                  new: PartitionView) -> None:
        was = old is not None and old.leader == self.broker_id
        now = new.leader == self.broker_id
        if was != now or (now and old is not None and old.leader_epoch != new.leader_epoch):
            self._leadership_changed(tp, new.leader_epoch if now else None)

    def _leadership_changed(self, tp: TopicPartition, leader_epoch: int | None) -> None:
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
        stored = read_topic_id(plog.directory)
        if stored is None:
            write_topic_id(plog.directory, topic_id)
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
        wanted = hosted_views(image, self.broker_id)
        for tp in list(self._logs.partitions()):
            if tp in wanted:
                continue
            plog = self._logs.get(*tp)
            if plog is None:
                continue
            stored = read_topic_id(plog.directory)
            topic = image.topics.get(tp[0])
            if topic is not None and stored == topic.topic_id:
                log.info("%s-%d is no longer assigned to this broker; deleting its log", *tp)
                self._logs.delete_partition(*tp)
            else:
                self._set_aside(tp, stored or "unknown")


def read_topic_id(directory: Path) -> str | None:
    try:
        for line in (directory / PARTITION_METADATA).read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "topic_id":
                return value.strip()
    except OSError:
        return None
    return None


def write_topic_id(directory: Path, topic_id: str) -> None:
    (directory / PARTITION_METADATA).write_text(f"version: 0\ntopic_id: {topic_id}\n",
                                                encoding="utf-8")
