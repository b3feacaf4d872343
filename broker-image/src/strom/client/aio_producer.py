"""The asyncio ``AsyncProducer``: the same engine as ``Producer``, on the caller's event loop.

``send()`` is a plain method returning an ``asyncio.Future[RecordMetadata]`` (``await
producer.send(...)`` waits for the acknowledgement; keeping the futures and awaiting them later
pipelines). A record that cannot be appended yet — its topic's metadata is unknown, or
``buffer_memory`` is full — is parked in an ordered queue drained by one task, so records keep
their order; ``await producer.wait_for_capacity()`` lets a fast loop apply backpressure.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Unpack

from strom.client.models import RecordMetadata
from strom.client.producer_batch import DeliveryCallback
from strom.client.sender import (
    BufferFull,
    NeedMetadata,
    ProducerCore,
    ProducerOptions,
    ProducerSettings,
)
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.records import Header

_EMPTY: tuple[Header, ...] = ()

_Parked = tuple[str, bytes | None, bytes | None, int | None, int, Sequence[Header],
                DeliveryCallback | None, "asyncio.Future[RecordMetadata]"]


class AsyncProducer:
    """Kafka-style producer for asyncio. Use ``async with AsyncProducer(...) as p``, or
    ``await p.start()`` ... ``await p.close()``. Same options and defaults as ``Producer``
    (``acks="all"`` with idempotence)."""

    def __init__(self, bootstrap_servers: str | Sequence[str] = "127.0.0.1:9092",
                 **options: Unpack[ProducerOptions]) -> None:
        self._settings = ProducerSettings.build(bootstrap_servers, **options)
        self._core = ProducerCore(self._settings)
        self._max_block_s = self._settings.max_block_ms / 1000.0
        self._parked: deque[_Parked] = deque()
        self._drainer: asyncio.Task[None] | None = None
        self._started = False
        self._closed = False

    async def start(self) -> None:
        if not self._started:
            self._started = True
            self._core.start()

    def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[Header] | None = None,
        on_delivery: DeliveryCallback | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Queue one record; await the returned future for its ``RecordMetadata``."""
        if self._closed:
            raise StromError(ErrorCode.NETWORK_EXCEPTION, "send() after close()")
        if not self._started:
            self._started = True
            self._core.start()
        loop = self._core.loop
        assert loop is not None
        future: asyncio.Future[RecordMetadata] = loop.create_future()
        ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        core = self._core
        ks = 0 if key is None else len(key)
        vs = 0 if value is None else len(value)
        if ks + vs > core.max_record_size:
            core.check_size(ks, vs)
        if not self._parked and partition is None and headers is None:
            appended = core.append_fast(topic, key, value, ts, on_delivery, ks, vs)
            if appended is not None:  # the open batch routing would pick (see append_fast)
                batch, index = appended
                if batch.async_futures is None:
                    batch.async_futures = []
                batch.async_futures.append((index, ts, ks, vs, future))
                return future
        hdrs = _EMPTY if headers is None else headers
        if self._parked or not self._try_append(topic, value, key, partition, ts, hdrs,
                                                on_delivery, future):
            self._parked.append((topic, value, key, partition, ts, hdrs, on_delivery, future))
            if self._drainer is None or self._drainer.done():
                self._drainer = loop.create_task(self._drain_parked())
        return future

    def _try_append(self, topic: str, value: bytes | None, key: bytes | None,
                    partition: int | None, ts: int, hdrs: Sequence[Header],
                    on_delivery: DeliveryCallback | None,
                    future: asyncio.Future[RecordMetadata]) -> bool:
        core = self._core
        try:
            tp, sticky, n = core.route(topic, key, partition)
        except NeedMetadata:
            return False
        except StromError as exc:
            future.set_exception(exc)
            return True
        with core.acc.lock:
            try:
                batch, index, wake, _ = core.append_locked(tp, sticky, n, key, value, ts,
                                                           hdrs, 0)
            except BufferFull:
                return False
            if batch.async_futures is None:
                batch.async_futures = []
            ks = 0 if key is None else len(key)
            vs = 0 if value is None else len(value)
            batch.async_futures.append((index, ts, ks, vs, future))
            if on_delivery is not None:
                batch.add_callback(index, ts, ks, vs, on_delivery)
        if wake:
            core.wake()
        return True

    async def _drain_parked(self) -> None:
        core = self._core
        while self._parked:
            topic, value, key, partition, ts, hdrs, cb, future = self._parked[0]
            try:
                if core.metadata.partition_count(topic) is None:
                    await core.wait_for_topic(topic, self._max_block_s)
                deadline = time.monotonic() + self._max_block_s
                while not self._try_append(topic, value, key, partition, ts, hdrs, cb, future):
                    if core.metadata.partition_count(topic) is None:
                        await core.wait_for_topic(topic, self._max_block_s)
                        continue
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise StromError(ErrorCode.REQUEST_TIMED_OUT,
                                         "buffer_memory stayed full for max_block_ms")
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(core.wait_completion(), left)
            except StromError as exc:
                if not future.done():
                    future.set_exception(exc)
            self._parked.popleft()

    async def wait_for_capacity(self) -> None:
        """Wait until parked sends (metadata or buffer waits) are appended: backpressure."""
        while self._drainer is not None and not self._drainer.done():
            await asyncio.shield(self._drainer)

    async def send_and_wait(self, topic: str, value: bytes | None = None,
                            key: bytes | None = None, **kwargs: Any) -> RecordMetadata:
        return await self.send(topic, value, key, **kwargs)

    async def flush(self, timeout: float | None = None) -> None:
        await self.wait_for_capacity()
        if self._started:
            await self._core.flush(timeout)

    async def partitions_for(self, topic: str) -> list[int]:
        await self.start()
        if self._core.metadata.partition_count(topic) is None:
            await self._core.wait_for_topic(topic, self._max_block_s)
        return self._core.metadata.partitions_for(topic)

    async def close(self, timeout: float | None = None) -> None:
        if self._closed:
            return
        self._closed = True
        if self._started:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wait_for_capacity(), timeout)
            if self._drainer is not None:
                self._drainer.cancel()
            await self._core.close(timeout)
        else:
            await self._core.conns.close()

    async def __aenter__(self) -> AsyncProducer:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()
