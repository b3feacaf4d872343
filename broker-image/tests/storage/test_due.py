"""DueQueue: keys come out when their time comes, earliest first, never late."""

from __future__ import annotations

from strom.storage.due import DueQueue


def test_keys_come_out_when_due_earliest_first() -> None:
    queue: DueQueue[str] = DueQueue()
    queue.schedule("b", 200)
    queue.schedule("a", 100)
    queue.schedule("c", 300)
    assert queue.pop_due(99) == []
    assert queue.pop_due(250) == ["a", "b"]
    assert len(queue) == 1 and "c" in queue and "a" not in queue
    assert queue.pop_due(10_000) == ["c"]
    assert queue.pop_due(10_000) == []


def test_an_earlier_time_wins_a_later_one_is_ignored() -> None:
    queue: DueQueue[str] = DueQueue()
    queue.schedule("k", 500)
    queue.schedule("k", 900)  # later: the key is still visited at 500 (early is harmless)
    assert queue.due_ms("k") == 500
    queue.schedule("k", 100)  # earlier: never visited late
    assert queue.due_ms("k") == 100
    assert queue.pop_due(100) == ["k"]
    assert queue.pop_due(1000) == []  # the stale entries at 500 do not bring it back
    assert len(queue) == 0


def test_discarded_keys_never_come_out_and_can_come_back() -> None:
    queue: DueQueue[str] = DueQueue()
    queue.schedule("k", 10)
    queue.discard("k")
    assert queue.pop_due(100) == []
    queue.schedule("k", 50)
    assert queue.pop_due(100) == ["k"]


def test_stale_entries_do_not_pile_up() -> None:
    queue: DueQueue[int] = DueQueue()
    for key in range(10):
        for at in range(1000, 0, -1):  # each reschedule earlier leaves a stale entry
            queue.schedule(key, at)
    assert len(queue._heap) <= 2 * len(queue) + 64
    assert queue.pop_due(1) == list(range(10))
