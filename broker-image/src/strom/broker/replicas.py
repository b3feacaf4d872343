"""The partition replicas this broker hosts, and the wake-ups of long-polling fetches.

:class:`ReplicaManager` (Kafka's name) is the one owner of the open :class:`PartitionLog` objects
on the request path: produce appends through it, fetch and list-offsets read through it, and it
tells waiting fetches when a partition grows. It runs on the event loop's thread only, so it
holds no locks; storage calls are synchronous page-cache writes.

Leadership comes from the :class:`~strom.broker.metadata.MetadataStore`. With the single-broker
store this broker leads every partition, the ISR is itself, and the high watermark moves to the
log end offset on every append. acks=-1 (all) therefore completes with the leader's append,
after checking ``min.insync.replicas`` against the ISR as Kafka does. Follower fetching and ISR
changes arrive with replication, in a later issue.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator

from strom.broker.metadata import MetadataStore, PartitionState
from strom.protocol.errors import ErrorCode, StromError
from strom.storage.config import LogConfig
from strom.storage.log import AppendResult, PartitionLog, ReadResult
from strom.storage.manager import LogManager

TopicPartition = tuple[str, int]


class AppendWaiters:
    """One-shot wake-ups: a fetch registers an Event on the partitions it reads."""

    def __init__(self) -> None:
        self._waiting: dict[TopicPartition, set[asyncio.Event]] = {}
        self.closed = False

    def register(self, tps: Iterable[TopicPartition]) -> asyncio.Event:
        event = asyncio.Event()
        if self.closed:  # shutting down: nobody waits any more
            event.set()
            return event
        for tp in tps:
            self._waiting.setdefault(tp, set()).add(event)
        return event

    def unregister(self, tps: Iterable[TopicPartition], event: asyncio.Event) -> None:
        for tp in tps:
            events = self._waiting.get(tp)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._waiting[tp]

    def notify(self, tp: TopicPartition) -> None:
        for event in self._waiting.get(tp, ()):
            event.set()

    def close(self) -> None:
        """Wake every waiter now and never block again (graceful shutdown)."""
        self.closed = True
        self.notify_all()

    def notify_all(self) -> None:
        for events in self._waiting.values():
            for event in events:
                event.set()

    def __len__(self) -> int:
        return sum(len(v) for v in self._waiting.values())


class ReplicaManager:
    def __init__(self, broker_id: int, logs: LogManager, metadata: MetadataStore) -> None:
        self.broker_id = broker_id
        self._logs = logs
        self._metadata = metadata
        self._open: dict[TopicPartition, PartitionLog] = {}
        self.waiters = AppendWaiters()

    # -- the set of hosted logs (changed by TopicManager) --------------------------------------

    def adopt(self, plog: PartitionLog) -> None:
        self._open[(plog.topic, plog.partition)] = plog
        self._advance_high_watermark(plog)

    def drop(self, topic: str, partition: int) -> None:
        self._open.pop((topic, partition), None)
        self.waiters.notify((topic, partition))

    def logs(self) -> Iterator[PartitionLog]:
        return iter(list(self._open.values()))

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self._open.get((topic, partition))

    def __len__(self) -> int:
        return len(self._open)

    # -- request path -------------------------------------------------------------------------

    def leader_log(self, topic: str, partition: int,
                   current_leader_epoch: int = -1) -> tuple[PartitionLog, PartitionState]:
        """The log of a partition this broker leads, or a StromError saying why not."""
        state = self._metadata.partition_state(topic, partition)
        plog = self._open.get((topic, partition))
        if state is None or plog is None:
            raise StromError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"{_unknown_what(self._metadata, topic, partition)}")
        if state.leader != self.broker_id:
            raise StromError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"this broker does not lead {topic}-{partition} (leader is broker "
                             f"{state.leader}); refresh metadata")
        if current_leader_epoch >= 0 and current_leader_epoch != state.leader_epoch:
            code = (ErrorCode.FENCED_LEADER_EPOCH if current_leader_epoch < state.leader_epoch
                    else ErrorCode.UNKNOWN_LEADER_EPOCH)
            raise StromError(code, f"current_leader_epoch {current_leader_epoch} of "
                                   f"{topic}-{partition} does not match the leader's epoch "
                                   f"{state.leader_epoch}; refresh metadata")
        return plog, state

    def append(self, topic: str, partition: int, records: bytes, acks: int,
               config: LogConfig | None = None) -> AppendResult:
        plog, state = self.leader_log(topic, partition)
        if acks == -1 and config is not None and len(state.isr) < config.min_insync_replicas:
            raise StromError(ErrorCode.NOT_ENOUGH_REPLICAS,
                             f"{topic}-{partition} has {len(state.isr)} in-sync replicas, fewer "
                             f"than min.insync.replicas={config.min_insync_replicas}; lower "
                             f"min.insync.replicas or use acks=1")
        result = plog.append_as_leader(records, state.leader_epoch)
        self._advance_high_watermark(plog)
        self.waiters.notify((topic, partition))
        return result

    def read(self, topic: str, partition: int, offset: int, max_bytes: int,
             current_leader_epoch: int = -1) -> ReadResult:
        plog, _ = self.leader_log(topic, partition, current_leader_epoch)
        hw = plog.high_watermark
        if offset < plog.log_start_offset or offset > hw:
            raise StromError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"fetch offset {offset} is out of range for {topic}-{partition}; valid offsets "
                f"are [{plog.log_start_offset}, {hw}] (log start offset .. high watermark)",
            )
        if offset == hw:
            return ReadResult(b"", plog.log_start_offset, plog.log_end_offset, hw)
        return plog.read(offset, max_bytes, max_offset=hw)

    def _advance_high_watermark(self, plog: PartitionLog) -> None:
        # A single in-sync replica: everything the leader has is committed.
        state = self._metadata.partition_state(plog.topic, plog.partition)
        if state is not None and len(state.isr) <= 1:
            plog.high_watermark = plog.log_end_offset


def _unknown_what(metadata: MetadataStore, topic: str, partition: int) -> str:
    record = metadata.topic(topic)
    if record is None:
        return f"topic {topic!r} does not exist; create it first (or enable " \
               f"auto.create.topics.enable)"
    return (f"partition {partition} of topic {topic!r} does not exist; the topic has "
            f"{record.partitions} partitions (0..{record.partitions - 1})")
