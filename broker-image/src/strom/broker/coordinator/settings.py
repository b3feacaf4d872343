"""The group coordinator's settings, read once from the broker configuration.

Kept apart from ``BrokerConfig`` so the coordinator runtime (and its tests) depend on a small
frozen value, not on the whole configuration machinery.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from strom.broker.config import BrokerConfig
from strom.groups.membership import GroupConfig

UNLIMITED = 2**31 - 1


@dataclass(frozen=True)
class GroupSettings:
    num_partitions: int = 10
    replication_factor: int = 3
    retention_ms: int = 10080 * 60_000
    retention_check_interval_ms: int = 600_000
    commit_timeout_ms: int = 5000
    group: GroupConfig = field(default_factory=GroupConfig)
    # How often the coordinator looks at the metadata image for partition-count changes.
    metadata_poll_ms: int = 1000

    @classmethod
    def from_config(cls, config: BrokerConfig) -> GroupSettings:
        max_size = int(config.get("group.max.size"))
        return cls(
            num_partitions=int(config.get("offsets.topic.num.partitions")),
            replication_factor=int(config.get("offsets.topic.replication.factor")),
            retention_ms=int(config.get("offsets.retention.minutes")) * 60_000,
            retention_check_interval_ms=int(config.get("offsets.retention.check.interval.ms")),
            commit_timeout_ms=int(config.get("offsets.commit.timeout.ms")),
            group=GroupConfig(
                min_session_timeout_ms=int(config.get("group.min.session.timeout.ms")),
                max_session_timeout_ms=int(config.get("group.max.session.timeout.ms")),
                initial_rebalance_delay_ms=int(config.get("group.initial.rebalance.delay.ms")),
                max_size=None if max_size >= UNLIMITED else max_size,
            ),
        )
