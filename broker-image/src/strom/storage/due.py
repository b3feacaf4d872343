"""A due-time queue: each key is visited when its time comes, so an idle key costs no tick.

Why: the broker checks every second for time-based work on its logs (a roll after
``segment.ms``, ``flush.ms``, producer-id expiry). Walking every log for it cost ~12 µs per log
here: 12 % of a core at 10,000 replicas per broker for logs in which nothing happens (issue 21
item 2). Instead each log says when its next such check is due and tells when a change moves it
earlier (:class:`~strom.storage.manager.LogManager` keeps the queue); a tick takes only the keys
whose time has come, at O(log n) each.

The queue may visit a key *early* (a due time that moved later is not withdrawn: the visit finds
nothing to do and the key is put back at its new time), never late: whoever moves a key's due
time earlier calls :meth:`DueQueue.schedule`. Pure: no clock, no I/O.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["DueQueue"]

K = TypeVar("K", bound=Hashable)
_SLACK = 64
"""Stale heap entries tolerated beyond the live keys before the heap is rebuilt."""


class DueQueue(Generic[K]):
    """Keys with a due time (ms); :meth:`pop_due` returns those whose time has come."""

    def __init__(self) -> None:
        self._due: dict[K, int] = {}
        """Each scheduled key's due time: the truth (heap entries that disagree are stale)."""
        self._heap: list[tuple[int, int, K]] = []
        self._order = itertools.count()
        """Ties broken by scheduling order (keys need not be comparable)."""

    def __len__(self) -> int:
        return len(self._due)

    def __contains__(self, key: object) -> bool:
        return key in self._due

    def due_ms(self, key: K) -> int | None:
        """When ``key`` is due, or None if it is not scheduled."""
        return self._due.get(key)

    def schedule(self, key: K, at_ms: int) -> None:
        """Visit ``key`` at ``at_ms``, or earlier if it is already due earlier."""
        current = self._due.get(key)
        if current is not None and current <= at_ms:
            return
        self._due[key] = at_ms
        heapq.heappush(self._heap, (at_ms, next(self._order), key))
        if len(self._heap) > 2 * len(self._due) + _SLACK:
            self._rebuild()

    def discard(self, key: K) -> None:
        """Forget ``key`` (its heap entry is dropped when it comes up)."""
        self._due.pop(key, None)

    def pop_due(self, now_ms: int) -> list[K]:
        """The keys due at or before ``now_ms``, earliest first; they leave the queue (visit
        them, then :meth:`schedule` each at its next due time)."""
        heap, due, out = self._heap, self._due, []
        while heap and heap[0][0] <= now_ms:
            at_ms, _, key = heapq.heappop(heap)
            if due.get(key) == at_ms:
                del due[key]
                out.append(key)
        return out

    def _rebuild(self) -> None:
        order = self._order
        self._heap = [(at_ms, next(order), key) for key, at_ms in self._due.items()]
        heapq.heapify(self._heap)
