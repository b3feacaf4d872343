"""Consumer lag: how far a group's committed position trails the log end, per partition.

Lag drives alerting, the admin ``group describe`` table, the per-group metrics and the operator's
lag-based autoscaling, so all of them must agree on one definition. Kafka's: log end offset minus
committed offset, never negative, and *unknown* (None, not 0) where nothing is committed -- a
partition nobody has committed is not "caught up", and treating it as 0 would hide a stuck group.
Totals add the known lags and say how many partitions were unknown.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    log_end_offset: int
    committed_offset: int | None

    @property
    def lag(self) -> int | None:
        if self.committed_offset is None:
            return None
        return max(self.log_end_offset - self.committed_offset, 0)


@dataclass(frozen=True)
class GroupLag:
    partitions: tuple[PartitionLag, ...]

    @property
    def total(self) -> int:
        """Sum of the known lags."""
        return sum(p.lag for p in self.partitions if p.lag is not None)

    @property
    def unknown_partitions(self) -> int:
        return sum(1 for p in self.partitions if p.lag is None)

    def by_topic(self) -> dict[str, int]:
        """Known lag summed per topic."""
        totals: dict[str, int] = {}
        for p in self.partitions:
            totals[p.topic] = totals.get(p.topic, 0) + (p.lag or 0)
        return totals


def partition_lag(log_end_offset: int, committed_offset: int | None) -> int | None:
    return PartitionLag("", 0, log_end_offset, committed_offset).lag


def group_lag(
    log_end_offsets: Mapping[TopicPartition, int],
    committed: Mapping[TopicPartition, int | None],
) -> GroupLag:
    """Lag for every partition with a known log end (sorted by topic, partition)."""
    return GroupLag(
        tuple(
            PartitionLag(topic, partition, end, committed.get((topic, partition)))
            for (topic, partition), end in sorted(log_end_offsets.items())
        )
    )
