"""The consumer's offset bookkeeping: assignment, positions, resets, and prefetched data.

Two offsets per partition, as in Kafka's ``SubscriptionState`` plus prefetch: ``position`` is the
next offset ``poll()`` will return; ``fetch_offset`` is the next offset to ask the broker for, which
runs ahead of ``position`` by the fetched-but-not-yet-returned data. Every seek or reset bumps the
partition's ``generation``; prefetched data and in-flight answers of an older generation are
dropped, so a seek is never followed by stale records.

Pure state, guarded by ``lock`` because the sync consumer's ``poll()`` (caller's thread) and its
fetcher (loop thread) both touch it. No I/O, no decoding beyond batch headers.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

from strom.client.models import OFFSET_BEGINNING, OFFSET_END, TopicPartition
from strom.protocol.batch import summarize
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.records import Record, RecordTaker

EARLIEST = "earliest"
LATEST = "latest"


@dataclass(slots=True)
class CompletedFetch:
    """Whole batches of one partition from one Fetch answer, waiting for ``poll()``."""

    tp: TopicPartition
    generation: int
    data: bytes
    fetch_offset: int   # records below this are dropped (the first batch may start earlier)
    next_offset: int    # the offset after the last whole batch
    records: RecordTaker | None = None  # the decoder, started by the first poll()


@dataclass(slots=True)
class PartitionState:
    position: int | None = None
    fetch_offset: int | None = None
    reset: str | None = None      # pending reset strategy while position is None
    generation: int = 0
    in_flight: bool = False
    resetting: bool = False
    buffered: int = 0             # CompletedFetch objects queued for this partition
    backoff_until_ms: float = 0.0
    high_watermark: int = -1
    log_start_offset: int = -1
    paused: bool = False


@dataclass(slots=True)
class SubscriptionState:
    default_reset: str            # earliest | latest | none
    max_buffered_fetches: int = 2
    lock: threading.Lock = field(default_factory=threading.Lock)
    states: dict[TopicPartition, PartitionState] = field(default_factory=dict)
    completed: deque[CompletedFetch] = field(default_factory=deque)
    errors: deque[StromError] = field(default_factory=deque)

    # --- assignment and seeks (caller holds ``lock``) ------------------------------------
    def assign(self, tps: list[TopicPartition]) -> None:
        keep = {tp: self.states[tp] for tp in tps if tp in self.states}
        for tp in tps:
            if tp not in keep:
                keep[tp] = PartitionState(reset=self._reset_for_new())
        self.states = keep
        self.completed = deque(c for c in self.completed if c.tp in keep)

    def _reset_for_new(self) -> str | None:
        return None if self.default_reset == "none" else self.default_reset

    def state(self, tp: TopicPartition) -> PartitionState:
        st = self.states.get(tp)
        if st is None:
            raise StromError(ErrorCode.INVALID_REQUEST,
                             f"{tp} is not assigned to this consumer; call assign() first")
        return st

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.seek_many([tp], offset)

    def seek_many(self, tps: list[TopicPartition], offset: int) -> None:
        """``seek`` of every partition in ``tps`` to the same ``offset``, dropping their
        prefetched data in one pass over ``completed`` (seek_to_beginning of 1,000
        partitions made that pass 1,000 times)."""
        if offset < 0 and offset not in (OFFSET_BEGINNING, OFFSET_END):
            raise StromError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"seek offset {offset} is negative; use OFFSET_BEGINNING / OFFSET_END")
        for st in [self.state(tp) for tp in tps]:  # every one assigned, or none moves
            self._seek(st, offset)
        dropped = set(tps)
        if self.completed:
            self.completed = deque(c for c in self.completed if c.tp not in dropped)

    @staticmethod
    def _seek(st: PartitionState, offset: int) -> None:
        st.generation += 1
        st.buffered = 0
        st.in_flight = False
        st.backoff_until_ms = 0.0
        # a reset still on the network answers for the old generation and is ignored: the
        # new position must not wait for it (a seek right after assign() waited for the
        # assignment's own reset, a whole ListOffsets of every partition)
        st.resetting = False
        if offset == OFFSET_BEGINNING:
            st.position = st.fetch_offset = None
            st.reset = EARLIEST
        elif offset == OFFSET_END:
            st.position = st.fetch_offset = None
            st.reset = LATEST
        else:
            st.position = st.fetch_offset = offset
            st.reset = None

    def request_reset(self, tp: TopicPartition, strategy: str | None = None) -> None:
        """Forget the position (out of range, or no position yet) and reset by strategy."""
        st = self.state(tp)
        strategy = strategy or self._reset_for_new()
        if strategy is None:
            self.errors.append(StromError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"{tp} has no valid position (offset {st.position} is out of range or unset) "
                f"and auto_offset_reset='none'; seek() to an offset"))
            st.position = st.fetch_offset = None
            st.reset = None
            return
        st.generation += 1
        st.buffered = 0
        st.position = st.fetch_offset = None
        st.reset = strategy

    def set_reset_result(self, tp: TopicPartition, generation: int, offset: int) -> None:
        st = self.states.get(tp)
        if st is None or st.generation != generation or st.position is not None:
            return
        st.position = st.fetch_offset = offset
        st.reset = None
        st.generation += 1

    # --- the fetcher's view (caller holds ``lock``) --------------------------------------
    def needing_reset(self) -> list[tuple[TopicPartition, str, int]]:
        return [(tp, st.reset, st.generation) for tp, st in self.states.items()
                if st.position is None and st.reset is not None and not st.resetting]

    def fetchable(self, now_ms: float) -> list[tuple[TopicPartition, int, int]]:
        """(tp, fetch_offset, generation) for partitions that may be fetched now."""
        out: list[tuple[TopicPartition, int, int]] = []
        for tp, st in self.states.items():
            if (st.fetch_offset is None or st.in_flight or st.paused
                    or st.buffered >= self.max_buffered_fetches or st.backoff_until_ms > now_ms):
                continue
            out.append((tp, st.fetch_offset, st.generation))
        return out

    def next_backoff_ms(self) -> float:
        times = [st.backoff_until_ms for st in self.states.values() if st.backoff_until_ms > 0]
        return min(times) if times else float("inf")

    def on_fetched(self, tp: TopicPartition, generation: int, data: bytes,
                   high_watermark: int, log_start_offset: int) -> bool:
        """Queue the whole batches of a Fetch answer; True if records became available."""
        st = self.states.get(tp)
        if st is None or st.generation != generation:
            return False
        st.in_flight = False
        st.high_watermark = high_watermark
        st.log_start_offset = log_start_offset
        if not data or st.fetch_offset is None:
            return False
        # the offset after the last whole batch, reading three integers a batch (walking
        # iter_headers built a full header per batch: ~3x the cost over the 10-30 record
        # batches of a keyed produce spread over 1,000 partitions)
        after = summarize(data).next_offset
        whole = after >= 0
        next_offset = max(st.fetch_offset, after)
        if whole and next_offset <= st.fetch_offset:
            return False
        # without a single whole batch the answer is damaged: queued all the same, so poll()
        # raises its error (the position does not move) instead of fetching it forever
        self.completed.append(CompletedFetch(tp, generation, data, st.fetch_offset, next_offset))
        st.fetch_offset = next_offset
        st.buffered += 1
        return True

    # --- poll's view ---------------------------------------------------------------------
    def next_completed(self) -> CompletedFetch | None:
        """The fetch poll() should read from, skipping stale ones (caller holds ``lock``)."""
        while self.completed:
            c = self.completed[0]
            st = self.states.get(c.tp)
            if st is not None and st.generation == c.generation:
                return c
            self.completed.popleft()
        return None

    def advance(self, c: CompletedFetch, last: Record | None, exhausted: bool) -> bool:
        """Move the position past returned records; False if ``c`` went stale meanwhile."""
        st = self.states.get(c.tp)
        if st is None or st.generation != c.generation:
            if self.completed and self.completed[0] is c:
                self.completed.popleft()
            return False
        if last is not None:
            st.position = last.offset + 1
        if exhausted:
            if st.position is None or st.position < c.next_offset:
                st.position = c.next_offset
            if self.completed and self.completed[0] is c:
                self.completed.popleft()
            st.buffered = max(0, st.buffered - 1)
        return True


class NoOffsetForPartitionError(StromError):
    """Kafka's NoOffsetForPartitionException: a group partition with no committed offset while
    ``auto_offset_reset='none'``; the application must ``seek()`` it (or commit an offset)."""

    def __init__(self, partitions: list[TopicPartition]) -> None:
        names = ", ".join(str(tp) for tp in partitions)
        super().__init__(ErrorCode.OFFSET_OUT_OF_RANGE,
                         f"no committed offset for {names} and auto_offset_reset='none'; "
                         f"seek() these partitions, or set auto_offset_reset to 'earliest' "
                         f"or 'latest'")
        self.partitions = list(partitions)
