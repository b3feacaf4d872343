"""The objects one broker is made of, wired together; handlers receive this and nothing else.

``BrokerCore`` holds the configuration, the metadata store, the log manager, the replica manager
(partition logs on the request path), the topic manager (topic lifecycle) and the metrics. It is
built without touching the network, so in-process tests can drive the RPC handlers directly.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from strom.broker.config import BrokerConfig
from strom.broker.metadata import BrokerInfo, LocalMetadataStore, MetadataStore
from strom.broker.metrics import BrokerMetrics
from strom.broker.replicas import ReplicaManager
from strom.broker.topics import TopicManager
from strom.storage.manager import LogManager

log = logging.getLogger(__name__)


@dataclass
class BrokerCore:
    config: BrokerConfig
    metadata: MetadataStore
    logs: LogManager
    replicas: ReplicaManager
    topics: TopicManager
    metrics: BrokerMetrics

    @classmethod
    def create(cls, config: BrokerConfig, *, port: int | None = None) -> BrokerCore:
        """Open the metadata store and the (not yet loaded) log manager."""
        me = BrokerInfo(config.broker_id, config.advertised_host,
                        config.port if port is None else port, config.rack)
        metadata = LocalMetadataStore(config.log_dirs[0], me, config.cluster_id)
        logs = LogManager(list(config.log_dirs), config.topic_defaults)
        replicas = ReplicaManager(config.broker_id, logs, metadata)
        topics = TopicManager(config, metadata, logs, replicas)
        metrics = BrokerMetrics(config.broker_id, metadata.cluster_id, _version())
        metrics.watch_logs(replicas.logs)
        return cls(config, metadata, logs, replicas, topics, metrics)

    def load(self) -> None:
        """Recover every log on disk and make them match the metadata (blocking)."""
        started = time.monotonic()
        log.info("loading logs from %s", ", ".join(str(d) for d in self.config.log_dirs))
        self.logs.load_all(self.topics.topic_log_configs())
        self.topics.reconcile()
        log.info("loaded %d partitions of %d topics in %.2fs", len(self.replicas),
                 len(self.metadata.topics()), time.monotonic() - started)

    def close(self) -> None:
        """Flush and close every log (writes the clean-shutdown markers)."""
        self.replicas.waiters.close()
        self.logs.close()


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("strom")
    except Exception:
        return "unknown"
