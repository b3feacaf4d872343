"""The synchronous ``Consumer``: groups or manual assignment, seeks, and prefetching ``poll()``.

The fetcher (``fetcher.ConsumerCore``) runs on a private loop thread and keeps the next Fetch in
flight while the application works; ``poll()`` on the caller's thread only decodes buffered
batches (the compiled codec) and moves positions. With ``group_id``, ``subscribe()`` joins a
consumer group: the membership (``group_member.GroupMember``) runs on the same loop thread, and
``poll()`` drives its rebalances step by step so the rebalance listener runs here, on the
caller's thread, as in Kafka.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any, Unpack

from strom.client.consumer_front import ConsumerFront
from strom.client.consumer_settings import ConsumerOptions
from strom.client.group_member import GroupMember, listener_calls
from strom.client.group_state import RebalanceCallbacks
from strom.client.loop_thread import LoopThread
from strom.client.models import OFFSET_BEGINNING, OFFSET_END, TopicPartition
from strom.client.offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from strom.protocol.errors import StromError
from strom.protocol.records import Record

log = logging.getLogger("strom.client.consumer")


class Consumer(ConsumerFront):
    """Kafka-style consumer: a group member (``subscribe``) or manually assigned (``assign``).

    Not thread-safe (as in Kafka): one thread calls its methods.
    """

    def __init__(self, bootstrap_servers: str | list[str] = "127.0.0.1:9092",
                 **options: Unpack[ConsumerOptions]) -> None:
        self._cond = threading.Condition()
        self._seq = 0
        super().__init__(bootstrap_servers, **options)
        self._thread = LoopThread("strom-consumer")
        self._step: concurrent.futures.Future[RebalanceCallbacks | None] | None = None

        async def _start() -> None:
            self._core.start()

        self._thread.run(_start())

    def _notify(self) -> None:  # loop thread: records (or an error, or a position) arrived
        with self._cond:
            self._seq += 1
            self._cond.notify_all()

    def _schedule(self, fn: Callable[..., object], *args: Any) -> None:
        self._thread.call_soon(fn, *args)

    # --- positions -----------------------------------------------------------------------
    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self._seek_all(partitions, OFFSET_BEGINNING)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        self._seek_all(partitions, OFFSET_END)

    def position(self, partition: TopicPartition, timeout: float | None = None) -> int:
        """The offset of the next record ``poll()`` returns for ``partition`` (resolving resets)."""
        self._ready()
        deadline = time.monotonic() + (self._timeout_s if timeout is None else timeout)
        while True:
            with self._cond:
                seq = self._seq
            position = self._known_position(partition)
            if position is not None:
                return position
            self._thread.call_soon(self._core.wake)
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._position_timeout(partition)
            with self._cond:
                if self._seq == seq:
                    self._cond.wait(min(left, 0.5))

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._lookup(partitions, EARLIEST_TIMESTAMP)

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._lookup(partitions, LATEST_TIMESTAMP)

    def _lookup(self, partitions: Iterable[TopicPartition], ts: int) -> dict[TopicPartition, int]:
        self._ready()
        wanted = {TopicPartition(*tp): ts for tp in partitions}
        found = self._thread.run(self._core.list_offsets(wanted))
        return {tp: off for tp, (off, _) in found.items()}

    def offsets_for_times(self, timestamps: dict[TopicPartition, int]
                          ) -> dict[TopicPartition, tuple[int, int] | None]:
        """{tp: ms} -> {tp: (offset, timestamp) of the first record at or after it, or None}."""
        self._ready()
        wanted = self._timestamp_request(timestamps)
        return self._offsets_and_times(self._thread.run(self._core.list_offsets(wanted)))

    # --- consumer groups -----------------------------------------------------------------
    def subscribe(self, topics: list[str] | None = None, pattern: str | re.Pattern[str] | None
                  = None, listener: object | None = None) -> None:
        """Join ``group_id`` reading ``topics`` (or every topic matching ``pattern``, re-checked
        every ``metadata_max_age_ms``); the group's assignor decides which partitions are ours.
        ``listener`` (a ``ConsumerRebalanceListener``) hears of every change inside ``poll()``.
        Subscribing to no topic unsubscribes."""
        if not self._start_subscription(topics, pattern, listener):
            self.unsubscribe()

    def unsubscribe(self) -> None:
        """Leave the group (revoking the partitions first) or drop a manual assignment."""
        self._ready()
        g = self._group
        if g is not None and g.subscribed:
            self._wait_step()
            self._revoke_and_leave(g, "the consumer unsubscribed from all topics")
            g.unsubscribe()
        self._drop_assignment()

    def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Commit ``offsets`` (default: the position of every assigned partition, i.e. what
        ``poll()`` has returned so far) and wait. Raises ``CommitFailedError`` if the group
        rebalanced meanwhile."""
        g, wanted = self._commit_request(offsets)
        self._thread.run(g.commit(wanted))

    def committed(self, partitions: Iterable[TopicPartition]
                  ) -> dict[TopicPartition, int | None]:
        """The group's committed offset per partition (None where nothing is committed)."""
        g = self._member("committed()")
        return self._thread.run(g.fetch_committed([TopicPartition(*tp) for tp in partitions]))

    def _deliver(self, cb: RebalanceCallbacks) -> None:
        for fn, partitions in listener_calls(self._listener, cb):
            fn(partitions)

    def _revoke_and_leave(self, g: GroupMember, reason: str,
                          timeout: float | None = None) -> None:
        """Settle, hand the owned partitions to the listener (revoked, or lost without a
        generation), then leave the group."""
        self._thread.run(g.settle())
        cb = self._leaving_callbacks(g)
        if cb is not None:
            self._deliver(cb)
        self._thread.run(g.leave(reason), timeout=timeout)

    def _wait_step(self) -> None:
        """Deliver what a finished rebalance step has to say; cancel one still on the network
        (a JoinGroup may wait for the whole group: leaving must not wait for it)."""
        fut, self._step = self._step, None
        if fut is None:
            return
        if not fut.done():
            fut.cancel()
            with contextlib.suppress(Exception):
                fut.result(1.0)
            return
        try:
            cb = fut.result(0)
        except Exception:  # leaving anyway: a failed step changes nothing here
            return
        if cb is not None:
            self._deliver(cb)

    def _drive_group(self, g: GroupMember, deadline: float) -> None:
        """Run rebalance steps until the membership is settled or the poll time is up."""
        while True:
            fut = self._step
            if fut is None:
                if not g.needs_step(time.monotonic() * 1000.0):
                    return
                fut = self._step = asyncio.run_coroutine_threadsafe(g.step(), self._thread.loop)
            try:
                cb = fut.result(max(0.0, deadline - time.monotonic()))
            except concurrent.futures.TimeoutError:
                return
            finally:
                if fut.done():
                    self._step = None
            if cb is not None:
                self._deliver(cb)
            elif time.monotonic() >= deadline:
                return

    # --- consuming -----------------------------------------------------------------------
    def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[Record]:
        """Records fetched so far (up to ``max_records``), waiting up to ``timeout_ms`` for some."""
        self._ready()
        limit = max_records or self._settings.max_poll_records
        deadline = time.monotonic() + timeout_ms / 1000.0
        core = self._core
        g = self._poll_prelude()
        while True:
            with self._cond:
                seq = self._seq
            if g is not None and g.subscribed:
                self._drive_group(g, deadline)
            records, freed = core.take(limit)
            if freed:
                self._thread.call_soon(core.wake)
            if records:
                return records
            left = deadline - time.monotonic()
            if left <= 0:
                return records
            if g is not None:
                left = min(left, 0.1)  # heartbeats and pattern checks may call for a rejoin
            with self._cond:
                if self._seq == seq:
                    self._cond.wait(left)

    def __iter__(self) -> Iterator[Record]:
        while not self._closed:
            yield from self.poll()

    def close(self) -> None:
        """Commit (with auto-commit), revoke, leave the group (dynamic members), stop."""
        if self._closed:
            return
        try:
            self._leave_group()
        finally:
            self._closed = True
            try:
                self._thread.run(self._core.close(), timeout=10)
            finally:
                self._thread.stop()

    def _leave_group(self) -> None:
        g = self._group
        if g is None:
            return
        self._wait_step()
        try:
            if self._commit_on_close(g):
                try:
                    self._thread.run(g.commit(), timeout=self._timeout_s)
                except (StromError, TimeoutError) as exc:
                    log.warning("group %s: commit on close failed: %s", g.group_id, exc)
            self._run_commit_callbacks()
            if g.subscribed:
                self._revoke_and_leave(g, "the consumer is being closed", timeout=self._timeout_s)
        finally:
            self._thread.run(g.close(), timeout=self._timeout_s)

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

