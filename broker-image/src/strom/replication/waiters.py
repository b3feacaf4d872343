"""One-shot wake-ups for long-polls: a waiter registers an Event on the partitions it watches.

Consumer fetches, follower ReplicaFetches and acks=all produces all wait for "something changed
on partition X" (an append, a high watermark move, a leadership change) and then re-check their
own condition, so one primitive serves all three.

A follower's fetch session (:mod:`strom.replication.sessions`) watches its partitions for as
long as it lives instead of registering for each long-poll: :meth:`AppendWaiters.watch` once,
then every :meth:`~AppendWaiters.notify` of a partition touches the sessions watching it (marks
it for their next answer and wakes their long-poll), so a fetch costs what changed, not the
partitions the session holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Protocol

TopicPartition = tuple[str, int]


class Watcher(Protocol):
    def touch(self, tp: TopicPartition, wake: bool = True) -> None: ...

    def wake(self) -> None: ...


class AppendWaiters:
    def __init__(self) -> None:
        self._waiting: dict[TopicPartition, set[asyncio.Event]] = {}
        self._watchers: dict[TopicPartition, dict[Watcher, None]] = {}
        self.closed = False

    def watch(self, tp: TopicPartition, watcher: Watcher) -> None:
        """Touch ``watcher`` on every notify of ``tp`` until :meth:`unwatch`."""
        self._watchers.setdefault(tp, {})[watcher] = None
        if self.closed:
            watcher.wake()

    def unwatch(self, tp: TopicPartition, watcher: Watcher) -> None:
        watchers = self._watchers.get(tp)
        if watchers is not None:
            watchers.pop(watcher, None)
            if not watchers:
                del self._watchers[tp]

    def mark(self, tp: TopicPartition) -> None:
        """Have the watchers of ``tp`` look at it in their next pass without waking them (a
        retry that should wait for the next fetch, not spin)."""
        for watcher in self._watchers.get(tp, ()):
            watcher.touch(tp, False)

    def register(self, tps: Iterable[TopicPartition]) -> asyncio.Event:
        event = asyncio.Event()
        if self.closed:  # shutting down: nobody waits any more
            event.set()
            return event
        for tp in tps:
            self._waiting.setdefault(tp, set()).add(event)
        return event

    def unregister(self, tps: Iterable[TopicPartition], event: asyncio.Event) -> None:
        for tp in tps:
            events = self._waiting.get(tp)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._waiting[tp]

    def notify(self, tp: TopicPartition) -> None:
        for event in self._waiting.get(tp, ()):
            event.set()
        watchers = self._watchers.get(tp)
        if watchers:
            for watcher in watchers:
                watcher.touch(tp)

    def close(self) -> None:
        """Wake every waiter now and never block again (graceful shutdown)."""
        self.closed = True
        self.notify_all()

    def notify_all(self) -> None:
        for events in self._waiting.values():
            for event in events:
                event.set()
        for watcher in {w for ws in self._watchers.values() for w in ws}:
            watcher.wake()

    def __len__(self) -> int:
        return sum(len(v) for v in self._waiting.values())

    async def wait(self, tps: Iterable[TopicPartition], timeout_s: float) -> None:
        """Wait until one of ``tps`` is notified, or ``timeout_s`` passes."""
        keys = list(tps)
        event = self.register(keys)
        try:
            await asyncio.wait_for(event.wait(), max(timeout_s, 0.0))
        except TimeoutError:
            pass
        finally:
            self.unregister(keys, event)
