"""Topic lifecycle: create, delete, grow, reconfigure; the one owner of topic-level state.

:class:`TopicManager` validates like Kafka (topic names ``[a-zA-Z0-9._-]{1,249}``, not ``.`` or
``..``, no collision between names that differ only in ``.`` vs ``_``; partitions >= 1;
replication factor <= live brokers; configs through the storage layer's Kafka-named parser),
records the change in the :class:`~strom.broker.metadata.MetadataStore` first and then creates or
deletes the logs, so that a crash in between is repaired at the next start by
:meth:`TopicManager.reconcile` (missing logs are created, logs of deleted topics removed).

Every method raises :class:`~strom.protocol.errors.StromError` with a message naming the field and
the fix; the admin handlers turn it into a per-topic result. Not supported: replica assignments
chosen by the caller, partition reassignment, shrinking partitions (Kafka cannot either).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass

from strom.broker.config import BrokerConfig
from strom.broker.metadata import MetadataStore, TopicRecord
from strom.broker.replicas import ReplicaManager
from strom.protocol.errors import ErrorCode, StromError
from strom.storage.config import TOPIC_CONFIG_DEFS, LogConfig, parse_topic_configs
from strom.storage.manager import LogManager

log = logging.getLogger(__name__)

MAX_TOPIC_NAME = 249
_LEGAL_NAME = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(name: str) -> None:
    """Kafka's topic-name rules; StromError(INVALID_TOPIC_EXCEPTION) naming the problem."""
    if not name:
        raise StromError(ErrorCode.INVALID_TOPIC_EXCEPTION, "topic name is empty")
    if name in (".", ".."):
        raise StromError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                         f"topic name {name!r} is not allowed ('.' and '..' are reserved)")
    if len(name) > MAX_TOPIC_NAME:
        raise StromError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                         f"topic name is {len(name)} characters long; the limit is "
                         f"{MAX_TOPIC_NAME}")
    if not _LEGAL_NAME.fullmatch(name):
        bad = sorted({c for c in name if not _LEGAL_NAME.fullmatch(c)})
        raise StromError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                         f"topic name {name!r} contains {''.join(bad)!r}; use only ASCII "
                         f"letters, digits, '.', '_' and '-'")


def _collision_key(name: str) -> str:
    return name.replace(".", "_")


@dataclass(frozen=True)
class TopicPlan:
    """A validated CreateTopics entry (what would be created)."""

    name: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, str]
    log_config: LogConfig


