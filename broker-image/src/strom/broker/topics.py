"""Topic lifecycle: create, delete, grow, reconfigure - validated here, decided by the metadata log.

:class:`TopicManager` validates like Kafka (topic names ``[a-zA-Z0-9._-]{1,249}``, not ``.`` or
``..``, no collision between names that differ only in ``.`` vs ``_``; partitions >= 1;
replication factor <= live brokers; at most ``max.partitions.per.request`` partitions added
by one request; configs through the storage layer's Kafka-named parser),
places replicas rack-aware over the live brokers (``assign_replicas``)
and proposes the change to the controller quorum. It returns once the change is applied on this
broker; logs are created and deleted by the metadata publisher on EVERY broker that hosts the
partitions, so a crash anywhere in between is repaired by replaying the metadata log.

Validation runs against this broker's image; the metadata log re-checks at apply time (a topic
created twice concurrently fails once with TOPIC_ALREADY_EXISTS), so a race never corrupts state.
Kafka validates on the active controller (KIP-590 forwarding); we validate on the receiving broker
and let the log arbitrate, which needs no forwarding RPC.

Every method raises :class:`~strom.protocol.errors.StromError` with a message naming the field and
the fix. Not supported: replica assignments chosen by the caller at creation (use a reassignment),
shrinking partitions (Kafka cannot either).
"""

from __future__ import annotations

import logging
import random
import re
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace

from strom.broker.config import BrokerConfig
from strom.broker.metadata import ClusterMetadata, TopicRecord
from strom.controller.metadata import (
    AlterConfigs,
    Command,
    CreatePartitions,
    CreateTopic,
    DeleteTopic,
)
from strom.controller.placement import assign_replicas
from strom.groups.offsets import OFFSETS_TOPIC
from strom.protocol.errors import ErrorCode, StromError
from strom.storage.config import (
    TOPIC_CONFIG_DEFS,
    LogConfig,
    parse_topic_configs,
    unknown_topic_config_message,
)

log = logging.getLogger(__name__)

Propose = Callable[[Command], Awaitable[int]]

MAX_TOPIC_NAME = 249
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC})
"""Kafka's internal topics: only the broker writes them (with acks=all), clients may not."""
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


def effective_log_config(name: str, replication_factor: int, config: LogConfig) -> LogConfig:
    """``config`` as the broker applies it to topic ``name`` of ``replication_factor``.

    An internal topic's ``min.insync.replicas`` is capped at its replication factor: the
    cluster-wide default (say 2) must not make the broker's own writes impossible when the topic
    was created with fewer replicas (``offsets.topic.replication.factor`` is capped at the live
    brokers, so a one-broker cluster grown to five still has ``__consumer_offsets`` at RF 1
    until a reassignment raises it). Other topics keep the configured value, as in Kafka: an
    ``acks=all`` write to them is refused with NOT_ENOUGH_REPLICAS, which tells the user.
    """
    if name not in INTERNAL_TOPICS or replication_factor <= 0:
        return config
    if config.min_insync_replicas <= replication_factor:
        return config
    return replace(config, min_insync_replicas=replication_factor)


def _collision_key(name: str) -> str:
    return name.replace(".", "_")


@dataclass(frozen=True)
class TopicPlan:
    """A validated CreateTopics entry (what would be created, and where)."""

    name: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, str]
    log_config: LogConfig
    assignments: tuple[tuple[int, ...], ...]


