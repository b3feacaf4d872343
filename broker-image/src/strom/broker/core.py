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
from dataclasses import dataclass
from pathlib import Path

from strom.broker.cluster import ClusterLink
from strom.broker.config import BrokerConfig
from strom.broker.coordinator import GroupCoordinator, GroupSettings
from strom.broker.metadata import ClusterMetadata
from strom.broker.metrics import BrokerMetrics
from strom.broker.producer_ids import ProducerIdManager
from strom.broker.publisher import MetadataPublisher, write_topic_id
from strom.broker.topics import TopicManager
from strom.controller.metadata import (
    ChangePartition,
    Command,
    CreateTopic,
    Endpoint,
    MetadataImage,
)
from strom.protocol.errors import StromError
from strom.replication.manager import ReplicaManager
from strom.replication.settings import ReplicationSettings
from strom.storage.manager import LogManager
from strom.supervision import spawn

log = logging.getLogger(__name__)

UNFENCE_TIMEOUT_S = 30.0


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
    _stopped: bool = False

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
                          producer_id_expiration_ms=int(config.get("producer.id.expiration.ms")))

        async def alter_isr(topic: str, partition: int, isr: tuple[int, ...],
                            expected_epoch: int) -> None:
            await link.propose(ChangePartition(topic, partition, isr=isr,
                                               expected_partition_epoch=expected_epoch))

        replicas = ReplicaManager(_replication_settings(config), logs, alter_isr,
                                  metadata.broker_address)
        metrics = BrokerMetrics(config.broker_id, config.cluster_id, _version())
        topics = TopicManager(config, metadata, link.propose)
        publisher = MetadataPublisher(config.broker_id, logs, replicas, topics.log_config,
                                      on_topic_deleted=metrics.forget_topic)
        producer_ids = ProducerIdManager(
            config.broker_id, link.propose,
            lambda: link.image.producer_id_blocks.get(config.broker_id))
        metrics.watch_logs(replicas.logs)
        groups = GroupCoordinator(GroupSettings.from_config(config), config.broker_id, metadata,
                                  replicas, topics, metrics)
        publisher.on_leadership = groups.on_leadership
        core = cls(config, link, metadata, logs, replicas, publisher, topics, producer_ids,
                   metrics, groups)
        holder.append(core)
        for directory in logs.log_dirs:
            metrics.log_dir_offline.labels(str(directory)).set(0)
        logs.on_dir_offline = core._dir_offline
        return core

    # -- log directory failure ----------------------------------------------------------------

    def _dir_offline(self, directory: Path, reason: str) -> None:
        """A log directory failed I/O (possibly while loading, in a worker thread): count it,
        and once the broker runs, move away the leadership of its partitions."""
        self.metrics.log_dir_offline.labels(str(directory)).set(1)
        self.metrics.offline_log_dirs.set(len(self.logs.offline_dirs))
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # loading: start() moves leadership once the broker is in the cluster
        if self.link.broker_epoch >= 0:
            spawn(f"log-dir-offline-{directory.name}",
                  lambda: self.move_leadership_off(directory), restartable=True)

    async def move_leadership_off(self, directory: Path) -> None:
        """Hand the leadership of every partition in ``directory`` to another in-sync replica,
        and leave the ISR of the others (Kafka's ReplicaManager.handleLogDirFailure, decided
        here for this broker's own partitions). A partition with no other in-sync replica
        keeps this broker as leader: it serves reads and answers writes KAFKA_STORAGE_ERROR."""
        me = self.config.broker_id
        live = {b.broker_id for b in self.metadata.live_brokers()}
        for (topic, partition), plog in self.logs.partitions().items():
            if plog.directory.parent != directory:
                continue
            topic_state = self.link.image.topics.get(topic)
            state = topic_state.partitions.get(partition) if topic_state else None
            if state is None or me not in state.isr:
                continue
            others = [r for r in state.isr if r != me and r in live]
            if not others:
                continue
            was_leader = state.leader == me
            leader = others[0] if was_leader else state.leader
            try:
                await self.link.propose(ChangePartition(
                    topic, partition, leader=leader, isr=tuple(r for r in state.isr if r != me),
                    expected_partition_epoch=state.partition_epoch))
                log.warning("%s-%d: left the ISR (log directory %s is offline)%s", topic,
                            partition, directory,
                            f"; broker {leader} leads now" if was_leader else "")
            except StromError as err:  # changed meanwhile: the next metadata decides
                log.warning("%s-%d: could not move away from offline %s: %s", topic, partition,
                            directory, err)

    def load(self) -> None:
        """Recover every log on disk (blocking; run it in a worker thread)."""
        started = time.monotonic()
        log.info("loading logs from %s", ", ".join(str(d) for d in self.config.log_dirs))
        found = self.logs.load_all()
        log.info("loaded %d partition logs in %.2fs", len(found), time.monotonic() - started)

    async def start(self) -> None:
        """Join the cluster: replay the metadata log, register, catch up, publish, get unfenced."""
        await self.replicas.start()
        await self.link.start()
        if self.link.fresh and self.link.solo:
            await self._adopt_orphans()
        self.publisher.ready(self.link.image)
        for directory in list(self.logs.offline_dirs):
            spawn(f"log-dir-offline-{directory.name}",
                  lambda d=directory: self.move_leadership_off(d), restartable=True)  # type: ignore[misc]
        await self.groups.start()
        if not await self.link.wait_unfenced(UNFENCE_TIMEOUT_S):
            log.warning("broker %d is still fenced after %.0fs; is the active controller "
                        "reachable?", self.config.broker_id, UNFENCE_TIMEOUT_S)
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
                write_topic_id(plog.directory, self.link.image.topics[topic].topic_id)

    async def leave(self) -> None:
        """Controlled shutdown while still serving: the controller moves leadership away."""
        await self.link.controlled_shutdown(self.config.shutdown_timeout_s / 2)

    async def stop(self) -> None:
        """Stop replication and the Raft member, close the logs (after the gRPC server stopped)."""
        if self._stopped:
            return
        self._stopped = True
        await self.groups.stop()
        self.replicas.waiters.close()
        await self.replicas.stop()
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
