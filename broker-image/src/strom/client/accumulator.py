"""The producer's record accumulator: per-partition queues of batches, and when to send them.

``send()`` appends to the open batch of a partition; the sender asks ``ready()`` which leaders have
something worth sending (a full batch, ``linger_ms`` elapsed, a flush or close in progress, a retry
whose backoff is over) and ``drain()``s at most one batch per partition per request, up to
``max_request_size`` — Kafka's ``RecordAccumulator`` semantics. ``buffer_memory`` bounds the
bytes held by unfinished batches; ``send()`` blocks (up to ``max_block_ms``) when it is used up.

Pure logic apart from one lock: the sync producer appends from the caller's thread while the
sender drains from its own, so every method that touches the queues holds ``lock``. Time is passed
in (``now_ms``) so tests drive it without sleeping.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from strom.client.models import TopicPartition
from strom.client.producer_batch import ProducerBatch
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.records import BatchBuilder, Compression

#: Bytes a batch adds on the wire around its records (the v2 header) — for request sizing.
BATCH_OVERHEAD = 61


@dataclass(slots=True)
class ReadyCheck:
    """What ``ready()`` found: leaders with sendable data, when to look again, unroutable topics."""

    nodes: set[int] = field(default_factory=set)
    #: the subset of ``nodes`` with a full batch (or a flush / close forcing everything out)
    full_nodes: set[int] = field(default_factory=set)
    next_check_ms: float = float("inf")
    unknown_leader_topics: set[str] = field(default_factory=set)
    #: a retried batch waits out its backoff for the leader it failed on: poll the metadata
    backing_off: bool = False


def _leader_moved(batch: ProducerBatch, leader_of: Callable[[TopicPartition], int]) -> bool:
    """The metadata names a leader other than the one the batch last failed on: send it there
    now rather than after the backoff (Kafka's KIP-951; the backoff is for the same broker)."""
    if batch.failed_leader < 0:
        return False
    leader = leader_of(batch.tp)
    return leader >= 0 and leader != batch.failed_leader


class RecordAccumulator:
    def __init__(self, *, batch_size: int, linger_ms: float, compression: Compression,
                 buffer_memory: int, max_in_flight_per_partition: int | None = None) -> None:
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.compression = compression
        self.buffer_memory = buffer_memory
        self.lock = threading.Lock()
        self.memory = threading.Condition(threading.Lock())
        self.used_memory = 0
        self.batches: dict[TopicPartition, deque[ProducerBatch]] = {}
        self.incomplete: set[ProducerBatch] = set()
        self.flushes_in_progress = 0
        self.closing = False
        # With max_in_flight == 1 Kafka "mutes" a partition while a batch of it is in flight so
        # order holds across retries; otherwise retries may reorder (no idempotence yet).
        self.guarantee_order = max_in_flight_per_partition == 1
        self.muted: set[TopicPartition] = set()

    # --- memory --------------------------------------------------------------------------
    def reserve(self, size: int, timeout_s: float | None) -> None:
        """Take ``size`` bytes of buffer_memory, waiting up to ``timeout_s`` for completions."""
        with self.memory:
            if self.used_memory + size <= self.buffer_memory or self.used_memory == 0:
                self.used_memory += size
                return
            ok = self.memory.wait_for(
                lambda: self.used_memory + size <= self.buffer_memory or self.used_memory == 0
                or self.closing,
                timeout_s,
            )
            if not ok:
                raise StromError(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"buffer_memory={self.buffer_memory} bytes is full and no batch completed "
                    f"within max_block_ms; the broker is slower than send() — raise "
                    f"buffer_memory/max_block_ms or slow down",
                )
            self.used_memory += size

    def try_reserve(self, size: int) -> bool:
        with self.memory:
            if self.used_memory + size <= self.buffer_memory or self.used_memory == 0:
                self.used_memory += size
                return True
            return False

    def release(self, size: int) -> None:
        with self.memory:
            self.used_memory -= size
            self.memory.notify_all()

    # --- append (caller holds ``lock``) --------------------------------------------------
    def open_batch(self, tp: TopicPartition) -> ProducerBatch | None:
        """The batch records of ``tp`` are appended to now, if one is open."""
        dq = self.batches.get(tp)
        if dq:
            last = dq[-1]
            if not last.full:
                return last
        return None

    def new_batch(self, tp: TopicPartition, now_ms: float, reserved: int) -> ProducerBatch:
        """Start a batch for ``tp`` (the memory was reserved by the caller)."""
        dq = self.batches.get(tp)
        if dq is None:
            dq = self.batches[tp] = deque()
        if dq and not dq[-1].full:
            dq[-1].full = True
        batch = ProducerBatch(tp, BatchBuilder(self.compression, self.batch_size), now_ms,
                              reserved)
        dq.append(batch)
        self.incomplete.add(batch)
        return batch

    # --- sender side ---------------------------------------------------------------------
    def ready(self, now_ms: float, leader_of: Callable[[TopicPartition], int]) -> ReadyCheck:
        """Which leaders have a batch to send now; the earliest time something else will be."""
        check = ReadyCheck()
        with self.lock:
            force = self.flushes_in_progress > 0 or self.closing
            for tp, dq in self.batches.items():
                if not dq or (self.guarantee_order and tp in self.muted):
                    continue
                head = dq[0]
                if head.attempts > 0 and head.retry_at_ms > now_ms \
                        and not _leader_moved(head, leader_of):
                    check.next_check_ms = min(check.next_check_ms, head.retry_at_ms)
                    check.backing_off = True
                    continue
                full = head.full or len(dq) > 1
                due = head.created_ms + self.linger_ms
                if not (full or force or due <= now_ms):
                    check.next_check_ms = min(check.next_check_ms, due)
                    continue
                if len(head.builder) == 0 and head.data is None:
                    continue
                leader = leader_of(tp)
                if leader < 0:
                    check.unknown_leader_topics.add(tp.topic)
                    continue
                check.nodes.add(leader)
                if full or force:
                    check.full_nodes.add(leader)
        return check

    def drain(self, nodes: Iterable[int], leader_of: Callable[[TopicPartition], int],
              max_request_size: int, now_ms: float,
              stamp: Callable[[ProducerBatch], None] | None = None
              ) -> dict[int, list[ProducerBatch]]:
        """Take up to one ready batch per partition for each node, within max_request_size.

        ``stamp`` (idempotence) gives a batch its producer id, epoch and sequence just before
        it is closed, so sequences follow the order batches leave, not the order they opened.
        """
        wanted = set(nodes)
        out: dict[int, list[ProducerBatch]] = {}
        sizes: dict[int, int] = {}
        with self.lock:
            force = self.flushes_in_progress > 0 or self.closing
            for tp, dq in self.batches.items():
                if not dq or (self.guarantee_order and tp in self.muted):
                    continue
                head = dq[0]
                if head.attempts > 0 and head.retry_at_ms > now_ms \
                        and not _leader_moved(head, leader_of):
                    continue
                if not (head.full or len(dq) > 1 or force
                        or head.created_ms + self.linger_ms <= now_ms):
                    continue
                leader = leader_of(tp)
                if leader not in wanted:
                    continue
                if head.data is None and len(head.builder) == 0:
                    continue
                size = len(head.data) if head.data is not None else head.builder.size_in_bytes()
                used = sizes.get(leader, 0)
                if used and used + size > max_request_size:
                    continue
                dq.popleft()
                if stamp is not None:
                    stamp(head)
                head.close()
                sizes[leader] = used + size
                out.setdefault(leader, []).append(head)
                if self.guarantee_order:
                    self.muted.add(tp)
        return out

    def reenqueue(self, batch: ProducerBatch, retry_at_ms: float) -> None:
        """Put a failed batch back at the head of its partition, to be sent after backoff."""
        with self.lock:
            batch.attempts += 1
            batch.retry_at_ms = retry_at_ms
            dq = self.batches.setdefault(batch.tp, deque())
            dq.appendleft(batch)
            self.muted.discard(batch.tp)

    def finished(self, batch: ProducerBatch) -> None:
        """A batch completed (acknowledged or failed for good): free its memory."""
        with self.lock:
            self.incomplete.discard(batch)
            self.muted.discard(batch.tp)
        self.release(batch.reserved)

    def expire(self, now_ms: float, delivery_timeout_ms: float) -> list[ProducerBatch]:
        """Remove queued batches older than delivery_timeout_ms (the caller fails them)."""
        expired: list[ProducerBatch] = []
        with self.lock:
            for dq in self.batches.values():
                while dq and now_ms - dq[0].created_ms >= delivery_timeout_ms:
                    batch = dq.popleft()
                    batch.full = True
                    expired.append(batch)
        return expired

    def abort_all(self) -> list[ProducerBatch]:
        with self.lock:
            out = [b for dq in self.batches.values() for b in dq]
            self.batches.clear()
            for b in out:
                b.full = True  # no send() may append to a batch that is being failed
        return out

    def has_queued(self) -> bool:
        with self.lock:
            return any(self.batches.values())

    def has_incomplete(self) -> bool:
        with self.lock:
            return bool(self.incomplete)
