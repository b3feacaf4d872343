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
    cluster_id: str
    controller_id: int
    brokers: list[BrokerDescription]
