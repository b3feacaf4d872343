"""The asyncio ``AsyncConsumer``: the same fetcher and group membership as ``Consumer``, on the
caller's loop.

Methods that may wait on the network are coroutines (``poll``, ``position``, the offset lookups,
``seek_to_beginning``/``seek_to_end`` as in aiokafka, ``commit``, ``committed``, ``unsubscribe``,
``close``); ``assign``, ``assignment``, ``seek``, ``subscribe`` and ``commit_async`` only change
local state or start work, and are plain methods. Rebalance listener methods may be plain or
coroutine functions; they run inside ``poll()``, in the caller's task.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import re
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, Unpack

from strom.client.consumer_front import ConsumerFront
from strom.client.consumer_settings import ConsumerOptions
from strom.client.group_member import GroupMember, listener_calls
from strom.client.group_state import RebalanceCallbacks
from strom.client.models import OFFSET_BEGINNING, OFFSET_END, TopicPartition
from strom.client.offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.records import Record

log = logging.getLogger("strom.client.consumer")


class AsyncConsumer(ConsumerFront):
    """The asyncio twin of ``Consumer``: a group member (``subscribe``) or manually assigned."""

    def __init__(self, bootstrap_servers: str | list[str] = "127.0.0.1:9092",
                 **options: Unpack[ConsumerOptions]) -> None:
        self._event: asyncio.Event | None = None
        super().__init__(bootstrap_servers, **options)
        self._step: asyncio.Task[RebalanceCallbacks | None] | None = None

    def _notify(self) -> None:
        if self._event is not None:
            self._event.set()

    def _schedule(self, fn: Callable[..., object], *args: Any) -> None:
        fn(*args)  # the fetcher runs on the caller's loop

    async def start(self) -> None:
        if self._event is None:
            self._event = asyncio.Event()
        self._core.start()

    def _ready(self) -> None:
        super()._ready()
        if self._event is None:
            self._event = asyncio.Event()
            self._core.start()

    # --- consumer groups -----------------------------------------------------------------
    def subscribe(self, topics: list[str] | None = None, pattern: str | re.Pattern[str] | None
                  = None, listener: object | None = None) -> None:
        """As ``Consumer.subscribe``; the join happens in the following ``poll()`` calls."""
        if not self._start_subscription(topics, pattern, listener):
            raise StromError(ErrorCode.INVALID_REQUEST,
                             "subscribe([]) on AsyncConsumer: call await unsubscribe() instead")

    async def unsubscribe(self) -> None:
        self._ready()
        g = self._group
        if g is not None and g.subscribed:
            await self._settle_step()
            await self._revoke_and_leave(g, "the consumer unsubscribed from all topics")
            g.unsubscribe()
        self._drop_assignment()

    async def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """As ``Consumer.commit``."""
        g, wanted = self._commit_request(offsets)
        await g.commit(wanted)

    async def committed(self, partitions: Iterable[TopicPartition]
                        ) -> dict[TopicPartition, int | None]:
        g = self._member("committed()")
        return await g.fetch_committed([TopicPartition(*tp) for tp in partitions])

    async def _deliver(self, cb: RebalanceCallbacks) -> None:
        for fn, partitions in listener_calls(self._listener, cb):
            result = fn(partitions)
            if inspect.isawaitable(result):
                await result

    async def _revoke_and_leave(self, g: GroupMember, reason: str) -> None:
        """Settle, hand the owned partitions to the listener (revoked, or lost without a
        generation), then leave the group."""
        await g.settle()
        cb = self._leaving_callbacks(g)
        if cb is not None:
            await self._deliver(cb)
        await g.leave(reason)

    async def _settle_step(self) -> None:
        """Deliver what a finished step has to say; cancel one still waiting on the network."""
        task, self._step = self._step, None
        if task is None:
            return
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, StromError):
                await task
            return
        with contextlib.suppress(asyncio.CancelledError, StromError):
            cb = task.result()
            if cb is not None:
                await self._deliver(cb)

    async def _drive_group(self, g: GroupMember, deadline: float) -> None:
        while True:
            task = self._step
            if task is None:
                if not g.needs_step(time.monotonic() * 1000.0):
                    return
                task = self._step = asyncio.get_running_loop().create_task(g.step())
            left = max(0.0, deadline - time.monotonic())
            await asyncio.wait({task}, timeout=left)
            if not task.done():
                return
            self._step = None
            cb = task.result()
            if cb is not None:
                await self._deliver(cb)
            elif time.monotonic() >= deadline:
                return

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self._seek_all(partitions, OFFSET_BEGINNING)

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        self._seek_all(partitions, OFFSET_END)

    async def position(self, partition: TopicPartition, timeout: float | None = None) -> int:
        self._ready()
        assert self._event is not None
        deadline = time.monotonic() + (self._timeout_s if timeout is None else timeout)
        while True:
            self._event.clear()
            position = self._known_position(partition)
            if position is not None:
                return position
            self._core.wake()
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._position_timeout(partition)
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
        self._ready()
        found = await self._core.list_offsets({TopicPartition(*tp): ts for tp in partitions})
        return {tp: off for tp, (off, _) in found.items()}

    async def offsets_for_times(self, timestamps: dict[TopicPartition, int]
                                ) -> dict[TopicPartition, tuple[int, int] | None]:
        self._ready()
        wanted = self._timestamp_request(timestamps)
        return self._offsets_and_times(await self._core.list_offsets(wanted))

    async def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[Record]:
        self._ready()
        assert self._event is not None
        limit = max_records or self._settings.max_poll_records
        deadline = time.monotonic() + timeout_ms / 1000.0
        g = self._poll_prelude()
        while True:
            self._event.clear()
            if g is not None and g.subscribed:
                await self._drive_group(g, deadline)
            records, freed = self._core.take(limit)
            if freed:
                self._core.wake()
            if records:
                return records
            left = deadline - time.monotonic()
            if left <= 0:
                return records
            if g is not None:
                left = min(left, 0.1)  # heartbeats and pattern checks may call for a rejoin
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._event.wait(), left)

    async def __aiter__(self) -> AsyncIterator[Record]:
        while not self._closed:
            for record in await self.poll():
                yield record

    async def close(self) -> None:
        """Commit (with auto-commit), revoke, leave the group (dynamic members), stop."""
        if self._closed:
            return
        try:
            await self._leave_group()
        finally:
            self._closed = True
            await self._core.close()

    async def _leave_group(self) -> None:
        g = self._group
        if g is None or self._event is None:
            return
        await self._settle_step()
        try:
            if self._commit_on_close(g):
                try:
                    await g.commit()
                except StromError as exc:
                    log.warning("group %s: commit on close failed: %s", g.group_id, exc)
            self._run_commit_callbacks()
            if g.subscribed:
                await self._revoke_and_leave(g, "the consumer is being closed")
        finally:
            await g.close()

    async def __aenter__(self) -> AsyncConsumer:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()
