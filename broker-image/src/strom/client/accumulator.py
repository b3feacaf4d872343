"""The producer's record accumulator: per-partition queues of batches, and when to send them.

``send()`` appends to the open batch of a partition; the sender asks ``ready()`` which leaders have
something worth sending (a full batch, ``linger_ms`` elapsed, a flush or close in progress, a retry
whose backoff is over) and ``drain()``s at most one batch per partition per request, up to
``max_request_size`` — Kafka's ``RecordAccumulator`` semantics. ``buffer_memory`` bounds the
bytes held by unfinished batches; ``send()`` blocks (up to ``max_block_ms``) when it is used up.

The sender's cost does not grow with the partitions a producer writes to (issue 21): a partition
with queued batches is always in exactly one place — the *ready* set (its head batch may be sent
now), the *linger* heap (keyed by when its head batch becomes due), the *backoff* set (its head
is a retry waiting out its backoff) or *muted* (a batch of it is in flight) — so ``ready()`` and
``drain()`` look only at partitions that are due, and a wake-up with nothing due costs O(1).
Profiled before: keyed produce over 1,000 partitions woke the sender once per new batch and every
wake-up scanned all 1,000 partitions (4,803 records/s against 204,407 over 10).

Pure logic apart from one lock: the sync producer appends from the caller's thread while the
sender drains from its own, so every method that touches the queues holds ``lock``. Time is passed
in (``now_ms``) so tests drive it without sleeping.
"""

from __future__ import annotations

