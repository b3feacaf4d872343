"""The asyncio ``AsyncConsumer``: the same fetcher as ``Consumer``, on the caller's loop.

Methods that may wait on the network are coroutines (``poll``, ``position``, the offset lookups,
``seek_to_beginning``/``seek_to_end`` as in aiokafka, ``close``); ``assign``, ``assignment`` and
``seek`` only change local state and are plain methods.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterable
from types import TracebackType
from typing import Unpack

from strom.client.fetcher import ConsumerCore, ConsumerOptions, ConsumerSettings
from strom.client.models import OFFSET_BEGINNING, OFFSET_END, TopicPartition
from strom.client.offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.records import Record


class AsyncConsumer:
    def __init__(self, bootstrap_servers: str | list[str] = "127.0.0.1:9092",
                 **options: Unpack[ConsumerOptions]) -> None:
        self._settings = ConsumerSettings.build(bootstrap_servers, **options)
        self._event: asyncio.Event | None = None
        self._core = ConsumerCore(self._settings, self._notify)
        self._closed = False
        self._timeout_s = self._settings.request_timeout_ms / 1000.0

    def _notify(self) -> None:
        if self._event is not None:
            self._event.set()

    async def start(self) -> None:
        if self._event is None:
            self._event = asyncio.Event()
        self._core.start()

    def _ensure_started(self) -> None:
        if self._closed:
            raise StromError(ErrorCode.INVALID_REQUEST, "the consumer is closed")
        if self._event is None:
            self._event = asyncio.Event()
            self._core.start()

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._ensure_started()
        with self._core.subs.lock:
            self._core.subs.assign([TopicPartition(*tp) for tp in partitions])
        self._core.cancel_fetches()

    def assignment(self) -> set[TopicPartition]:
        with self._core.subs.lock:
            return set(self._core.subs.states)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self._ensure_started()
        with self._core.subs.lock:
            self._core.subs.seek(partition, offset)
        self._core.cancel_fetches()

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        for tp in partitions or tuple(self.assignment()):
            self.seek(tp, OFFSET_BEGINNING)

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        for tp in partitions or tuple(self.assignment()):
            self.seek(tp, OFFSET_END)

    async def position(self, partition: TopicPartition, timeout: float | None = None) -> int:
        self._ensure_started()
        assert self._event is not None
        deadline = time.monotonic() + (self._timeout_s if timeout is None else timeout)
        subs = self._core.subs
        while True:
            self._event.clear()
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
            self._core.wake()
            left = deadline - time.monotonic()
            if left <= 0:
                raise StromError(ErrorCode.REQUEST_TIMED_OUT,
                                 f"could not resolve the position of {partition}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._event.wait(), min(left, 0.5))

    async def beginning_offsets(self, partitions: Iterable[TopicPartition]
                                ) -> dict[TopicPartition, int]:
        return await self._lookup(partitions, EARLIEST_TIMESTAMP)

    async def end_offsets(self, partitions: Iterable[TopicPartition]
                          ) -> dict[TopicPartition, int]:
        return await self._lookup(partitions, LATEST_TIMESTAMP)

    async def _lookup(self, partitions: Iterable[TopicPartition], ts: int
                      ) -> dict[TopicPartition, int]:
        self._ensure_started()
        found = await self._core.list_offsets({TopicPartition(*tp): ts for tp in partitions})
        return {tp: off for tp, (off, _) in found.items()}

    async def offsets_for_times(self, timestamps: dict[TopicPartition, int]
                                ) -> dict[TopicPartition, tuple[int, int] | None]:
        self._ensure_started()
        for tp, ts in timestamps.items():
            if ts < 0:
                raise StromError(ErrorCode.INVALID_TIMESTAMP,
                                 f"offsets_for_times: timestamp {ts} for {tp} must be >= 0")
        found = await self._core.list_offsets(
            {TopicPartition(*tp): ts for tp, ts in timestamps.items()})
        return {tp: (None if off < 0 else (off, ts)) for tp, (off, ts) in found.items()}

    async def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[Record]:
        self._ensure_started()
        assert self._event is not None
        limit = max_records or self._settings.max_poll_records
        deadline = time.monotonic() + timeout_ms / 1000.0
        while True:
            self._event.clear()
            records, freed = self._core.take(limit)
            if freed:
                self._core.wake()
            if records:
                return records
            left = deadline - time.monotonic()
            if left <= 0:
                return records
            try:
                await asyncio.wait_for(self._event.wait(), left)
            except TimeoutError:
                return []

    async def __aiter__(self) -> AsyncIterator[Record]:
        while not self._closed:
            for record in await self.poll():
                yield record

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._core.close()

    async def __aenter__(self) -> AsyncConsumer:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()
