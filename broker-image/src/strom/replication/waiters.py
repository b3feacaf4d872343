"""One-shot wake-ups for long-polls: a waiter registers an Event on the partitions it watches.

Consumer fetches, follower ReplicaFetches and acks=all produces all wait for "something changed
on partition X" (an append, a high watermark move, a leadership change) and then re-check their
own condition, so one primitive serves all three.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

TopicPartition = tuple[str, int]


class AppendWaiters:
    def __init__(self) -> None:
        self._waiting: dict[TopicPartition, set[asyncio.Event]] = {}
        self.closed = False

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

    def close(self) -> None:
        """Wake every waiter now and never block again (graceful shutdown)."""
        self.closed = True
        self.notify_all()

    def notify_all(self) -> None:
        for events in self._waiting.values():
            for event in events:
                event.set()

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