class TopicManager:
    def __init__(self, config: BrokerConfig, metadata: ClusterMetadata, propose: Propose) -> None:
        self._config = config
        self._metadata = metadata
        self._propose = propose
        self._log_configs: dict[str, tuple[TopicRecord, LogConfig, LogConfig]] = {}

    # -- reads --------------------------------------------------------------------------------

    def topic(self, name: str) -> TopicRecord:
        record = self._metadata.topic(name)
        if record is None:
            raise StromError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"topic {name!r} does not exist")
        return record

    def log_config(self, name: str) -> LogConfig:
        """The effective LogConfig of a topic (broker defaults + topic overrides, then
        :func:`effective_log_config`).

        The one cache of it in the broker (produce checks, the publisher's logs, the group
        coordinator): parsed again only when the topic's configs change."""
        record = self.topic(name)
        cached = self._log_configs.get(name)
        if cached is None or cached[0] is not record:
            if cached is None or cached[0].configs != record.configs:
                configured = parse_topic_configs(record.configs, base=self._config.topic_defaults)
            else:
                configured = cached[1]
            effective = effective_log_config(name, record.replication_factor, configured)
            cached = self._log_configs[name] = (record, configured, effective)
        return cached[2]

    def configured_log_config(self, name: str) -> LogConfig:
        """The LogConfig as configured (what DescribeConfigs shows), before any cap."""
        self.log_config(name)
        return self._log_configs[name][1]

    def _racks(self) -> dict[int, str | None]:
        return {b.broker_id: b.rack or None for b in self._metadata.live_brokers()}

    # -- create -------------------------------------------------------------------------------

    def plan_topic(self, name: str, num_partitions: int, replication_factor: int,
                   configs: Mapping[str, str]) -> TopicPlan:
        """Validate one CreateTopics entry and place its replicas, without changing anything."""
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
        self._check_partition_limit(name, partitions, f"num_partitions={partitions}")
        rf = (self._config.default_replication_factor if replication_factor == -1
              else replication_factor)
        if rf < 1:
            raise StromError(ErrorCode.INVALID_REPLICATION_FACTOR,
                             f"replication_factor={replication_factor} is invalid; use a count "
                             f">= 1, or -1 for the broker default (default.replication.factor="
                             f"{self._config.default_replication_factor})")
        racks = self._racks()
        if rf > len(racks):
            raise StromError(ErrorCode.INVALID_REPLICATION_FACTOR,
                             f"replication factor {rf} is larger than the {len(racks)} live "
                             f"brokers")
        log_config = parse_topic_configs(configs, base=self._config.topic_defaults)
        layout = assign_replicas(partitions, rf, racks, start_index=random.randrange(len(racks)))
        return TopicPlan(name, partitions, rf, dict(configs), log_config,
                         tuple(tuple(r) for r in layout))

    def _check_partition_limit(self, name: str, adding: int, asked: str) -> None:
        """INVALID_PARTITIONS when one topic asks for more than one request may add: bounded
        before any placement, so a count of 2**31-1 costs nothing."""
        limit = self._config.max_partitions_per_request
        if adding > limit:
            raise StromError(ErrorCode.INVALID_PARTITIONS,
                             f"topic {name!r}: {asked} would add {adding} partitions; one request "
                             f"may add at most {limit} (max.partitions.per.request): ask for "
                             f"fewer, and grow the topic with further CreatePartitions requests")

    def check_request_total(self, total: int) -> None:
        """POLICY_VIOLATION when a CreateTopics request adds more partitions in all than
        ``max.partitions.per.request`` (Kafka: "excessively large batch operation")."""
        limit = self._config.max_partitions_per_request
        if total > limit:
            raise StromError(ErrorCode.POLICY_VIOLATION,
                             f"this request would create {total} partitions in all; one request "
                             f"may create at most {limit} (max.partitions.per.request): split "
                             f"the topics over several requests")

    async def create(self, plan: TopicPlan) -> TopicRecord:
        await self._propose(CreateTopic(plan.name, str(uuid.uuid4()), plan.assignments,
                                        tuple(sorted(plan.configs.items()))))
        log.info("created topic %s (%d partitions, replication factor %d%s)", plan.name,
                 plan.partitions, plan.replication_factor,
                 f", configs {dict(plan.configs)}" if plan.configs else "")
        return self.topic(plan.name)

    async def create_topic(self, name: str, partitions: int = -1, replication_factor: int = -1,
                           configs: Mapping[str, str] | None = None) -> TopicRecord:
        """Validate and create in one step (for tools and tests)."""
        return await self.create(self.plan_topic(name, partitions, replication_factor,
                                                 configs or {}))

    async def auto_create(self, name: str) -> TopicRecord | None:
        """Create ``name`` with broker defaults if auto.create.topics.enable; else None."""
        if not self._config.auto_create_topics:
            return None
        existing = self._metadata.topic(name)
        if existing is not None:
            return existing
        try:
            return await self.create(self.plan_topic(name, -1, -1, {}))
        except StromError as err:
            if err.code != ErrorCode.TOPIC_ALREADY_EXISTS:  # lost a race: fine
                raise
            return self._metadata.topic(name)

    # -- delete -------------------------------------------------------------------------------

    async def delete(self, name: str) -> None:
        self.topic(name)
        await self._propose(DeleteTopic(name))
        self._log_configs.pop(name, None)
        log.info("deleted topic %s", name)

    # -- grow ---------------------------------------------------------------------------------

    def check_partitions(self, name: str, new_total: int) -> tuple[tuple[int, ...], ...]:
        """Validate a CreatePartitions; the replica lists of the new partitions."""
        record = self.topic(name)
        if new_total <= record.partitions:
            raise StromError(ErrorCode.INVALID_PARTITIONS,
                             f"topic {name!r} has {record.partitions} partitions and "
                             f"new_total_count={new_total}; partitions can only grow: ask for "
                             f"more than {record.partitions}")
        self._check_partition_limit(name, new_total - record.partitions,
                                    f"new_total_count={new_total}")
        racks = self._racks()
        if record.replication_factor > len(racks):
            raise StromError(ErrorCode.INVALID_REPLICATION_FACTOR,
                             f"topic {name!r} has replication factor "
                             f"{record.replication_factor} but only {len(racks)} brokers are live")
        layout = assign_replicas(new_total - record.partitions, record.replication_factor, racks,
                                 start_index=random.randrange(len(racks)),
                                 first_partition=record.partitions)
        return tuple(tuple(r) for r in layout)

    async def grow(self, name: str, new_total: int) -> None:
        old = self.topic(name).partitions
        assignments = self.check_partitions(name, new_total)
        await self._propose(CreatePartitions(name, assignments))
        log.info("topic %s now has %d partitions (was %d)", name, new_total, old)

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
                             f"in delete: {unknown_topic_config_message(unknown[0])}")
        overrides = {k: v for k, v in record.configs.items() if k not in delete}
        overrides.update(set_)
        return overrides, parse_topic_configs(overrides, base=self._config.topic_defaults)

    async def alter_configs(self, name: str, set_: Mapping[str, str], delete: list[str]) -> None:
        overrides, _ = self.plan_configs(name, set_, delete)
        await self._propose(AlterConfigs("topic", name, tuple(sorted(set_.items())),
                                         tuple(sorted(delete))))
        log.info("topic %s configs now %s", name, overrides)
