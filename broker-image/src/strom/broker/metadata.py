"""What a broker's request handlers read about the cluster: a view over the metadata image.

Why it exists: handlers need brokers, topics and partition states in the broker's own terms
(``TopicRecord``, ``PartitionState``, ``BrokerInfo``) without knowing about Raft. The
:class:`ClusterMetadata` view reads the :class:`~strom.controller.metadata.MetadataImage` this
broker has applied (every broker has one: it is a member of the metadata quorum), so answers are
local and cheap; changes go through :meth:`ClusterLink.propose` in the topic manager and admin
handlers, never through this view.

As in KRaft, the Metadata response lists only unfenced brokers: a fenced broker is down or still
catching up and must not be routed to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from strom.broker.listeners import GRPC_LISTENER
from strom.controller.metadata import Endpoint, MetadataImage, TopicState


@dataclass(frozen=True)
class BrokerInfo:
    broker_id: int
    host: str
    port: int
    rack: str = ""
    fenced: bool = False
    offline_log_dirs: tuple[str, ...] = ()
    """Its log directories that failed I/O, as it reported them ("<dir>: <reason>")."""


@dataclass(frozen=True)
class TopicRecord:
    name: str
    topic_id: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, str] = field(default_factory=dict)

    @property
    def internal(self) -> bool:
        return self.name.startswith("__")


@dataclass(frozen=True)
class PartitionState:
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...] = ()
    """Replicas in log directories their brokers reported offline."""


class ImageSource(Protocol):
    @property
    def image(self) -> MetadataImage: ...

    @property
    def controller_id(self) -> int: ...


class ClusterMetadata:
    """Read-only answers from the image ``source`` currently holds (it changes as entries apply)."""

    def __init__(self, source: ImageSource) -> None:
        self._source = source
        self._records: dict[str, TopicRecord] = {}
        self._records_at = -1
        """The image offset ``_records`` were built at: the image only changes by applying
        entries, so one offset check per lookup keeps the produce path free of rebuilding."""
        self._answers: dict[object, object] = {}
        self._answers_at = -1

    def answers(self) -> dict[object, object]:
        """A cache for answers built from the image (e.g. a topic's Metadata answer), emptied
        whenever the image moves to another offset."""
        offset = self.image.offset
        if offset != self._answers_at:
            self._answers.clear()
            self._answers_at = offset
        return self._answers

    @property
    def image(self) -> MetadataImage:
        return self._source.image

    @property
    def cluster_id(self) -> str:
        return self.image.cluster_id

    @property
    def controller_id(self) -> int:
        return self._source.controller_id

    @property
    def offset(self) -> int:
        return self.image.offset

    def brokers(self, listener: str = GRPC_LISTENER) -> Sequence[BrokerInfo]:
        """Every registered broker, fenced ones included, by id, with its endpoint on
        ``listener`` (gRPC by default; host "" and port 0 when it has no such listener)."""
        out = []
        for b in sorted(self.image.brokers.values(), key=lambda b: b.broker_id):
            endpoint = _endpoint(b.endpoints, listener)
            out.append(BrokerInfo(b.broker_id, endpoint.host if endpoint else "",
                                  endpoint.port if endpoint else 0, b.rack or "", b.fenced,
                                  tuple(f"{d}: {r}" for d, r in
                                        sorted(b.offline_log_dirs.items()))))
        return out

    def live_brokers(self, listener: str = GRPC_LISTENER) -> Sequence[BrokerInfo]:
        return [b for b in self.brokers(listener) if not b.fenced]

    def broker_address(self, broker_id: int) -> str | None:
        b = self.image.brokers.get(broker_id)
        if b is None or not b.endpoints:
            return None
        return f"{b.endpoints[0].host}:{b.endpoints[0].port}"

    def topics(self) -> Mapping[str, TopicRecord]:
        return {name: self._record(t) for name, t in self.image.topics.items()}

    def topic(self, name: str) -> TopicRecord | None:
        t = self.image.topics.get(name)
        return None if t is None else self._record(t)

    def _record(self, t: TopicState) -> TopicRecord:
        offset = self.image.offset
        if offset != self._records_at:
            self._records.clear()
            self._records_at = offset
        record = self._records.get(t.name)
        if record is None:
            first = t.partitions.get(0)
            rf = len(first.replicas) - len(first.adding_replicas) if first is not None else 0
            record = TopicRecord(t.name, t.topic_id, len(t.partitions), rf, dict(t.configs))
            self._records[t.name] = record
        return record

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        t = self.image.topics.get(topic)
        if t is None:
            return None
        p = t.partitions.get(partition)
        if p is None:
            return None
        return PartitionState(p.leader, p.leader_epoch, tuple(p.replicas), tuple(p.isr),
                              tuple(p.offline_replicas))


def _endpoint(endpoints: Sequence[Endpoint], listener: str) -> Endpoint | None:
    """The endpoint named ``listener``; the first one stands for gRPC (it always is)."""
    for e in endpoints:
        if e.name == listener:
            return e
    if listener == GRPC_LISTENER and endpoints:
        return endpoints[0]
    return None
