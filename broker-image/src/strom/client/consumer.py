"""The synchronous ``Consumer``: manual assignment, seeks, and prefetching ``poll()``.

The fetcher (``fetcher.ConsumerCore``) runs on a private loop thread and keeps the next Fetch in
flight while the application works; ``poll()`` on the caller's thread only decodes buffered
batches (the compiled codec) and moves positions. Consumer groups (``subscribe``, commits) come
with the group coordinator in a later issue; this consumer has ``assign()`` only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import Unpack

from strom.client.fetcher import ConsumerCore, ConsumerOptions, ConsumerSettings
from strom.client.loop_thread import LoopThread
from strom.client.models import OFFSET_BEGINNING, OFFSET_END, TopicPartition
from strom.client.offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.records import Record


class Consumer:
    """Kafka-style consumer with manual partition assignment. Not thread-safe (as in Kafka)."""

    def __init__(self, bootstrap_servers: str | list[str] = "127.0.0.1:9092",
                 **options: Unpack[ConsumerOptions]) -> None:
        self._settings = ConsumerSettings.build(bootstrap_servers, **options)
        self._cond = threading.Condition()
        self._seq = 0
        self._core = ConsumerCore(self._settings, self._notify)
        self._thread = LoopThread("strom-consumer")
        self._closed = False
        self._timeout_s = self._settings.request_timeout_ms / 1000.0

        async def _start() -> None:
            self._core.start()

        self._thread.run(_start())

    def _notify(self) -> None:  # loop thread: records (or an error, or a position) arrived
        with self._cond:
            self._seq += 1
            self._cond.notify_all()

    def _check_open(self) -> None:
        if self._closed:
            raise StromError(ErrorCode.INVALID_REQUEST, "the consumer is closed")

    # --- assignment and positions --------------------------------------------------------
    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly these partitions (replacing any previous assignment)."""
        self._check_open()
        tps = [TopicPartition(*tp) for tp in partitions]
        with self._core.subs.lock:
            self._core.subs.assign(tps)
        self._thread.call_soon(self._core.cancel_fetches)

    def assignment(self) -> set[TopicPartition]:
        with self._core.subs.lock:
            return set(self._core.subs.states)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Next ``poll()`` returns ``partition`` from ``offset`` (or OFFSET_BEGINNING / _END)."""
        self._check_open()
        with self._core.subs.lock:
            self._core.subs.seek(partition, offset)
        self._thread.call_soon(self._core.cancel_fetches)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        for tp in partitions or tuple(self.assignment()):
            self.seek(tp, OFFSET_BEGINNING)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        for tp in partitions or tuple(self.assignment()):
            self.seek(tp, OFFSET_END)

    def position(self, partition: TopicPartition, timeout: float | None = None) -> int:
        """The offset of the next record ``poll()`` returns for ``partition`` (resolving resets)."""
        self._check_open()
        deadline = time.monotonic() + (self._timeout_s if timeout is None else timeout)
        subs = self._core.subs
        while True:
            with self._cond:
                seq = self._seq
            with subs.lock:
                st = subs.state(partition)
                if st.position is not None:
                    return st.position
                if subs.errors:
                    raise subs.errors.popleft()
                if st.reset is None and not st.resetting:
                    raise StromError(ErrorCode.OFFSET_OUT_OF_RANGE,
                                     f"{partition} has no position and auto_offset_reset="
                                     f"'none'; seek() first")
            self._thread.call_soon(self._core.wake)
            left = deadline - time.monotonic()
            if left <= 0:
                raise StromError(ErrorCode.REQUEST_TIMED_OUT,
                                 f"could not resolve the position of {partition}")
            with self._cond:
                if self._seq == seq:
                    self._cond.wait(min(left, 0.5))

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._lookup(partitions, EARLIEST_TIMESTAMP)

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._lookup(partitions, LATEST_TIMESTAMP)

    def _lookup(self, partitions: Iterable[TopicPartition], ts: int) -> dict[TopicPartition, int]:
        self._check_open()
        wanted = {TopicPartition(*tp): ts for tp in partitions}
        found = self._thread.run(self._core.list_offsets(wanted))
        return {tp: off for tp, (off, _) in found.items()}

    def offsets_for_times(self, timestamps: dict[TopicPartition, int]
                          ) -> dict[TopicPartition, tuple[int, int] | None]:
        """{tp: ms} -> {tp: (offset, timestamp) of the first record at or after it, or None}."""
        self._check_open()
        for tp, ts in timestamps.items():
            if ts < 0:
                raise StromError(ErrorCode.INVALID_TIMESTAMP,
                                 f"offsets_for_times: timestamp {ts} for {tp} must be >= 0")
        found = self._thread.run(self._core.list_offsets(
            {TopicPartition(*tp): ts for tp, ts in timestamps.items()}))
        return {tp: (None if off < 0 else (off, ts)) for tp, (off, ts) in found.items()}

    # --- consuming -----------------------------------------------------------------------
    def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[Record]:
        """Records fetched so far (up to ``max_records``), waiting up to ``timeout_ms`` for some."""
        self._check_open()
        limit = max_records or self._settings.max_poll_records
        deadline = time.monotonic() + timeout_ms / 1000.0
        core = self._core
        while True:
            with self._cond:
                seq = self._seq
            records, freed = core.take(limit)
            if freed:
                self._thread.call_soon(core.wake)
            if records:
                return records
            left = deadline - time.monotonic()
            if left <= 0:
                return records
            with self._cond:
                if self._seq == seq:
                    self._cond.wait(left)

    def __iter__(self) -> Iterator[Record]:
        while not self._closed:
            yield from self.poll()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._thread.run(self._core.close(), timeout=10)
        finally:
            self._thread.stop()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
