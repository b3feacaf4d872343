"""The plain value types of the client API: what callers pass in and get back.

They live apart from the producer, consumer and admin code so that callers (the CLI, the
benchmarks, the Spark connector) can build and compare them without opening a connection, and so
that the wire messages of ``strom.protocol.v1`` never leak into user code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

#: ``Consumer.seek(tp, OFFSET_BEGINNING)`` moves to the log start offset (Kafka's -2).
OFFSET_BEGINNING = -2
#: ``Consumer.seek(tp, OFFSET_END)`` moves to the log end offset (Kafka's -1).
OFFSET_END = -1


class TopicPartition(NamedTuple):
    """One partition of one topic; hashable, usable as a dict key."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where an acknowledged record landed.

    ``offset`` is -1 for ``acks=0`` (the producer does not wait for the broker's answer), as in
    Kafka. ``timestamp`` is the create time given or stamped by the producer, or the broker's
    log-append time when the topic uses ``message.timestamp.type=LogAppendTime``.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    serialized_key_size: int
    serialized_value_size: int

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create; -1 = the broker default (num.partitions, default.replication.factor)."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    log_start_offset: int = -1
    log_end_offset: int = -1
    high_watermark: int = -1
    size_bytes: int = -1


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    topic_id: str
    internal: bool
    partitions: list[PartitionDescription]
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str
    source: str = ""
    is_default: bool = False
    read_only: bool = False
    sensitive: bool = False
    documentation: str = ""


@dataclass(frozen=True, slots=True)
class BrokerDescription:
    broker_id: int
    host: str
    port: int
    rack: str | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"




@dataclass(frozen=True, slots=True)
class ClusterDescription:
    """What DescribeCluster says; the clustering fields default so old brokers still parse.

    ``brokers`` lists every registered broker, fenced ones included (see ``fenced_broker_ids``);
    ``metadata_offset`` is the answering broker's (``answered_by``) applied metadata offset, -1
    when the broker does not report it.
    """

    cluster_id: str
    controller_id: int
    brokers: list[BrokerDescription]
    fenced_broker_ids: list[int] = field(default_factory=list)
    voters: list[int] = field(default_factory=list)
    metadata_offset: int = -1
    answered_by: int = -1

    @property
    def live_brokers(self) -> list[BrokerDescription]:
        fenced = set(self.fenced_broker_ids)
        return [b for b in self.brokers if b.broker_id not in fenced]


@dataclass(frozen=True, slots=True)
class PartitionReassignment:
    """One reassignment in flight (KIP-455), merged from the answers of every broker.

    ``progress`` ({broker id: log end offset}, -1 unknown) and ``leader_log_end_offset`` come only
    from the partition's leader, the one broker that knows its followers' positions; they are
    empty / -1 when the leader could not be asked.
    """

    topic: str
    partition: int
    replicas: list[int]
    adding: list[int]
    removing: list[int]
    isr: list[int]
    leader: int
    leader_log_end_offset: int = -1
    progress: dict[int, int] = field(default_factory=dict)

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def offsets_behind(self) -> dict[int, int]:
        """Offsets each adding replica still lacks (messages, not bytes); only where known."""
        if self.leader_log_end_offset < 0:
            return {}
        return {b: max(0, self.leader_log_end_offset - self.progress[b])
                for b in self.adding if self.progress.get(b, -1) >= 0}

    @property
    def percent_done(self) -> float | None:
        """How far the adding replicas have copied the leader's log, 0..100; None if unknown.

        An adding replica already in the ISR counts as done whatever its offset says; the slowest
        adding replica decides (the move completes only when all have caught up).
        """
        if not self.adding:
            return 100.0
        isr = set(self.isr)
        fractions: list[float] = []
        for broker in self.adding:
            if broker in isr:
                fractions.append(1.0)
                continue
            leo = self.progress.get(broker, -1)
            if leo < 0 or self.leader_log_end_offset < 0:
                return None
            if self.leader_log_end_offset == 0:
                fractions.append(1.0)
            else:
                fractions.append(min(1.0, leo / self.leader_log_end_offset))
        return round(100.0 * min(fractions), 1)
