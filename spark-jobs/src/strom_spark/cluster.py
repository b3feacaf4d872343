"""The connector's only I/O: what it asks a Strom cluster, through ``strom.client``.

Two small faces:

* :class:`ClusterView` (driver side): which topics and partitions exist, and the earliest, latest
  and by-timestamp offsets of partitions. One Admin and one Consumer, kept open by a streaming
  reader across micro-batches and closed in ``stop()``.
* :func:`read_range` (executor side): the records of exactly ``[start, end)`` of one partition,
  fetched from its leader (the Consumer routes to leaders and follows leader changes), in
  chunks. Records at or beyond ``end`` are never yielded. The Consumer keeps one Fetch in flight
  ahead of the caller, so it may *fetch* a little past ``end``; it is closed as soon as the range
  is done.

Data loss during a read (retention deleted offsets the plan still covers) is noticed as a jump in
offsets that the log start explains: an error under ``failOnDataLoss=true``, a warning and a skip
otherwise. Gaps of compacted topics (where the log start did not move) are normal and skipped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from types import TracebackType

from strom.client import Admin, Consumer, Record
from strom.client import TopicPartition as ClientTP
from strom_spark.errors import StromDataLossError, StromTopicError
from strom_spark.offsets import PartitionOffsets, TopicPartition
from strom_spark.planning import DataLoss, OffsetRange, data_loss_message

log = logging.getLogger("strom_spark")

#: How long a read may make no progress before it is an error (the plan only covers offsets
#: below the high watermark it saw, so a stall means the cluster lost them or is unreachable).
STALL_TIMEOUT_S = 120.0


def _client_tps(tps: Iterable[TopicPartition]) -> list[ClientTP]:
    return [ClientTP(tp.topic, tp.partition) for tp in tps]


def _ours(found: dict[ClientTP, int]) -> PartitionOffsets:
    return {TopicPartition(tp.topic, tp.partition): off for tp, off in found.items()}


class ClusterView:
    """Metadata and offset lookups for the driver."""

    def __init__(self, bootstrap_servers: str) -> None:
        self.bootstrap_servers = bootstrap_servers
        self._admin = Admin(bootstrap_servers)
        self._consumer: Consumer | None = None

    def _cons(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(self.bootstrap_servers, auto_offset_reset="earliest")
        return self._consumer

    def partition_counts(self, only: Iterable[str] | None = None) -> dict[str, int]:
        """``{topic: partition count}`` of the existing (non-internal) topics."""
        names = set(self._admin.list_topics())
        if only is not None:
            names &= set(only)
        if not names:
            return {}
        return {d.name: len(d.partitions) for d in self._admin.describe_topics(sorted(names))}

    def earliest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        wanted = _client_tps(tps)
        return _ours(self._cons().beginning_offsets(wanted)) if wanted else {}

    def latest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        wanted = _client_tps(tps)
        return _ours(self._cons().end_offsets(wanted)) if wanted else {}

    def offsets_for_times(
        self, stamps: dict[TopicPartition, int]
    ) -> dict[TopicPartition, int | None]:
        if not stamps:
            return {}
        found = self._cons().offsets_for_times(
            {ClientTP(tp.topic, tp.partition): ts for tp, ts in stamps.items()}
        )
        return {
            TopicPartition(tp.topic, tp.partition): (None if hit is None else hit[0])
            for tp, hit in found.items()
        }

    def close(self) -> None:
        try:
            self._admin.close()
        finally:
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None

    def __enter__(self) -> ClusterView:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def read_range(
    bootstrap_servers: str,
    rng: OffsetRange,
    *,
    fail_on_data_loss: bool = True,
    fetch_max_bytes: int = 4 * 1024 * 1024,
    chunk_records: int = 8192,
) -> Iterator[list[Record]]:
    """Yield the records of ``[rng.start, rng.end)`` in order, in lists of <= ``chunk_records``."""
    if rng.end <= rng.start:
        return
    tp = ClientTP(rng.topic, rng.partition)
    consumer = Consumer(
        bootstrap_servers,
        auto_offset_reset="earliest",
        fetch_max_bytes=fetch_max_bytes,
        max_partition_fetch_bytes=fetch_max_bytes,
        max_poll_records=chunk_records,
        fetch_max_wait_ms=100,
    )
    try:
        start = _check_start(consumer, tp, rng, fail_on_data_loss)
        if start >= rng.end:
            return
        consumer.assign([tp])
        consumer.seek(tp, start)
        expected = start
        last_progress = time.monotonic()
        while expected < rng.end:
            records = consumer.poll(timeout_ms=500, max_records=chunk_records)
            if records:
                first = records[0].offset
                if first > expected:
                    _check_gap(consumer, tp, rng, expected, first, fail_on_data_loss)
                if records[-1].offset >= rng.end:
                    records = [r for r in records if r.offset < rng.end]
                if records:
                    yield records
                    expected = records[-1].offset + 1
                    last_progress = time.monotonic()
                if len(records) < chunk_records or expected >= rng.end:
                    # a batch ended: trailing offsets removed by compaction show up only as the
                    # consumer's position moving past them
                    expected = max(expected, _position(consumer, tp, expected))
                continue
            expected = max(expected, _position(consumer, tp, expected))
            if expected >= rng.end:
                break
            if time.monotonic() - last_progress > STALL_TIMEOUT_S:
                raise StromTopicError(
                    f"reading {rng}: no record at or after offset {expected} arrived for "
                    f"{STALL_TIMEOUT_S:.0f}s (the partition's leader is unreachable or the log "
                    "was truncated below the planned end)"
                )
    finally:
        consumer.close()


def _position(consumer: Consumer, tp: ClientTP, fallback: int) -> int:
    try:
        return consumer.position(tp, timeout=5.0)
    except Exception:  # resetting or unknown for a moment: keep what we know
        return fallback


def _check_start(
    consumer: Consumer, tp: ClientTP, rng: OffsetRange, fail_on_data_loss: bool
) -> int:
    """The offset to read from: ``rng.start``, or the log start when retention got there first."""
    log_start = consumer.beginning_offsets([tp]).get(tp, 0)
    if rng.start >= log_start:
        return rng.start
    loss = DataLoss(
        rng.tp,
        rng.start,
        log_start,
        f"offsets [{rng.start}, {min(log_start, rng.end)}) of the planned range "
        f"[{rng.start}, {rng.end}) were deleted (retention); the log now starts at {log_start}",
    )
    if fail_on_data_loss:
        raise StromDataLossError(data_loss_message([loss], True))
    log.warning(data_loss_message([loss], False))
    return log_start


def _check_gap(
    consumer: Consumer,
    tp: ClientTP,
    rng: OffsetRange,
    expected: int,
    got: int,
    fail_on_data_loss: bool,
) -> None:
    log_start = consumer.beginning_offsets([tp]).get(tp, 0)
    if log_start <= expected:
        return  # a compaction gap: those offsets never had surviving records
    loss = DataLoss(
        rng.tp,
        expected,
        log_start,
        f"offsets [{expected}, {got}) were deleted (retention) while the range "
        f"[{rng.start}, {rng.end}) was being read",
    )
    if fail_on_data_loss:
        raise StromDataLossError(data_loss_message([loss], True))
    log.warning(data_loss_message([loss], False))
