"""The objects one broker is made of, wired together; handlers receive this and nothing else.

``BrokerCore`` holds the configuration, the link to the controller quorum (this broker's Raft
member, registration, heartbeats), the read view of the metadata image, the log manager, the
replica manager (partition logs on the request path, replication), the metadata publisher that
turns image changes into replica changes, the topic manager (validation and proposals), producer
ids and the metrics. ``create`` builds it without touching the network; ``start`` joins the
cluster (so in-process tests can drive the RPC handlers of a started core directly).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from strom.broker.alter_partition import AlterPartitionManager
from strom.broker.cluster import ClusterLink
from strom.broker.config import BrokerConfig
from strom.broker.coordinator import GroupCoordinator, GroupSettings
from strom.broker.fetch_sessions import FetchSessionCache
from strom.broker.metadata import ClusterMetadata
from strom.broker.metrics import BrokerMetrics
from strom.broker.producer_ids import ProducerIdManager
from strom.broker.publisher import MetadataPublisher
from strom.broker.segment_files import create_ahead
from strom.broker.topics import TopicManager
from strom.controller.metadata import (
    Command,
    CreateTopic,
    Endpoint,
    LogDirsOffline,
    MetadataImage,
    PartitionState,
)
from strom.protocol.errors import StromError
from strom.replication.manager import ReplicaManager
from strom.replication.settings import ReplicationSettings
from strom.shutdown import cancel_and_wait
from strom.storage.manager import LogManager
from strom.supervision import spawn

log = logging.getLogger(__name__)

UNFENCE_TIMEOUT_S = 30.0
REPORT_BEFORE_UNFENCE_S = 10.0
DEFERRED_SLICE_S = 0.02
"""Longest stretch of reading deferred logs between two yields to the event loop."""
DEFERRED_PAUSE_S = 0.005
"""Pause between two slices, so requests keep being served while the rest loads."""


@dataclass
class BrokerCore:
    config: BrokerConfig
    link: ClusterLink
    metadata: ClusterMetadata
    logs: LogManager
    replicas: ReplicaManager
    publisher: MetadataPublisher
    topics: TopicManager
    producer_ids: ProducerIdManager
    metrics: BrokerMetrics
    groups: GroupCoordinator
    isr_changes: AlterPartitionManager
    fetch_sessions: FetchSessionCache = field(default_factory=FetchSessionCache)
    """Consumers' fetch sessions on the gRPC front (the Kafka listener keeps its own cache of
    the same kind)."""
    _stopped: bool = False
    _loader: asyncio.Task[None] | None = None
    _file_creator: asyncio.Task[None] | None = None
    _files_wanted: asyncio.Event = field(default_factory=asyncio.Event)

    @classmethod
    def create(cls, config: BrokerConfig, *, port: int,
               listeners: tuple[Endpoint, ...] = ()) -> BrokerCore:
        """Build every part; nothing is loaded or contacted yet. ``port`` is the bound gRPC
        port, ``listeners`` the advertised endpoints of other listeners (the Kafka one)."""
        holder: list[BrokerCore] = []

        def on_image(image: MetadataImage) -> None:
            if holder:
                holder[0].publisher.publish(image)

        link = ClusterLink(config, port, on_image, listeners)
        metadata = ClusterMetadata(link)
        logs = LogManager(list(config.log_dirs), config.topic_defaults,
                          producer_id_expiration_ms=int(config.get("producer.id.expiration.ms")),
                          recovery_threads=int(config.get("num.recovery.threads.per.data.dir")))

        def partition_state(topic: str, partition: int) -> PartitionState | None:
            t = link.image.topics.get(topic)
            return t.partitions.get(partition) if t is not None else None

        isr_changes = AlterPartitionManager(link.propose, partition_state)
        replicas = ReplicaManager(_replication_settings(config), logs, isr_changes.alter_isr,
                                  metadata.broker_address)
        metrics = BrokerMetrics(config.broker_id, config.cluster_id, _version())
        topics = TopicManager(config, metadata, link.propose)
        publisher = MetadataPublisher(config.broker_id, logs, replicas, topics.log_config,
                                      on_topic_deleted=metrics.forget_topic)
        producer_ids = ProducerIdManager(
            config.broker_id, link.propose,
            lambda: link.image.producer_id_blocks.get(config.broker_id))
        metrics.watch_logs(replicas.logs)
        metrics.watch_quorum(link)
        metrics.watch_log_dirs(str(d) for d in logs.log_dirs)
        groups = GroupCoordinator(GroupSettings.from_config(config), config.broker_id, metadata,
                                  replicas, topics, metrics)
        publisher.on_leadership = groups.on_leadership
        core = cls(config, link, metadata, logs, replicas, publisher, topics, producer_ids,
                   metrics, groups, isr_changes)
        holder.append(core)
        for directory in logs.log_dirs:
            metrics.log_dir_offline.labels(str(directory)).set(0)
        logs.on_dir_offline = core._dir_offline
        return core

    # -- log directory failure ----------------------------------------------------------------

    def _dir_offline(self, directory: Path, reason: str) -> None:
        """A log directory failed I/O (possibly while loading, in a worker thread): count it,
        and once the broker is registered, report it to the controller."""
        self.metrics.log_dir_offline.labels(str(directory)).set(1)
        self.metrics.offline_log_dirs.set(len(self.logs.offline_dirs))
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # loading: start() reports it once the broker is registered
        if self.link.broker_epoch >= 0:
            self.report_offline_dirs()

    def report_offline_dirs(self) -> None:
        """Tell the controller (through the metadata log) which log directories of this
        incarnation failed and which replicas they hold, until it is applied; the active
        controller then moves those replicas' leadership and ISR membership to other brokers
        (Kafka's broker reports offline directories to the controller the same way)."""
        if self.logs.offline_dirs and not self._stopped:
            spawn("report-offline-log-dirs", self._report_offline_dirs, restartable=True)

    async def _report_before_unfencing(self) -> None:
        """Directories that failed while loading are reported before the first heartbeat, so
        the controller never unfences this broker with replicas it believes online there (the
        registration of a Kafka broker carries its online directories for the same reason).
        Bounded: what does not commit in time goes on in the background."""
        if self.logs.offline_dirs:
            try:
                await asyncio.wait_for(self._report_offline_dirs(), REPORT_BEFORE_UNFENCE_S)
            except TimeoutError:
                log.warning("offline log directories not yet reported after %.0fs; retrying in "
                            "the background", REPORT_BEFORE_UNFENCE_S)

    async def _report_offline_dirs(self) -> None:
        delay = 0.1
        while not self._stopped:
            incarnation = self.link.incarnation_id
            dirs = tuple(sorted((str(d), r) for d, r in self.logs.offline_dirs.items()))
            offline = set(self.logs.offline_dirs)
            image, me_id = self.link.image, self.config.broker_id
            hosted = {}
            for (topic, index), plog in self.logs.partitions().items():
                t = image.topics.get(topic)
                state = t.partitions.get(index) if t is not None else None
                if plog.directory.parent in offline and state and me_id in state.replicas:
                    hosted[(topic, index)] = state
            parts = tuple(sorted(hosted))
            me = image.brokers.get(me_id)
            if (me is not None and me.incarnation_id == incarnation
                    and set(me.offline_log_dirs) >= {d for d, _ in dirs}
                    and all(me_id in s.offline_replicas for s in hosted.values())):
                return  # the metadata says it all
            try:
                await self.link.propose(LogDirsOffline(self.config.broker_id, incarnation,
                                                       dirs, parts))
                log.warning("reported offline log directories %s (%d replicas) to the "
                            "controller", ", ".join(d for d, _ in dirs), len(parts))
            except StromError as err:
                log.info("reporting offline log directories failed (%s); retrying", err)
                await asyncio.sleep(delay)
                delay = min(2 * delay, 2.0)

    def load(self) -> None:
        """Recover every log on disk (blocking; run it in a worker thread)."""
        started = time.monotonic()
        log.info("loading logs from %s", ", ".join(str(d) for d in self.config.log_dirs))
        found = self.logs.load_all(defer=True)
        log.info("loaded %d partition logs in %.2fs", len(found), time.monotonic() - started)

    async def _load_deferred_logs(self) -> None:
        """Read the logs whose open was deferred (clean at start) in short slices while the
        broker serves: a log used first is read then, the rest here, so retention, rolls and
        the tail check of every log run soon after a start without delaying it."""
        pending = self.logs.deferred()
        if not pending:
            return
        started, total = time.monotonic(), len(pending)
        pending.reverse()  # taken from the end: in the order they were found
        while pending:
            await asyncio.sleep(DEFERRED_PAUSE_S)
            self.logs.load_deferred(DEFERRED_SLICE_S, pending)
        log.info("read the %d partition logs deferred at start in %.1fs", total,
                 time.monotonic() - started)

    async def start(self) -> None:
        """Join the cluster: replay the metadata log, register, catch up, publish, get unfenced."""
        self.logs.on_unborn = self._files_wanted.set
        self._files_wanted.set()  # any log created before
        self._file_creator = spawn(
            "segment-file-creator",
            lambda: create_ahead(self._files_wanted, self.logs.create_segment_files,
                                 lambda: self.publisher.busy),
            restartable=True)
        await self.replicas.start()
        self.link.before_heartbeats = self._report_before_unfencing
        await self.link.start()
        if self.link.fresh and self.link.solo:
            await self._adopt_orphans()
        self.publisher.on_progress = self.link.notify_published
        self.link.published_offset = lambda: self.publisher.offset
        self.publisher.ready(self.link.image)
        self.link.on_registered = self.report_offline_dirs
        self.report_offline_dirs()
        await self.groups.start()
        if not await self.link.wait_unfenced(UNFENCE_TIMEOUT_S):
            log.warning("broker %d is still fenced after %.0fs; is the active controller "
                        "reachable?", self.config.broker_id, UNFENCE_TIMEOUT_S)
        if not self._stopped:
            self._loader = spawn("deferred-log-loader", self._load_deferred_logs,
                                 restartable=False)
        self.metrics.info.info({"broker_id": str(self.config.broker_id),
                                "cluster_id": self.metadata.cluster_id, "version": _version()})

    async def _adopt_orphans(self) -> None:
        """A single broker whose metadata log is new but whose log dirs hold partitions (e.g. the
        metadata log was removed): keep the data as topics with default configs."""
        counts: dict[str, int] = {}
        for topic, partition in self.logs.partitions():
            if topic not in self.link.image.topics:
                counts[topic] = max(counts.get(topic, 0), partition + 1)
        me = self.config.broker_id
        commands: list[Command] = []
        for topic, partitions in sorted(counts.items()):
            log.warning("no cluster metadata found: adopting topic %r (%d partitions) from the "
                        "logs on disk, with default configs", topic, partitions)
            only_here = tuple((me,) for _ in range(partitions))
            commands.append(CreateTopic(topic, str(uuid.uuid4()), only_here))
        for command in commands:
            await self.link.propose(command)
        for (topic, _), plog in self.logs.partitions().items():
            if topic in counts:
                plog.write_topic_id(self.link.image.topics[topic].topic_id)

    async def leave(self) -> None:
        """Controlled shutdown while still serving: the controller moves leadership away."""
        await self.link.controlled_shutdown(self.config.shutdown_timeout_s / 2)

    async def stop(self) -> None:
        """Stop replication and the Raft member, close the logs (after the gRPC server stopped)."""
        if self._stopped:
            return
        self._stopped = True
        await cancel_and_wait([t for t in (self._loader, self._file_creator) if t is not None])
        self.logs.on_unborn = None
        await self.groups.stop()
        await self.publisher.stop()
        self.replicas.waiters.close()
        await self.replicas.stop()
        await self.isr_changes.stop()
        await self.link.stop()
        self.logs.close()


def _replication_settings(config: BrokerConfig) -> ReplicationSettings:
    return ReplicationSettings(
        broker_id=config.broker_id,
        replica_lag_time_max_ms=int(config.get("replica.lag.time.max.ms")),
        fetch_wait_max_ms=int(config.get("replica.fetch.wait.max.ms")),
        fetch_max_bytes=int(config.get("replica.fetch.max.bytes")),
        fetch_response_max_bytes=int(config.get("replica.fetch.response.max.bytes")),
    )


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("strom")
    except Exception:
        return "unknown"