import heapq
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
#: The capacity of a partition's new batch once half of buffer_memory is taken, until its
#: batches fill up (then each next one is ``GROWTH`` times larger, up to ``batch_size``): the
#: default 32 MiB then hold ~17,900 new batches, 10,000 partitions with a batch open each and
#: most with one in flight (issue 21; with 8 KiB per batch only ~2,000 fitted and keyed send()
#: over 10,000 partitions waited for memory that batches of one or two records held).
MIN_BATCH = 1024
#: A partition's new batch while half of buffer_memory stays free (and an eighth is taken):
#: ~80 records of 100 B. A floor of MIN_BATCH there made keyed produce over 1,000 partitions
#: cost twice the CPU per record in client and broker (0.69x of 10 partitions -> 0.40x, same
#: machine): batches left at linger's end mostly empty shrank the partition to 1 KiB, and under
#: load they then filled at ~10 records.
MID_BATCH = 8192
GROWTH = 4


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
        # Where each partition with queued batches waits (see the module docstring).
        self._ready: dict[TopicPartition, None] = {}  # insertion-ordered: drained ones go last
        self._linger: list[tuple[float, int, TopicPartition]] = []  # heap of (due, seq, tp)
        self._linger_seq = 0
        self._backoff: set[TopicPartition] = set()
        self._swept = False  # a flush / close moved every queued partition to ``_ready``
        self._queued = 0  # batches in the queues
        self._delivery_timeout_ms = 0.0  # learnt from expire(); until then scan at once
        self._next_expire_ms = float("inf")
        #: the capacity a partition's batches earned by filling up (see ``MIN_BATCH``)
        self._grown: dict[TopicPartition, int] = {}

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

    def batch_capacity(self, tp: TopicPartition | None = None, need: int = 0) -> int:
        """Bytes to reserve for (and the capacity of) ``tp``'s next new batch, for a first
        record of about ``need`` bytes: ``batch_size`` while at most an eighth of
        buffer_memory is taken after it; else what the partition's batches earned by filling
        up, at least ``MID_BATCH`` while half stays free and ``MIN_BATCH`` below that
        (``GROWTH`` times more after each full one, back to the floor while under a quarter
        would stay free); never less than ``need`` (a big
        record reserves what it holds, as Kafka's max(batch.size, record size)). A batch
        reserves its whole capacity up front, so the bound on memory stays strict: with
        ``batch_size`` everywhere 32 MiB held only 128 batches (issue 21)."""
        with self.memory:
            return self._capacity(tp, self.buffer_memory - self.used_memory, need)

    def _capacity(self, tp: TopicPartition | None, free: int, need: int) -> int:
        memory = self.buffer_memory
        if free - self.batch_size >= memory - memory // 8:
            return max(self.batch_size, need)
        small = min(self.batch_size, MID_BATCH if free - MID_BATCH >= memory // 2 else MIN_BATCH)
        size = small if tp is None else min(self.batch_size, max(small, self._grown.get(tp, small)))
        if size > small and free - size < memory // 4:
            size = small
        return max(size, need)

    def reserve_batch(self, tp: TopicPartition | None = None, need: int = 0) -> int:
        """Reserve a new batch's bytes (``batch_capacity``) under one lock: the size, or 0 if
        buffer_memory has no room for it (as ``try_reserve``)."""
        with self.memory:
            free = self.buffer_memory - self.used_memory
            size = self._capacity(tp, free, need)
            if size <= free or self.used_memory == 0:
                self.used_memory += size
                return size
            return 0

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
            self._filled(last)  # a full batch is sendable now
        return None

    def mark_full(self, batch: ProducerBatch) -> None:
        """No more records go into ``batch``: it is sendable now, not at the end of linger."""
        batch.full = True
        self._filled(batch)

    def _filled(self, batch: ProducerBatch) -> None:
        """``batch`` is full: sendable now, and its partition earns bigger batches (see
        ``batch_capacity``) unless it is a retry waiting to be sent again."""
        tp = batch.tp
        self._ready[tp] = None
        if batch.data is None:
            self._grown[tp] = min(self.batch_size, batch.builder.max_bytes * GROWTH)

    def new_batch(self, tp: TopicPartition, now_ms: float, reserved: int) -> ProducerBatch:
        """Start a batch for ``tp`` (the memory was reserved by the caller)."""
        return self.start_batch(tp, now_ms, reserved)[0]

    def start_batch(self, tp: TopicPartition, now_ms: float, reserved: int
                    ) -> tuple[ProducerBatch, bool]:
        """``new_batch``, and whether the sender must be woken for it: only when something
        became sendable (the previous batch is full now) or the sender may have no timer for
        it (nothing else lingers). A batch that merely lingers behind others needs no wake-up:
        the sender's timer is set for an earlier one. Waking per new batch, with every wake-up
        scanning all partitions, was most of keyed produce's cost over 1,000 partitions."""
        dq = self.batches.get(tp)
        if dq is None:
            dq = self.batches[tp] = deque()
        batch = ProducerBatch(tp, BatchBuilder(self.compression, reserved or self.batch_size),
                              now_ms, reserved)
        wake = False
        if dq:
            dq[-1].full = True
            self._ready[tp] = None
            wake = True
        elif tp in self._ready:
            wake = True
        elif tp not in self.muted and tp not in self._backoff:
            if self.flushes_in_progress > 0 or self.closing:
                self._ready[tp] = None
                wake = True
            else:
                wake = not self._linger or self.linger_ms <= 0
                self._linger_seq += 1
                heapq.heappush(self._linger, (now_ms + self.linger_ms, self._linger_seq, tp))
        dq.append(batch)
        self._queued += 1
        self._next_expire_ms = min(self._next_expire_ms, now_ms + self._delivery_timeout_ms)
        self.incomplete.add(batch)
        return batch, wake

    # --- sender side (each takes ``lock``) -----------------------------------------------
    def _promote(self, now_ms: float, leader_of: Callable[[TopicPartition], int],
                 check: ReadyCheck | None) -> None:
        """Move partitions whose time has come into ``_ready`` (caller holds ``lock``)."""
        ready = self._ready
        if self.flushes_in_progress > 0 or self.closing:
            if not self._swept:  # everything queued goes now: one pass over the partitions
                self._swept = True
                for tp, dq in self.batches.items():
                    if dq and tp not in self.muted:
                        ready[tp] = None
                self._linger.clear()
                self._backoff.clear()
        else:
            self._swept = False
        linger = self._linger
        while linger and linger[0][0] <= now_ms:
            ready[heapq.heappop(linger)[2]] = None
        if self._backoff:
            for tp in list(self._backoff):
                waiting = self.batches.get(tp)
                if not waiting:
                    self._backoff.discard(tp)
                    continue
                head = waiting[0]
                if head.attempts > 0 and head.retry_at_ms > now_ms \
                        and not _leader_moved(head, leader_of):
                    if check is not None:
                        check.next_check_ms = min(check.next_check_ms, head.retry_at_ms)
                        check.backing_off = True
                    continue
                self._backoff.discard(tp)
                ready[tp] = None

    def _head_if_sendable(self, tp: TopicPartition, now_ms: float, force: bool,
                          leader_of: Callable[[TopicPartition], int]
                          ) -> tuple[ProducerBatch, bool] | None:
        """(head batch, full?) if ``tp``'s head may be sent now; else move ``tp`` to where it
        waits (linger heap, backoff set, nowhere if empty or muted) and return None."""
        dq = self.batches.get(tp)
        if not dq or (self.guarantee_order and tp in self.muted):
            del self._ready[tp]
            return None
        head = dq[0]
        if head.attempts > 0 and head.retry_at_ms > now_ms \
                and not _leader_moved(head, leader_of):
            del self._ready[tp]
            self._backoff.add(tp)
            return None
        full = head.full or len(dq) > 1
        due = head.created_ms + self.linger_ms
        if not (full or force or due <= now_ms) or (len(head.builder) == 0 and head.data is None):
            del self._ready[tp]
            self._linger_seq += 1
            heapq.heappush(self._linger, (due, self._linger_seq, tp))
            return None
        return head, full

    def ready(self, now_ms: float, leader_of: Callable[[TopicPartition], int]) -> ReadyCheck:
        """Which leaders have a batch to send now; the earliest time something else will be."""
        check = ReadyCheck()
        with self.lock:
            force = self.flushes_in_progress > 0 or self.closing
            self._promote(now_ms, leader_of, check)
            for tp in list(self._ready):
                found = self._head_if_sendable(tp, now_ms, force, leader_of)
                if found is None:
                    continue
                leader = leader_of(tp)
                if leader < 0:
                    check.unknown_leader_topics.add(tp.topic)
                    continue
                check.nodes.add(leader)
                if found[1] or force:
                    check.full_nodes.add(leader)
            if self._linger:
                check.next_check_ms = min(check.next_check_ms, self._linger[0][0])
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
            self._promote(now_ms, leader_of, None)
            for tp in list(self._ready):
                found = self._head_if_sendable(tp, now_ms, force, leader_of)
                if found is None:
                    continue
                head = found[0]
                leader = leader_of(tp)
                if leader not in wanted:
                    continue
                size = len(head.data) if head.data is not None else head.builder.size_in_bytes()
                used = sizes.get(leader, 0)
                if used and used + size > max_request_size:
                    continue
                dq = self.batches[tp]
                dq.popleft()
                self._queued -= 1
                if not found[1] and size * GROWTH < head.builder.max_bytes \
                        and tp in self._grown:  # went at linger's end, mostly empty: shrink
                    self._grown[tp] = max(MIN_BATCH, self._grown[tp] // GROWTH)
                if stamp is not None:
                    stamp(head)
                head.close()
                sizes[leader] = used + size
                out.setdefault(leader, []).append(head)
                if self.guarantee_order:
                    self.muted.add(tp)
                if not dq or self.guarantee_order:
                    del self._ready[tp]  # back when the next batch starts / this one is done
                else:
                    self._ready[tp] = self._ready.pop(tp)  # to the end: others go first
        return out

    def _requeue(self, tp: TopicPartition) -> None:
        """``tp`` may have a sendable head again (caller holds ``lock``)."""
        if self.batches.get(tp):
            self._ready[tp] = None

    def reenqueue(self, batch: ProducerBatch, retry_at_ms: float) -> None:
        """Put a failed batch back at the head of its partition, to be sent after backoff."""
        with self.lock:
            batch.attempts += 1
            batch.retry_at_ms = retry_at_ms
            dq = self.batches.setdefault(batch.tp, deque())
            dq.appendleft(batch)
            self._queued += 1
            self._next_expire_ms = min(self._next_expire_ms,
                                       batch.created_ms + self._delivery_timeout_ms)
            self.muted.discard(batch.tp)
            self._ready.pop(batch.tp, None)
            self._backoff.add(batch.tp)

    def finished(self, batch: ProducerBatch) -> None:
        """A batch completed (acknowledged or failed for good): free its memory."""
        with self.lock:
            self.incomplete.discard(batch)
            if batch.tp in self.muted:
                self.muted.discard(batch.tp)
                self._requeue(batch.tp)
        self.release(batch.reserved)

    def finished_many(self, batches: Iterable[ProducerBatch]) -> None:
        """``finished`` for every batch of one answer: one lock and one release for them all."""
        size = 0
        with self.lock:
            muted = self.muted
            for batch in batches:
                self.incomplete.discard(batch)
                size += batch.reserved
                tp = batch.tp
                if tp in muted:
                    muted.discard(tp)
                    self._requeue(tp)
        self.release(size)

    def expire(self, now_ms: float, delivery_timeout_ms: float) -> list[ProducerBatch]:
        """Remove queued batches older than delivery_timeout_ms (the caller fails them).

        Scans the queues only when the oldest queued batch may have expired."""
        expired: list[ProducerBatch] = []
        if now_ms < self._next_expire_ms and self._delivery_timeout_ms == delivery_timeout_ms:
            # read without the lock (one float; a stale value is seen at the next wake-up):
            # the sender takes the lock once less per wake-up, and a wake-up that waits for
            # the lock while send() holds it costs a GIL switch interval (issue 21)
            return expired
        with self.lock:
            self._delivery_timeout_ms = delivery_timeout_ms
            if now_ms < self._next_expire_ms:
                return expired
            oldest = float("inf")
            for dq in self.batches.values():
                while dq and now_ms - dq[0].created_ms >= delivery_timeout_ms:
                    batch = dq.popleft()
                    self._queued -= 1
                    batch.full = True
                    expired.append(batch)
                if dq:
                    oldest = min(oldest, dq[0].created_ms)
            self._next_expire_ms = oldest + delivery_timeout_ms
        return expired

    def abort_all(self) -> list[ProducerBatch]:
        with self.lock:
            out = [b for dq in self.batches.values() for b in dq]
            self.batches.clear()
            self._ready.clear()
            self._linger.clear()
            self._backoff.clear()
            self._queued = 0
            for b in out:
                b.full = True  # no send() may append to a batch that is being failed
        return out

    def has_queued(self) -> bool:
        """Whether batches are queued; read without the lock (one int): the sender only uses
        it to choose how long to sleep."""
        return self._queued > 0

    def has_incomplete(self) -> bool:
        with self.lock:
            return bool(self.incomplete)
