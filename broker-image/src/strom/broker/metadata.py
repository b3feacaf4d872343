"""Cluster metadata behind a small interface, with a single-broker implementation.

The broker asks a :class:`MetadataStore` which topics exist, how many partitions they have, who
leads each partition and which brokers are alive. :class:`LocalMetadataStore` answers for a
cluster of one broker: it leads every partition with leader epoch 0 and is the only replica and
the whole ISR. It persists topics (name, topic id, partition count, replication factor, config
overrides) and the cluster id to ``<first log dir>/__metadata.json``, atomically (write a temp
file, fsync, rename, fsync the directory), so a crash leaves the old or the new file, never half.

The Raft controller replaces this store in a later issue; nothing outside this module knows how
metadata is stored. Not supported here: more than one broker, reassignments, leader changes.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from strom.protocol.errors import ErrorCode, StromError

log = logging.getLogger(__name__)

METADATA_FILE = "__metadata.json"
_FORMAT_VERSION = 1


@dataclass(frozen=True)
class BrokerInfo:
    broker_id: int
    host: str
    port: int
    rack: str = ""


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


class MetadataStore(Protocol):
    """What the broker needs to know about the cluster; mutations are durable on return."""

    @property
    def cluster_id(self) -> str: ...

    @property
    def controller_id(self) -> int: ...

    @property
    def existed(self) -> bool:
        """False when the store was created empty at this start (no earlier metadata)."""
        ...

    def live_brokers(self) -> Sequence[BrokerInfo]: ...

    def topics(self) -> Mapping[str, TopicRecord]: ...

    def topic(self, name: str) -> TopicRecord | None: ...

    def partition_state(self, topic: str, partition: int) -> PartitionState | None: ...

    def create_topic(self, name: str, partitions: int, replication_factor: int,
                     configs: Mapping[str, str]) -> TopicRecord: ...

    def delete_topic(self, name: str) -> None: ...

    def set_partitions(self, name: str, partitions: int) -> TopicRecord: ...

    def set_configs(self, name: str, configs: Mapping[str, str]) -> TopicRecord: ...


class LocalMetadataStore:
    """Single-broker metadata, persisted as JSON in the first log directory."""

    def __init__(self, data_dir: Path, broker: BrokerInfo, cluster_id: str = "") -> None:
        self._path = data_dir / METADATA_FILE
        self._broker = broker
        self._topics: dict[str, TopicRecord] = {}
        data_dir.mkdir(parents=True, exist_ok=True)
        stored_cluster_id = ""
        self._existed = self._path.exists()
        if self._existed:
            stored_cluster_id = self._load()
        if cluster_id and stored_cluster_id and cluster_id != stored_cluster_id:
            raise StromError(
                ErrorCode.INVALID_CONFIG,
                f"cluster.id={cluster_id!r} does not match the cluster id "
                f"{stored_cluster_id!r} stored in {self._path}; this data directory belongs "
                f"to another cluster",
            )
        self._cluster_id = cluster_id or stored_cluster_id or _new_cluster_id()
        if not self._existed or stored_cluster_id != self._cluster_id:
            self._save()

    # -- reads --------------------------------------------------------------------------------

    @property
    def path(self) -> Path:
        return self._path

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    @property
    def controller_id(self) -> int:
        return self._broker.broker_id

    @property
    def existed(self) -> bool:
        return self._existed

    def live_brokers(self) -> Sequence[BrokerInfo]:
        return (self._broker,)

    def topics(self) -> Mapping[str, TopicRecord]:
        return self._topics

    def topic(self, name: str) -> TopicRecord | None:
        return self._topics.get(name)

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        record = self._topics.get(topic)
        if record is None or not 0 <= partition < record.partitions:
            return None
        me = (self._broker.broker_id,)
        return PartitionState(leader=me[0], leader_epoch=0, replicas=me, isr=me)

    # -- writes -------------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int, replication_factor: int,
                     configs: Mapping[str, str]) -> TopicRecord:
        if name in self._topics:
            raise StromError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        record = TopicRecord(name, _new_topic_id(), partitions, replication_factor,
                             dict(configs))
        self._topics[name] = record
        self._save_or_undo(lambda: self._topics.pop(name, None))
        return record

    def delete_topic(self, name: str) -> None:
        record = self._require(name)
        del self._topics[name]
        self._save_or_undo(lambda: self._topics.__setitem__(name, record))

    def set_partitions(self, name: str, partitions: int) -> TopicRecord:
        old = self._require(name)
        self._topics[name] = replace(old, partitions=partitions)
        self._save_or_undo(lambda: self._topics.__setitem__(name, old))
        return self._topics[name]

    def set_configs(self, name: str, configs: Mapping[str, str]) -> TopicRecord:
        old = self._require(name)
        self._topics[name] = replace(old, configs=dict(configs))
        self._save_or_undo(lambda: self._topics.__setitem__(name, old))
        return self._topics[name]

    # -- persistence --------------------------------------------------------------------------

    def _require(self, name: str) -> TopicRecord:
        record = self._topics.get(name)
        if record is None:
            raise StromError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"topic {name!r} does not exist")
        return record

    def _save_or_undo(self, undo: Any) -> None:
        try:
            self._save()
        except OSError as exc:
            undo()
            raise StromError(ErrorCode.KAFKA_STORAGE_ERROR,
                             f"cannot write cluster metadata to {self._path}: {exc}") from exc

    def _load(self) -> str:
        try:
            data = json.loads(self._path.read_text(encoding="utf-8"))
            for item in data.get("topics", []):
                record = TopicRecord(
                    name=str(item["name"]),
                    topic_id=str(item["topic_id"]),
                    partitions=int(item["partitions"]),
                    replication_factor=int(item["replication_factor"]),
                    configs={str(k): str(v) for k, v in item.get("configs", {}).items()},
                )
                self._topics[record.name] = record
            return str(data.get("cluster_id", ""))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StromError(
                ErrorCode.KAFKA_STORAGE_ERROR,
                f"cannot read cluster metadata {self._path}: {exc}; restore it from a backup "
                f"or move it away to start with no topics",
            ) from exc

    def _save(self) -> None:
        data = {
            "version": _FORMAT_VERSION,
            "cluster_id": getattr(self, "_cluster_id", ""),
            "topics": [
                {
                    "name": t.name,
                    "topic_id": t.topic_id,
                    "partitions": t.partitions,
                    "replication_factor": t.replication_factor,
                    "configs": dict(t.configs),
                }
                for t in sorted(self._topics.values(), key=lambda t: t.name)
            ],
        }
        write_atomically(self._path, json.dumps(data, indent=2, sort_keys=True).encode())


def write_atomically(path: Path, payload: bytes) -> None:
    """Replace ``path`` with ``payload`` so that a crash leaves either the old or the new file."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _new_cluster_id() -> str:
    return uuid.uuid4().hex[:22]


def _new_topic_id() -> str:
    return str(uuid.uuid4())