class TopicManager:
    def __init__(self, config: BrokerConfig, metadata: MetadataStore, logs: LogManager,
                 replicas: ReplicaManager) -> None:
        self._config = config
        self._metadata = metadata
        self._logs = logs
        self._replicas = replicas
        self._log_configs: dict[str, LogConfig] = {}

    # -- reads --------------------------------------------------------------------------------

    def topic(self, name: str) -> TopicRecord:
        record = self._metadata.topic(name)
        if record is None:
            raise StromError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"topic {name!r} does not exist")
        return record

    def log_config(self, name: str) -> LogConfig:
        """The effective LogConfig of a topic (broker defaults + topic overrides)."""
        cached = self._log_configs.get(name)
        if cached is None:
            record = self.topic(name)
            cached = parse_topic_configs(record.configs, base=self._config.topic_defaults)
            self._log_configs[name] = cached
        return cached

    def topic_log_configs(self) -> dict[str, LogConfig]:
        return {name: self.log_config(name) for name in self._metadata.topics()}

    # -- start-up -----------------------------------------------------------------------------

    def reconcile(self) -> None:
        """Make the loaded logs match the metadata after a (possibly unclean) restart."""
        topics = self._metadata.topics()
        found = self._logs.partitions()
        if not self._metadata.existed and found:
            self._adopt_orphans(found)
            topics = self._metadata.topics()
        for (topic, partition), plog in found.items():
            record = topics.get(topic)
            if record is None or partition >= record.partitions:
                log.warning("deleting log %s-%d: its topic was deleted", topic, partition)
                self._logs.delete_partition(topic, partition)
                continue
            plog.update_config(self.log_config(topic))
            self._replicas.adopt(plog)
        for record in topics.values():
            for partition in range(record.partitions):
                if self._replicas.get(record.name, partition) is None:
                    log.warning("creating missing log %s-%d", record.name, partition)
                    self._open_log(record.name, partition)

    def _adopt_orphans(self, found: Mapping[tuple[str, int], object]) -> None:
        """Logs without any metadata file (e.g. it was removed): keep the data as topics."""
        counts: dict[str, int] = {}
        for topic, partition in found:
            counts[topic] = max(counts.get(topic, 0), partition + 1)
        for topic, partitions in sorted(counts.items()):
            log.warning("no cluster metadata found: adopting topic %r (%d partitions) from the "
                        "logs on disk, with default configs", topic, partitions)
            self._metadata.create_topic(topic, partitions, 1, {})

    # -- create -------------------------------------------------------------------------------

    def plan_topic(self, name: str, num_partitions: int, replication_factor: int,
                   configs: Mapping[str, str]) -> TopicPlan:
        """Validate one CreateTopics entry without changing anything."""
        validate_topic_name(name)
        if self._metadata.topic(name) is not None:
            raise StromError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        for other in self._metadata.topics():
            if _collision_key(other) == _collision_key(name):
                raise StromError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                 f"topic {name!r} collides with existing topic {other!r} "
                                 f"('.' and '_' are interchangeable in metric names)")
        partitions = self._config.num_partitions if num_partitions == -1 else num_partitions
        if partitions < 1:
            raise StromError(ErrorCode.INVALID_PARTITIONS,
                             f"num_partitions={num_partitions} is invalid; use a count >= 1, or "
                             f"-1 for the broker default (num.partitions="
                             f"{self._config.num_partitions})")
        rf = (self._config.default_replication_factor if replication_factor == -1
              else replication_factor)
        if rf < 1:
            raise StromError(ErrorCode.INVALID_REPLICATION_FACTOR,
                             f"replication_factor={replication_factor} is invalid; use a count "
                             f">= 1, or -1 for the broker default (default.replication.factor="
                             f"{self._config.default_replication_factor})")
        live = len(self._metadata.live_brokers())
        if rf > live:
            raise StromError(ErrorCode.INVALID_REPLICATION_FACTOR,
                             f"replication factor {rf} is larger than the {live} live brokers")
        log_config = parse_topic_configs(configs, base=self._config.topic_defaults)
        return TopicPlan(name, partitions, rf, dict(configs), log_config)

    def create(self, plan: TopicPlan) -> TopicRecord:
        record = self._metadata.create_topic(plan.name, plan.partitions, plan.replication_factor,
                                             plan.configs)
        self._log_configs[plan.name] = plan.log_config
        for partition in range(plan.partitions):
            self._open_log(plan.name, partition)
        log.info("created topic %s (%d partitions, replication factor %d%s)", plan.name,
                 plan.partitions, plan.replication_factor,
                 f", configs {dict(plan.configs)}" if plan.configs else "")
        return record

    def create_topic(self, name: str, partitions: int = -1, replication_factor: int = -1,
                     configs: Mapping[str, str] | None = None) -> TopicRecord:
        """Validate and create in one step (for tools and tests)."""
        return self.create(self.plan_topic(name, partitions, replication_factor, configs or {}))

    def auto_create(self, name: str) -> TopicRecord | None:
        """Create ``name`` with broker defaults if auto.create.topics.enable; else None."""
        if not self._config.auto_create_topics:
            return None
        existing = self._metadata.topic(name)
        if existing is not None:
            return existing
        return self.create(self.plan_topic(name, -1, -1, {}))

    def _open_log(self, topic: str, partition: int) -> None:
        plog = self._logs.create(topic, partition, self.log_config(topic))
        self._replicas.adopt(plog)

    # -- delete -------------------------------------------------------------------------------

    def delete(self, name: str) -> None:
        record = self.topic(name)
        self._metadata.delete_topic(name)
        self._log_configs.pop(name, None)
        for partition in range(record.partitions):
            self._replicas.drop(name, partition)
            if self._logs.get(name, partition) is not None:
                self._logs.delete_partition(name, partition)
        log.info("deleted topic %s", name)

    # -- grow ---------------------------------------------------------------------------------

    def check_partitions(self, name: str, new_total: int) -> TopicRecord:
        record = self.topic(name)
        if new_total <= record.partitions:
            raise StromError(ErrorCode.INVALID_PARTITIONS,
                             f"topic {name!r} has {record.partitions} partitions and "
                             f"new_total_count={new_total}; partitions can only grow: ask for "
                             f"more than {record.partitions}")
        return record

    def grow(self, name: str, new_total: int) -> None:
        record = self.check_partitions(name, new_total)
        self._metadata.set_partitions(name, new_total)
        for partition in range(record.partitions, new_total):
            self._open_log(name, partition)
        log.info("topic %s now has %d partitions (was %d)", name, new_total, record.partitions)

    # -- configs ------------------------------------------------------------------------------

    def plan_configs(self, name: str, set_: Mapping[str, str], delete: list[str]
                     ) -> tuple[dict[str, str], LogConfig]:
        """Validate an incremental alter; returns the new overrides and effective config."""
        record = self.topic(name)
        both = sorted(set(set_) & set(delete))
        if both:
            raise StromError(ErrorCode.INVALID_REQUEST,
                             f"config {both[0]!r} is both set and deleted in one request")
        unknown = sorted(k for k in delete if k not in TOPIC_CONFIG_DEFS)
        if unknown:
            raise StromError(ErrorCode.INVALID_CONFIG,
                             f"unknown topic config {unknown[0]!r} in delete; valid keys are: "
                             f"{', '.join(sorted(TOPIC_CONFIG_DEFS))}")
        overrides = {k: v for k, v in record.configs.items() if k not in delete}
        overrides.update(set_)
        return overrides, parse_topic_configs(overrides, base=self._config.topic_defaults)

    def alter_configs(self, name: str, set_: Mapping[str, str], delete: list[str]) -> None:
        overrides, log_config = self.plan_configs(name, set_, delete)
        record = self._metadata.set_configs(name, overrides)
        self._log_configs[name] = log_config
        for partition in range(record.partitions):
            plog = self._replicas.get(name, partition)
            if plog is not None:
                plog.update_config(log_config)
        log.info("topic %s configs now %s", name, overrides)
