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
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from types import TracebackType
from typing import Unpack

from strom.client.fetcher import ConsumerCore, ConsumerOptions, ConsumerSettings
from strom.client.group_member import (
    GroupMember,
    RebalanceCallbacks,
    check_listener,
    compile_subscription,
    listener_calls,
    mixed_error,
    no_group_error,
    validate_offsets,
)
from strom.client.models import OFFSET_BEGINNING, OFFSET_END, TopicPartition
from strom.client.offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.records import Record

log = logging.getLogger("strom.client.consumer")

CommitCallback = Callable[[dict[TopicPartition, int], BaseException | None], object]


class AsyncConsumer:
    """The asyncio twin of ``Consumer``: a group member (``subscribe``) or manually assigned."""

    def __init__(self, bootstrap_servers: str | list[str] = "127.0.0.1:9092",
                 **options: Unpack[ConsumerOptions]) -> None:
        self._settings = ConsumerSettings.build(bootstrap_servers, **options)
        self._event: asyncio.Event | None = None
        self._core = ConsumerCore(self._settings, self._notify)
        self._closed = False
        self._timeout_s = self._settings.request_timeout_ms / 1000.0
        self._group = (GroupMember(self._settings, self._core)
                       if self._settings.group_id is not None else None)
        self._listener: object | None = None
        self._manual = False
        self._step: asyncio.Task[RebalanceCallbacks | None] | None = None
        self._commit_done: deque[tuple[CommitCallback, dict[TopicPartition, int],
                                       BaseException | None]] = deque()
        self._next_auto_commit = time.monotonic() + self._settings.auto_commit_interval_ms / 1e3

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
        tps = [TopicPartition(*tp) for tp in partitions]
        if self._group is not None and self._group.subscribed:
            raise mixed_error()
        self._manual = bool(tps)
        with self._core.subs.lock:
            self._core.subs.assign(tps)
        self._core.cancel_fetches()

    # --- consumer groups -----------------------------------------------------------------
    def subscribe(self, topics: list[str] | None = None, pattern: str | re.Pattern[str] | None
                  = None, listener: object | None = None) -> None:
        """As ``Consumer.subscribe``; the join happens in the following ``poll()`` calls."""
        self._ensure_started()
        if self._group is None:
            raise no_group_error("subscribe()")
        if self._manual:
            raise mixed_error()
        names, compiled = compile_subscription(topics, pattern)
        check_listener(listener)
        if compiled is None and not names:
            raise StromError(ErrorCode.INVALID_REQUEST,
                             "subscribe([]) on AsyncConsumer: call await unsubscribe() instead")
        self._listener = listener
        self._group.subscribe(names, compiled)
        self._core.wake()

    def subscription(self) -> set[str]:
        g = self._group
        return set(g.topics) if g is not None and g.subscribed else set()

    async def unsubscribe(self) -> None:
        self._ensure_started()
        g = self._group
        if g is not None and g.subscribed:
            await self._settle_step()
            await self._revoke_and_leave(g, "the consumer unsubscribed from all topics")
            g.unsubscribe()
        self._manual = False
        with self._core.subs.lock:
            self._core.subs.assign([])
        self._core.cancel_fetches()

    async def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """As ``Consumer.commit``."""
        self._ensure_started()
        g = self._group
        if g is None:
            raise no_group_error("commit()")
        self._run_commit_callbacks()
        await g.commit(None if offsets is None else validate_offsets(offsets))

    def commit_async(self, offsets: Mapping[TopicPartition, int] | None = None,
                     callback: CommitCallback | None = None) -> None:
        """As ``Consumer.commit_async``: ``callback`` runs in a later ``poll()``."""
        self._ensure_started()
        g = self._group
        if g is None:
            raise no_group_error("commit_async()")

        def done(committed: dict[TopicPartition, int], error: BaseException | None) -> None:
            if callback is not None:
                self._commit_done.append((callback, committed, error))
                self._notify()

        g.commit_in_background(None if offsets is None else validate_offsets(offsets), done)

    async def committed(self, partitions: Iterable[TopicPartition]
                        ) -> dict[TopicPartition, int | None]:
        self._ensure_started()
        g = self._group
        if g is None:
            raise no_group_error("committed()")
        return await g.fetch_committed([TopicPartition(*tp) for tp in partitions])

    def _run_commit_callbacks(self) -> None:
        while self._commit_done:
            callback, offsets, error = self._commit_done.popleft()
            callback(offsets, error)

    def _maybe_auto_commit(self, g: GroupMember) -> None:
        if not self._settings.enable_auto_commit:
            return
        now = time.monotonic()
        if now < self._next_auto_commit:
            return
        self._next_auto_commit = now + self._settings.auto_commit_interval_ms / 1000.0
        if (g.subscribed and g.generation >= 0 and not g.rejoin_needed) or (
                self._manual and not g.subscribed):
            g.commit_in_background(None, None)

    async def _deliver(self, cb: RebalanceCallbacks) -> None:
        for fn, partitions in listener_calls(self._listener, cb):
            result = fn(partitions)
            if inspect.isawaitable(result):
                await result

    async def _revoke_and_leave(self, g: GroupMember, reason: str) -> None:
        """Settle, hand the owned partitions to the listener (revoked, or lost without a
        generation), then leave the group."""
        await g.settle()
        owned = sorted(g.owned)
        if owned:
            await self._deliver(RebalanceCallbacks(revoked=owned) if g.generation >= 0
                                else RebalanceCallbacks(lost=owned))
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
        g = self._group
        if g is not None:
            g.last_poll_ms = time.monotonic() * 1000.0
            self._run_commit_callbacks()
            self._maybe_auto_commit(g)
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
            if self._settings.enable_auto_commit and (g.generation >= 0 or self._manual):
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
