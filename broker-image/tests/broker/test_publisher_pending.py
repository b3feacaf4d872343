"""The publisher's pending partitions: first added, first published, each once, O(1) a pop.

Issue 21: the pending set was a dict popped from the front with ``next(iter(d))``, which in
CPython walks over every entry deleted before it: publishing 10,000 partitions spent 41 ms
and 30,000 spent 0.35 s just finding the next key (quadratic).
"""

from __future__ import annotations

import time

from strom.broker.publisher import PendingKeys


def test_keys_come_out_in_the_order_first_added_each_once() -> None:
    keys = PendingKeys()
    for tp in [("b", 1), ("a", 0), ("b", 1), ("a", 2), ("a", 0)]:
        keys.add(tp)
    assert len(keys) == 3
    assert [keys.pop(), keys.pop()] == [("b", 1), ("a", 0)]
    keys.add(("b", 1))  # popped, so it may come back
    assert [keys.pop(), keys.pop()] == [("a", 2), ("b", 1)]
    assert not keys


def _pop_seconds(keys: PendingKeys, count: int) -> float:
    start = time.perf_counter()
    for _ in range(count):
        keys.pop()
    return time.perf_counter() - start


def test_a_pop_costs_the_same_however_many_went_before() -> None:
    """2,000 pops after 70,000 others cost about what the first 2,000 did (a dict popped from
    the front took ~50 times longer: each pop walked the 70,000 deleted entries)."""
    best_first, best_last = float("inf"), float("inf")
    for _ in range(3):
        keys = PendingKeys()
        for i in range(74_000):
            keys.add(("t", i))
        best_first = min(best_first, _pop_seconds(keys, 2_000))
        _pop_seconds(keys, 70_000)
        best_last = min(best_last, _pop_seconds(keys, 2_000))
    assert best_last < 5 * best_first + 0.005, (best_first, best_last)
